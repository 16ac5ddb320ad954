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
	// A partition whose first records retention deleted: messages are max - min.
	s.partsMu.RLock()
	s.topics["t1"].parts[1].min.Store(1)
	s.partsMu.RUnlock()
	st := s.Stats()
	topics := s.Topics()
	if len(st.Topics) != len(topics) {
		t.Fatalf("Stats has %d topics, Topics %d", len(st.Topics), len(topics))
	}
	parts, trimmed := 0, false
	for i, ti := range topics {
		ts := st.Topics[i]
		var n int64
		for _, p := range ti.Partitions {
			n += p.Max - p.Min
			trimmed = trimmed || p.Min > 0
		}
		if ts.Topic != ti.Topic || ts.Partitions != len(ti.Partitions) || ts.Messages != n {
			t.Fatalf("topic %d: Stats %+v, Topics %s with %d partitions and %d messages", i, ts, ti.Topic, len(ti.Partitions), n)
		}
		parts += ts.Partitions
	}
	if !trimmed {
		t.Fatal("no partition with a minimum offset above 0: the test did not set one up")
	}
	if st.Partitions != parts {
		t.Fatalf("Stats.Partitions %d, want %d", st.Partitions, parts)
	}
}
