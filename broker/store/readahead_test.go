package store

import (
	"bytes"
	"testing"
)

// A read of a backlog populates the chunks it serves (readahead.go): whole
// 1 MiB chunks below the write position are remembered, the partial last one
// is not, and the records served are the ones appended.
func TestReadPopulatesChunks(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 8 << 20
	cfg.IndexFileSize = DefaultIndexFileSize
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	body := bytes.Repeat([]byte("p"), 1000)
	var last AppendResult
	for range 2600 { // ~2.7 MB of records
		last = mustAppend(t, s, &Message{Topic: "pop", Data: body})
	}
	if err := s.WriteOut(); err != nil {
		t.Fatal(err)
	}
	end := last.PhysicalOffset + int64(last.Size)
	readCold(t, s, "pop", 2600, 4<<20, func(int64) []byte { return body })
	if populateOff.Load() {
		t.Skip("kernel refuses MADV_POPULATE_READ")
	}
	for c := int64(0); c <= end>>raChunkShift; c++ {
		whole := (c+1)<<raChunkShift <= end
		if got := s.pop.seen(c); got != whole {
			t.Errorf("chunk %d (log end %d): populated %v, want %v", c, end, got, whole)
		}
	}
}

// A read near the write position (a consumer at the tail) advises nothing:
// such a range never reaches the probe chunk, so advising it used to cost a
// madvise on every get of a tail reader. A backlog read still advises.
func TestTailReadNoReadAhead(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 8 << 20
	cfg.IndexFileSize = DefaultIndexFileSize
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	for range 10 {
		mustAppend(t, s, &Message{Topic: "tail", Data: []byte("a small record")})
	}
	for q := int64(0); q < 10; q++ {
		r, err := s.Read("tail", 0, q, 1<<10, nil)
		if err != nil || r.Status != ReadFound {
			t.Fatalf("read at %d: %v %v", q, r, err)
		}
		r.Release()
	}
	if s.ra.seen(0) {
		t.Fatal("a read at the tail advised read-ahead")
	}
	body := bytes.Repeat([]byte("b"), 1000)
	for range 200 { // ~200 KB behind the reader
		mustAppend(t, s, &Message{Topic: "tail", Data: body})
	}
	r, err := s.Read("tail", 0, 10, 1<<10, nil)
	if err != nil || r.Status != ReadFound {
		t.Fatalf("backlog read: %v %v", r, err)
	}
	r.Release()
	if !s.ra.seen(0) {
		t.Fatal("a backlog read did not advise read-ahead")
	}
}
