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
	var q int64
	for q < 2600 {
		r, err := s.Read("pop", 0, q, 4<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != ReadFound {
			t.Fatalf("read at %d: %v", q, r.Status)
		}
		for _, b := range r.Bufs {
			for len(b) > 0 {
				n := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
				if !bytes.HasSuffix(b[:n], body) {
					t.Fatalf("record at offset %d does not end with its body", q)
				}
				b = b[n:]
				q++
			}
		}
		r.Release()
	}
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
