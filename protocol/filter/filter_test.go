package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

func msg(props string) *Message {
	return &Message{Props: []byte(props), BornTime: 1_700_000_000_000, ReconsumeTimes: 2}
}

func TestMatch(t *testing.T) {
	paid := msg("tag=paid&keys=o-1%20o-2&amount=150&region=eu-west&vip=true&ratio=0.25&name=O%27Brien&sp=a+b")
	bare := msg("")
	cases := []struct {
		expr string
		m    *Message
		want bool
	}{
		{"TAGS = 'paid'", paid, true},
		{"tag = 'paid'", paid, true},
		{"tag <> 'paid'", paid, false},
		{"TAGS IN ('paid', 'refunded')", paid, true},
		{"TAGS NOT IN ('paid', 'refunded')", paid, false},
		{"tag IN ('x')", paid, false},
		{"amount > 100", paid, true},
		{"amount > 150", paid, false},
		{"amount >= 150", paid, true},
		{"amount < 150.5", paid, true},
		{"amount <= 149", paid, false},
		{"amount = 150", paid, true},
		{"amount = 150.0", paid, true},
		{"amount = '150'", paid, true},
		{"amount <> 150", paid, false},
		{"amount BETWEEN 100 AND 200", paid, true},
		{"amount BETWEEN 151 AND 200", paid, false},
		{"amount NOT BETWEEN 151 AND 200", paid, true},
		{"amount IN (150, 151)", paid, true},
		{"ratio > 0.2 AND ratio < .3", paid, true},
		{"ratio = 2.5e-1", paid, true},
		{"TAGS = 'paid' AND amount > 100", paid, true},
		{"TAGS = 'paid' AND amount > 200", paid, false},
		{"TAGS = 'x' OR amount > 100", paid, true},
		{"NOT (TAGS = 'x')", paid, true},
		{"NOT TAGS = 'paid'", paid, false},
		{"(TAGS = 'x' OR region = 'eu-west') AND NOT vip = FALSE", paid, true},
		{"vip = TRUE", paid, true},
		{"vip <> TRUE", paid, false},
		{"TRUE = vip", paid, true},
		{"KEYS = 'o-1 o-2'", paid, true},
		{"keys = 'o-1 o-2'", paid, true},
		{"name = 'O''Brien'", paid, true},
		{"sp = 'a b'", paid, true},
		{"\"region\" = 'eu-west'", paid, true},
		{"missing IS NULL", paid, true},
		{"missing IS NOT NULL", paid, false},
		{"tag IS NOT NULL", paid, true},
		{"bornTime > 1600000000000", paid, true},
		{"bornTime IS NULL", bare, false},
		{"reconsumeTimes = 2", paid, true},
		{"reconsumeTimes BETWEEN 0 AND 1", paid, false},
		{"TRUE", paid, true},
		{"FALSE", paid, false},
		{"tRuE and not false", paid, true},
		// Comparisons with a missing property are unknown: neither they nor
		// their negation match; OR with a true side still does.
		{"missing = 'x'", paid, false},
		{"missing <> 'x'", paid, false},
		{"NOT missing = 'x'", paid, false},
		{"missing > 1", paid, false},
		{"NOT missing > 1", paid, false},
		{"missing IN ('x')", paid, false},
		{"missing NOT IN ('x')", paid, false},
		{"missing BETWEEN 1 AND 2", paid, false},
		{"missing NOT BETWEEN 1 AND 2", paid, false},
		{"missing = 'x' OR tag = 'paid'", paid, true},
		{"missing = 'x' AND tag = 'x'", paid, false},
		{"NOT (missing = 'x' AND tag = 'x')", paid, true},
		{"tag = 'paid'", bare, false},
		{"tag <> 'paid'", bare, false},
		// A string that is not a number does not compare with one.
		{"region > 1", paid, false},
		{"region = 1", paid, false},
		{"NOT region = 1", paid, false},
		// Strings order as numbers.
		{"amount > ratio", paid, true},
	}
	for _, tc := range cases {
		e, err := Compile(tc.expr)
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.expr, err)
			continue
		}
		if got := e.Match(tc.m); got != tc.want {
			t.Errorf("%q on %q = %v, want %v", tc.expr, tc.m.Props, got, tc.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	cases := []struct {
		expr string
		pos  int
		msg  string
	}{
		{"", 1, "empty expression"},
		{"   ", 4, "empty expression"},
		{"tag =", 6, "expected a name or a literal, found end of expression"},
		{"tag = 'paid' AND", 17, "expected a name or a literal"},
		{"tag = 'paid", 7, "unterminated string"},
		{"tag", 4, "expected a comparison, BETWEEN, IN or IS after \"tag\""},
		{"tag == 'x'", 6, "expected a name or a literal, found '='"},
		{"tag != 'x'", 5, "'!=' is not SQL92"},
		{"a > 'x'", 5, "'x' cannot be ordered"},
		{"a BETWEEN 'x' AND 2", 11, "'x' cannot be ordered"},
		{"'x' < 3", 5, "'x' cannot be ordered"},
		{"TRUE < 3", 6, "TRUE cannot be ordered"},
		{"a = NULL", 5, "use IS NULL"},
		{"a IN ()", 7, "expected a literal in the IN list"},
		{"a IN ('x',)", 11, "expected a literal in the IN list"},
		{"a IN (b)", 7, "expected a literal in the IN list"},
		{"a IN ('x'", 10, "expected ')'"},
		{"(a = 1", 7, "expected ')'"},
		{"a = 1)", 6, "expected AND, OR or the end"},
		{"a = 1 b", 7, "expected AND, OR or the end, found name \"b\""},
		{"a NOT = 1", 7, "expected BETWEEN or IN after NOT"},
		{"a IS 1", 6, "expected NULL"},
		{"a = 12abc", 7, "after a number"},
		{"a = 1e", 5, "malformed number"},
		{"a = -", 5, "malformed number"},
		{"a = 1e999", 5, "out of range"},
		{"a # 1", 3, "unexpected character '#'"},
		{"a = \"\"", 5, "empty quoted name"},
		{"a = 'x\x01'", 7, "control character"},
		{strings.Repeat("(", 70) + "a = 1" + strings.Repeat(")", 70), 65, "nested deeper than 64"},
		{strings.Repeat("NOT ", 70) + "a = 1", 257, "nested deeper than 64"},
		{"a = '" + strings.Repeat("x", MaxLen) + "'", MaxLen + 1, "longer than 4096"},
	}
	for _, tc := range cases {
		_, err := Compile(tc.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Compile(%q) = %v, want a SyntaxError", tc.expr, err)
			continue
		}
		if se.Pos != tc.pos || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("Compile(%q) = %v; want position %d and %q", tc.expr, err, tc.pos, tc.msg)
		}
		if !strings.HasPrefix(err.Error(), "filter: syntax error at position ") {
			t.Errorf("error text %q", err)
		}
	}
}

