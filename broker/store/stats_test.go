package store

import (
	"fmt"
	"testing"
)

// Stats counts per topic in place; its figures must be Topics' own.
func TestStatsAgreesWithTopics(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	for i := 0; i < 60; i++ {
		mustAppend(t, s, &Message{Topic: fmt.Sprintf("t%d", i%7), Partition: int32(i % 5), Data: []byte("x")})
	}
	mustAppend(t, s, &Message{Topic: "%sys", Data: []byte("y")})
	st := s.Stats()
	topics := s.Topics()
	if len(st.Topics) != len(topics) {
		t.Fatalf("Stats has %d topics, Topics %d", len(st.Topics), len(topics))
	}
	parts := 0
	for i, ti := range topics {
		ts := st.Topics[i]
		var n int64
		for _, p := range ti.Partitions {
			n += p.Max - p.Min
		}
		if ts.Topic != ti.Topic || ts.Partitions != len(ti.Partitions) || ts.Messages != n {
			t.Fatalf("topic %d: Stats %+v, Topics %s with %d partitions and %d messages", i, ts, ti.Topic, len(ti.Partitions), n)
		}
		parts += ts.Partitions
	}
	if st.Partitions != parts {
		t.Fatalf("Stats.Partitions %d, want %d", st.Partitions, parts)
	}
}
