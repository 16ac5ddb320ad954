package filter

import (
	"testing"
)

// The signature condition is necessary: every properties line an
// expression matches passes its signature check (a grid of expressions
// and lines built to hit each conversion: escapes, numbers written
// differently, duplicate keys, keys without values, booleans).
func TestSignatureSound(t *testing.T) {
	values := []string{"", "0", "00", "-0", "0.0", "1", "1.0", "1e0", "+1", "%31", "15", "1%35", "x", "X", "y%27z", "y'z",
		"a+b", "a%20b", "true", "TRUE", "9007199254740993", "9007199254740992", "-1.5", "2e3", "%zz", "+"}
	keys := []string{"a", "b", "amount", "a+b", "a%20b", "tag", "keys", "odd-name", "t%61g"}
	var lines []string
	for _, k := range keys {
		for _, v := range values {
			lines = append(lines, k+"="+v, "z=1&"+k+"="+v, k+"="+v+"&"+k+"=2", k, k+"&"+k+"="+v)
		}
	}
	exprs := []string{
		"a = 0", "a = 1", "a = '1'", "a = 'x'", "a <> 1", "NOT a = 1", "a > 0", "a BETWEEN 0 AND 2", "a NOT BETWEEN 0 AND 2",
		"a IN (1, 'x', 15)", "a NOT IN (1, 'x')", "a IS NULL", "a IS NOT NULL", "NOT a IS NULL", "a = TRUE", "a = FALSE",
		"amount = 15", "amount = 15.0", "amount = 1.5e1", "b = 'y''z'", "b = 'a b'", "\"a b\" = 1", "\"a b\" = 'x'",
		"\"a+b\" = 1", "tag = 'x'", "TAGS = 'x'", "TAGS IN ('x', '0')", "a = 9007199254740992", "a = 9007199254740993",
		"a = 1 OR b = 1", "a = 1 AND b = 1", "NOT (a = 1 AND b = 1)", "NOT (a = 1 OR b IS NULL)", "1 = a", "'x' = a",
		"a = b", "NOT a = b", "a = -0", "a = 0.0", "a = -1.5", "a = 2000", "TRUE", "FALSE", "NOT FALSE",
		"(a = 1 OR a = 2 OR a = 3) AND (b = 1 OR b = 2 OR b = 3) AND (amount = 1 OR amount = 2 OR amount = 15)",
		"a IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10) OR b IN ('x', 'y', 'z')", "bornTime > 0 AND a = 1", "reconsumeTimes = 0 OR a = 1",
		"\"t%61g\" = 'x'",
	}
	checked := 0
	for _, src := range exprs {
		e, err := Compile(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		for _, l := range lines {
			m := &Message{Props: []byte(l), BornTime: 5}
			if e.Match(m) {
				checked++
				if !e.MaySignature(Signature(m.Props)) {
					t.Errorf("%q matches %q but its signature check skips it", src, l)
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d matches checked", checked)
	}
}

// The signature check skips what it can prove does not match: the
// benchmark's expression skips the other values of its property, and
// expressions without a usable condition check nothing.
func TestSignatureSkips(t *testing.T) {
	e := MustCompile("bench = 0")
	if !e.UsesSignature() {
		t.Fatal("bench = 0 does not use signatures")
	}
	for i := 1; i < 10; i++ {
		if e.MaySignature(Signature([]byte("bench=" + string(rune('0'+i))))) {
			t.Errorf("bench=%d passes the signature check of bench = 0", i)
		}
	}
	for _, l := range []string{"bench=0", "bench=00", "bench=0.0", "x=1&bench=-0"} {
		if !e.MaySignature(Signature([]byte(l))) {
			t.Errorf("%q fails the signature check of bench = 0", l)
		}
	}
	skip := []struct{ expr, line string }{
		{"amount > 100", "price=5"},
		{"TAGS IN ('paid', 'refunded')", "tag=new"},
		{"a = 'x' AND b IS NOT NULL", "a=x"},
		{"NOT (a IS NULL)", "b=1"},
		{"FALSE", "a=1"},
	}
	for _, c := range skip {
		if MustCompile(c.expr).MaySignature(Signature([]byte(c.line))) {
			t.Errorf("%q passes the signature check of %q", c.line, c.expr)
		}
	}
	for _, src := range []string{"a IS NULL", "NOT a = 1 OR TRUE", "bornTime > 0", "a = TRUE OR b IS NULL"} {
		if MustCompile(src).UsesSignature() {
			t.Errorf("%q claims to use signatures", src)
		}
	}
}

func TestSignatureNoAlloc(t *testing.T) {
	props := []byte("tag=paid&keys=o-1%20o-2&amount=1%35&x=2.5")
	e := MustCompile("amount = 15 AND x > 1")
	if n := testing.AllocsPerRun(100, func() {
		if !e.MaySignature(Signature(props)) {
			t.Fatal("skipped")
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
