package filter

import (
	"syscall"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

// cpuNanos is the process's CPU time (user + system). On a shared machine
// ns/op (wall clock) includes the time other processes had the CPU;
// cpu-ns/op does not.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// loop runs f b.N times and reports cpu-ns/op besides ns/op.
func loop(b *testing.B, f func()) {
	b.ReportAllocs()
	c0 := cpuNanos()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64(cpuNanos()-c0)/float64(b.N), "cpu-ns/op")
}

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
			loop(b, func() { e.Match(m) })
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

// BenchmarkMatchRecord is what the broker runs per scanned record: the
// expression on an encoded record (header fields and properties read in
// place).
func BenchmarkMatchRecord(b *testing.B) {
	for _, c := range []struct{ name, expr, props string }{
		{"benchProp", "bench = 0", "bench=3"},
		{"tagAndAmount", "TAGS IN ('paid','refunded') AND amount > 100", "tag=paid&keys=o-1&amount=150&region=eu"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := &protocol.Record{Topic: []byte("bench"), Properties: []byte(c.props), Data: make([]byte, 100), BornTime: 1_700_000_000_000}
			rec := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
			protocol.EncodeRecord(rec, r)
			e := MustCompile(c.expr)
			loop(b, func() { e.MatchRecord(rec) })
		})
	}
}

// BenchmarkReferenceCRC is a yardstick measured in the same run: the CRC-32C
// of the same 100-byte record, which the broker computes for every record it
// serves.
func BenchmarkReferenceCRC(b *testing.B) {
	r := &protocol.Record{Topic: []byte("bench"), Properties: []byte("bench=3"), Data: make([]byte, 100)}
	rec := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	protocol.EncodeRecord(rec, r)
	loop(b, func() { protocol.CRC32C(rec[protocol.OffMsgID:]) })
}

// BenchmarkSignature is what the dispatcher adds per indexed record without
// a tag (the property signature of its index unit), and the check a
// filtered get makes per unit instead of reading the record.
func BenchmarkSignature(b *testing.B) {
	for _, props := range []string{"bench=3", "keys=o-1&amount=150&region=eu&vip=1"} {
		p := []byte(props)
		b.Run("compute/"+props, func(b *testing.B) { loop(b, func() { _ = Signature(p) }) })
	}
	e := MustCompile("bench = 0")
	sig := Signature([]byte("bench=3"))
	b.Run("check", func(b *testing.B) { loop(b, func() { _ = e.MaySignature(sig) }) })
}
