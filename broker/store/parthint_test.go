package store

import (
	"fmt"
	"testing"
	"time"
)

// The ring's rules: an entry is used only at its record's position and for
// its record's topic and partition; entries of records never dispatched are
// skipped; a record without an entry gets none; a full ring drops entries
// until the dispatcher gives some back.
func TestPartHintsRules(t *testing.T) {
	ta, tb := &topicState{name: "ta"}, &topicState{name: "tb"}
	a0, a1, b0 := newPartition(ta, 0), newPartition(ta, 1), newPartition(tb, 0)
	h := new(partHints)
	r := hintReader{h: h}
	h.addLocked(100, a0)
	h.addLocked(200, a1)
	h.addLocked(300, b0)
	h.addLocked(400, a0)
	r.begin()
	if p := r.partition(50, []byte("ta"), 0); p != nil {
		t.Fatal("a record before the first entry got a partition")
	}
	if p := r.partition(100, []byte("ta"), 0); p != a0 {
		t.Fatalf("record at 100: %v, want ta/0", p)
	}
	// The record at 200 is not dispatched (say, a write that failed): 300's
	// entry is still found.
	if p := r.partition(300, []byte("tb"), 0); p != b0 {
		t.Fatalf("record at 300: %v, want tb/0", p)
	}
	// An entry whose topic or partition is not the record's is not used.
	if p := r.partition(400, []byte("tb"), 0); p != nil {
		t.Fatal("an entry of ta/0 was used for a record of tb/0")
	}
	r.end()
	h.addLocked(500, a1)
	r.begin()
	if p := r.partition(500, []byte("ta"), 0); p != nil {
		t.Fatal("an entry of ta/1 was used for a record of ta/0")
	}
	if r.hits != 2 {
		t.Fatalf("%d hits, want 2", r.hits)
	}
	r.end()

	// A run of appends to one partition adds one entry, which stands for
	// the run's records.
	h3 := new(partHints)
	r3 := hintReader{h: h3}
	for i := range int64(10) {
		h3.addLocked(i*100, b0)
	}
	if h3.added != 1 {
		t.Fatalf("%d entries for a run of one partition, want 1", h3.added)
	}
	r3.begin()
	for i := range int64(10) {
		if p := r3.partition(i*100, []byte("tb"), 0); p != b0 {
			t.Fatalf("record %d of the run: %v", i, p)
		}
	}
	r3.end()

	// Full: the dispatcher took nothing for a whole ring. Records without an
	// entry get the last entry's partition only when it is theirs.
	h2 := new(partHints)
	r2 := hintReader{h: h2}
	parts := []*partition{a0, a1}
	for i := range int64(hintRing + 10) {
		h2.addLocked(i, parts[i%2])
	}
	if h2.added != hintRing {
		t.Fatalf("%d entries added to a ring of %d", h2.added, hintRing)
	}
	r2.begin()
	for i := range int64(hintRing + 10) {
		p := r2.partition(i, []byte("ta"), int32(i%2))
		var want *partition
		if i < hintRing || i%2 == 1 { // the ring's last entry is ta/1's
			want = parts[i%2]
		}
		if p != want {
			t.Fatalf("record %d: %v, want %v", i, p, want)
		}
	}
	r2.end()
	h2.addLocked(hintRing+20, b0) // room again: the dispatcher gave the ring back
	r2.begin()
	if p := r2.partition(hintRing+20, []byte("tb"), 0); p != b0 {
		t.Fatalf("after the ring was given back: %v", p)
	}
}

// Appends round-robin over many topics and partitions, single and in
// batches, are indexed into their own partitions, and the dispatcher finds
// their partitions through the appender's entries (not a lookup by name).
func TestDispatchUsesPartHints(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	const topics, parts, rounds = 40, 3, 20
	name := func(i int) string { return fmt.Sprintf("h%d", i) }
	want := map[string]int64{}
	n := 0
	for round := range rounds {
		for i := range topics {
			for part := range int32(parts) {
				key := fmt.Sprintf("%s/%d", name(i), part)
				if round%4 == 3 { // a run of two: one entry for the run
					res := make([]AppendResult, 2)
					msgs := []Message{{Topic: name(i), Partition: part, Data: body(name(i), part, n, 40)},
						{Topic: name(i), Partition: part, Data: body(name(i), part, n+1, 40)}}
					if _, err := s.AppendBatch(msgs, res); err != nil {
						t.Fatal(err)
					}
					n += 2
					want[key] += 2
					continue
				}
				mustAppend(t, s, &Message{Topic: name(i), Partition: part, Data: body(name(i), part, n, 40)})
				n++
				want[key]++
			}
		}
	}
	for key, c := range want {
		topic, part := key[:len(key)-2], int32(key[len(key)-1]-'0')
		waitReadable(t, s, topic, part, c)
		recs := readAll(t, s, topic, part, 0, nil)
		if int64(len(recs)) != c {
			t.Fatalf("%s: %d records, want %d", key, len(recs), c)
		}
		for q, rec := range recs {
			if string(rec.Topic) != topic || rec.Partition != part || rec.QueueOffset != int64(q) {
				t.Fatalf("%s[%d] holds %s/%d@%d", key, q, rec.Topic, rec.Partition, rec.QueueOffset)
			}
		}
	}
	s.dispMu.Lock()
	hits := s.disp.hints.hits
	s.dispMu.Unlock()
	// Every record is found through the entry of its append or its run
	// (the dispatcher never falls a whole ring behind here).
	if wantHits := int64(n); hits != wantHits {
		t.Fatalf("%d of %d records found through the appender's entries, want %d", hits, n, wantHits)
	}
}

// After each run the dispatcher adds, the partition's tailNext points at
// where the tail's next unit goes (what flush prefetches), or is nil when
// the tail has no buffer. (A checkpoint's tail flush leaves it stale, which
// is allowed; none runs here.)
func TestTailNextFollowsTheTail(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.IndexFileSize = 1 << 20 // blocks of 256 units, not index files, bound the tail
	cfg.CheckpointInterval = time.Hour
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	for i := range 300 {
		mustAppend(t, s, &Message{Topic: "tn", Data: body("tn", 0, i, 20)})
		waitReadable(t, s, "tn", 0, int64(i+1))
		p := s.partition("tn", 0, false)
		s.dispMu.Lock()
		p.tailMu.Lock()
		want := (*byte)(nil)
		if p.tail.buf != nil {
			want = &p.tail.buf[p.tail.n*unitSize]
		}
		got := p.tailNext
		n := p.tail.n
		p.tailMu.Unlock()
		s.dispMu.Unlock()
		if got != want || want == nil {
			t.Fatalf("after %d messages (tail holds %d units): tailNext %p, want %p", i+1, n, got, want)
		}
	}
}
