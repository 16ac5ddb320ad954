package filter

import "testing"

// BenchmarkMatch is the per-message cost of evaluating a typical
// subscription expression on the broker (0 allocs/op expected).
func BenchmarkMatch(b *testing.B) {
	cases := []struct{ name, expr, props string }{
		{"tagIn", "TAGS IN ('paid','refunded')", "tag=created&keys=o-1&amount=150&region=eu"},
		{"tagAndAmount", "TAGS IN ('paid','refunded') AND amount > 100", "tag=paid&keys=o-1&amount=150&region=eu"},
		{"fourProps", "region = 'eu' AND amount BETWEEN 100 AND 200 AND vip IS NULL AND NOT tag = 'x'", "tag=paid&keys=o-1&amount=150&region=eu"},
		{"bornTime", "bornTime > 1600000000000 AND reconsumeTimes = 0", "tag=paid"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := MustCompile(c.expr)
			m := &Message{Props: []byte(c.props), BornTime: 1_700_000_000_000}
			b.ReportAllocs()
			for b.Loop() {
				e.Match(m)
			}
		})
	}
}

// BenchmarkCompile is the once-per-subscription (per connection) cost.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("TAGS IN ('paid','refunded') AND amount > 100 AND region <> 'us'"); err != nil {
			b.Fatal(err)
		}
	}
}
