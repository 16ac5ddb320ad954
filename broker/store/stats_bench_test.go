package store

import (
	"fmt"
	"testing"
)

// BenchmarkStats: one Stats snapshot of a store holding a topic of 10,000
// partitions and 100 topics of one (what a `stats` or a metrics scrape costs).
func BenchmarkStats(b *testing.B) {
	tempDirOnTmpfs(b)
	cfg := testConfig(b, "")
	cfg.SegmentSize = 8 << 20
	cfg.UnflushThreshold = 1000
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	m := &Message{Topic: "many", Data: []byte("x")}
	for p := int32(0); p < 10000; p++ {
		m.Partition = p
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		mustAppend(b, s, &Message{Topic: fmt.Sprintf("t%03d", i), Data: []byte("x")})
	}
	if st := s.Stats(); st.Partitions != 10100 || len(st.Topics) != 101 {
		b.Fatalf("stats: %d partitions, %d topics", st.Partitions, len(st.Topics))
	}
	b.ReportAllocs()
	for b.Loop() { // the timer starts here
		_ = s.Stats()
	}
}
