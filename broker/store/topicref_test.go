package store

import (
	"testing"
)

// A TopicRef finds the partition without a lookup by name; a handle for
// another topic or another store is ignored, so the record still goes to
// m.Topic; a partition first appended to through a handle is the same one
// a lookup by name finds.
func TestTopicRefAppend(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	other := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, other)
	if s.TopicRef("") != nil || s.TopicRef("bad/topic") != nil {
		t.Fatal("a handle for a name the store refuses")
	}
	a, b := s.TopicRef("ra"), s.TopicRef("rb")
	foreign := other.TopicRef("ra")
	cases := []struct {
		topic string
		part  int32
		ref   *TopicRef
	}{
		{"ra", 0, a}, {"ra", 3, a}, {"ra", 0, nil}, {"ra", 3, b}, {"rb", 1, b},
		{"ra", 0, foreign}, {"ra", 3, a}, {"rb", 1, a}, {"rb", 1, b},
	}
	want := map[string]int64{}
	for i, c := range cases {
		key := c.topic + "/" + string(rune('0'+c.part))
		r := mustAppend(t, s, &Message{Topic: c.topic, Partition: c.part, Ref: c.ref, Data: body(c.topic, c.part, i, 20)})
		if r.QueueOffset != want[key] {
			t.Fatalf("case %d (%s): queue offset %d, want %d", i, key, r.QueueOffset, want[key])
		}
		want[key]++
	}
	for key, n := range want {
		topic, part := key[:2], int32(key[3]-'0')
		waitReadable(t, s, topic, part, n)
		recs := readAll(t, s, topic, part, 0, nil)
		if int64(len(recs)) != n {
			t.Fatalf("%s: %d records, want %d", key, len(recs), n)
		}
		for _, rec := range recs {
			if string(rec.Topic) != topic || rec.Partition != part {
				t.Fatalf("%s holds a record of %s/%d", key, rec.Topic, rec.Partition)
			}
		}
	}
	if other.Stats().PutMessages != 0 {
		t.Fatal("a foreign handle appended to its own store")
	}
	// Batches use the handle too.
	res := make([]AppendResult, 2)
	_, err := s.AppendBatch([]Message{{Topic: "rb", Partition: 1, Ref: b, Data: []byte("x")}, {Topic: "rb", Partition: 1, Ref: b, Data: []byte("y")}}, res)
	if err != nil || res[0].QueueOffset != want["rb/1"] || res[1].QueueOffset != want["rb/1"]+1 {
		t.Fatalf("batch: %v %+v", err, res)
	}
}

func TestAppendWithTopicRefZeroAllocs(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	m := &Message{Topic: "alloc", Data: make([]byte, 100), Ref: s.TopicRef("alloc")}
	s.AppendAsync(m) // create the partition
	allocs := testing.AllocsPerRun(2000, func() {
		if _, _, err := s.AppendAsync(m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendAsync allocates %.2f times per call", allocs)
	}
}