func TestMatchRecord(t *testing.T) {
	r := &protocol.Record{Topic: []byte("orders"),
		Properties: []byte("tag=paid&amount=150"), Data: []byte("x"), BornTime: 42, ReconsumeTimes: 3}
	rec := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	protocol.EncodeRecord(rec, r)
	for expr, want := range map[string]bool{
		"tag = 'paid' AND amount > 100": true,
		"bornTime = 42":                 true,
		"reconsumeTimes = 3":            true,
		"amount < 100":                  false,
	} {
		if got := MustCompile(expr).MatchRecord(rec); got != want {
			t.Errorf("%q = %v, want %v", expr, got, want)
		}
	}
	e := MustCompile("tag IS NULL")
	for n := 0; n < len(rec); n++ { // truncated records never panic
		e.MatchRecord(rec[:n])
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	m := msg("tag=paid&keys=o-1%20o-2&amount=150&region=eu%2Dwest&ratio=0.25")
	for _, expr := range []string{
		"TAGS IN ('paid','refunded') AND amount > 100",
		"region = 'eu-west' AND ratio BETWEEN 0.1 AND 0.3 AND NOT missing IS NOT NULL",
		"amount = 150.0 OR tag <> 'x'",
	} {
		e := MustCompile(expr)
		if !e.Match(m) {
			t.Fatalf("%q does not match", expr)
		}
		if n := testing.AllocsPerRun(100, func() { e.Match(m) }); n != 0 {
			t.Errorf("%q: %v allocations per Match", expr, n)
		}
	}
}

func TestTags(t *testing.T) {
	for expr, want := range map[string]string{
		"TAGS = 'paid'":                               "paid",
		"'paid' = tag AND amount > 1":                 "paid",
		"amount > 1 AND TAGS IN ('paid', 'refunded')": "paid|refunded",
		"(TAGS IN ('a') AND x = 1) AND y = 2":         "a",
		"tag = ''":                                    "",
		"TAGS = 'a' OR amount > 1":                    "-",
		"NOT TAGS = 'a'":                              "-",
		"TAGS NOT IN ('a')":                           "-",
		"TAGS <> 'a'":                                 "-",
		"TAGS IN ('a', 1)":                            "-",
		"keys = 'a'":                                  "-",
		"\"tag\" = 'q'":                               "q",
	} {
		tags, ok := MustCompile(expr).Tags()
		got := strings.Join(tags, "|")
		if !ok {
			got = "-"
		}
		if got != want {
			t.Errorf("Tags(%q) = %q, want %q", expr, got, want)
		}
	}
}
