package filter

import (
	"errors"
	"testing"
)

var fuzzSeeds = []string{
	"TAGS IN ('paid','refunded') AND amount > 100",
	"NOT (a = 1 OR b <> 'x') AND c IS NOT NULL",
	"a BETWEEN -1.5 AND 2e3 OR a NOT IN ('x', 'y''z', 3)",
	"\"odd-name\" = TRUE AND bornTime >= 0 AND reconsumeTimes < 3",
	"((((a = 1))))",
	"a = 'unterminated",
	"a > 'x'",
	"a = 1e999",
	"NOT NOT NOT FALSE",
	"tag = 'paid' AND amount = 15 AND TAGS IN ('paid')",
	"a = 1.0 OR b = 'y''z' OR a IN (2, '-1.5') OR NOT c <> ''",
	"NOT (a IS NULL OR b = FALSE) AND (\"a b\" = 1 OR amount = 15)",
	"",
}

var fuzzProps = []string{
	"",
	"tag=paid&keys=o-1%20o-2&amount=150",
	"a=1&b=x&c=&odd-name=true",
	"a=-1.5&b=y%27z&a=2",
	"=&&a&a=%zz&b=+",
	"t%61g=paid&tag=x&amount=1%35&a+b=1",
}

// FuzzCompile compiles arbitrary text: it must never panic or hang; an error
// is a SyntaxError whose position lies inside the expression (or just past
// its end); a compiled expression evaluates on any properties line, and an
// expression and its negation never both match.
func FuzzCompile(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, fuzzProps[i%len(fuzzProps)])
	}
	f.Fuzz(func(t *testing.T, src, props string) {
		e, err := Compile(src)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Compile(%q): %T %v", src, err, err)
			}
			if se.Pos < 1 || se.Pos > len(src)+1 {
				t.Fatalf("Compile(%q): position %d outside 1..%d", src, se.Pos, len(src)+1)
			}
			return
		}
		if e.String() != src {
			t.Fatalf("String() = %q, want %q", e.String(), src)
		}
		m := &Message{Props: []byte(props), BornTime: 5, ReconsumeTimes: 1}
		got := e.Match(m)
		// The one-pass scan of the properties gives what looking each
		// reference up does.
		if slow := e.eval(e.root, m, nil) == yes; slow != got {
			t.Fatalf("%q on %q: one-pass %v, per-reference lookup %v", src, props, got, slow)
		}
		// The signature condition is necessary: a match passes it.
		if got && !e.MaySignature(Signature(m.Props)) {
			t.Fatalf("%q matches %q but its signature check skips it", src, props)
		}
		if len(src) < MaxLen-10 {
			neg, err := Compile("NOT (" + src + ")")
			if err == nil && got && neg.Match(m) {
				t.Fatalf("%q and its negation both match %q", src, props)
			}
			if err == nil && neg.Match(m) && !neg.MaySignature(Signature(m.Props)) {
				t.Fatalf("NOT (%q) matches %q but its signature check skips it", src, props)
			}
		}
		for _, p := range fuzzProps {
			e.Match(&Message{Props: []byte(p)})
		}
	})
}
