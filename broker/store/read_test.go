package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

func TestReadStatuses(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	check := func(topic string, off int64, want ReadStatus, next, min, max int64) {
		t.Helper()
		r, err := s.Read(topic, 0, off, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		if r.Status != want || r.NextOffset != next || r.MinOffset != min || r.MaxOffset != max {
			t.Fatalf("Read(%s,%d): status %v next %d min %d max %d; want %v %d %d %d",
				topic, off, r.Status, r.NextOffset, r.MinOffset, r.MaxOffset, want, next, min, max)
		}
	}
	// Never written.
	check("none", 0, ReadNoMessage, 0, 0, 0)
	check("none", 3, ReadOffsetTooLarge, 0, 0, 0)
	check("none", -1, ReadOffsetTooSmall, 0, 0, 0)
	for i := 0; i < 5; i++ {
		mustAppend(t, s, &Message{Topic: "s", Data: []byte("x")})
	}
	waitReadable(t, s, "s", 0, 5)
	check("s", 5, ReadNoMessage, 5, 0, 5)
	check("s", 6, ReadOffsetTooLarge, 5, 0, 5)
	check("s", -2, ReadOffsetTooSmall, 0, 0, 5)
	check("s", 2, ReadFound, 5, 0, 5)
	if s.MinOffset("s", 0) != 0 || s.MaxOffset("s", 0) != 5 {
		t.Fatal("min/max")
	}
}

func TestReadMaxBytesAndCoalescing(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	// 10 records of partition 0 back to back, then 10 interleaved with partition 1.
	for i := 0; i < 10; i++ {
		mustAppend(t, s, &Message{Topic: "c", Data: body("c", 0, i, 100)})
	}
	for i := 10; i < 20; i++ {
		mustAppend(t, s, &Message{Topic: "c", Data: body("c", 0, i, 100)})
		mustAppend(t, s, &Message{Topic: "c", Partition: 1, Data: body("c", 1, i, 100)})
	}
	waitReadable(t, s, "c", 0, 20)
	size := protocol.RecordSize(1, 0, 100)

	r, err := s.Read("c", 0, 0, 10*size, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != ReadFound || r.Count != 10 || len(r.Bufs) != 1 || r.Bytes != 10*size || r.NextOffset != 10 {
		t.Fatalf("adjacent records: count %d bufs %d bytes %d next %d", r.Count, len(r.Bufs), r.Bytes, r.NextOffset)
	}
	// The buffer is a slice of the mapped segment, not a copy.
	g := s.clog.segs.Load().segs[0]
	p := uintptr(unsafe.Pointer(&r.Bufs[0][0]))
	base := uintptr(unsafe.Pointer(&g.data[0]))
	if p < base || p >= base+uintptr(len(g.data)) {
		t.Fatal("Bufs is not a slice of the mapped commit log")
	}
	r.Release()

	r, _ = s.Read("c", 0, 10, 1<<20, nil)
	if r.Count != 10 || len(r.Bufs) != 10 {
		t.Fatalf("interleaved: count %d bufs %d", r.Count, len(r.Bufs))
	}
	r.Release()

	// At least one record even when maxBytes is smaller.
	r, _ = s.Read("c", 0, 3, 1, nil)
	if r.Status != ReadFound || r.Count != 1 || r.NextOffset != 4 {
		t.Fatalf("tiny maxBytes: %v count %d next %d", r.Status, r.Count, r.NextOffset)
	}
	r.Release()
	// maxBytes bounds the block.
	r, _ = s.Read("c", 0, 0, 3*size+size/2, nil)
	if r.Count != 3 || r.Bytes != 3*size || r.NextOffset != 3 {
		t.Fatalf("maxBytes: count %d bytes %d", r.Count, r.Bytes)
	}
	r.Release()
	r.Release() // a second Release is ignored
}

func TestReadTagFilter(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	tags := []string{"a", "b", "", "a", "c%20d"}
	for i := 0; i < 50; i++ {
		tag := tags[i%len(tags)]
		props := ""
		if tag != "" {
			props = "tag=" + tag
		}
		mustAppend(t, s, &Message{Topic: "f", Properties: []byte(props), Data: []byte(fmt.Sprint(i))})
	}
	waitReadable(t, s, "f", 0, 50)
	for _, c := range []struct {
		expr string
		want int
	}{{"*", 50}, {"a", 20}, {"b", 10}, {"a||b", 30}, {"c d", 10}, {"zz", 0}} {
		recs := readAll(t, s, "f", 0, 0, protocol.ParseTagFilter(c.expr))
		if len(recs) != c.want {
			t.Fatalf("filter %q: %d records, want %d", c.expr, len(recs), c.want)
		}
		f := protocol.ParseTagFilter(c.expr)
		for _, r := range recs {
			if !f.MatchTag(protocol.Property(r.Properties, "tag")) {
				t.Fatalf("filter %q served tag %q", c.expr, protocol.Property(r.Properties, "tag"))
			}
		}
	}
	// Everything filtered: 301-style continue offset.
	r, _ := s.Read("f", 0, 0, 1000, protocol.ParseTagFilter("zz"))
	if r.Status != ReadFiltered || r.NextOffset != 50 || r.Count != 0 {
		t.Fatalf("all filtered: %v next %d", r.Status, r.NextOffset)
	}
	r.Release()
	// Offsets in a block skip the filtered ones.
	r, _ = s.Read("f", 0, 0, 1<<20, protocol.ParseTagFilter("b"))
	it := protocol.NewRecordIterator(bytes.Join(r.Bufs, nil))
	var offs []int64
	for it.Next() {
		offs = append(offs, it.Record().QueueOffset)
	}
	if len(offs) != 10 || offs[0] != 1 || offs[1] != 6 || r.NextOffset != 50 {
		t.Fatalf("filtered offsets %v next %d", offs, r.NextOffset)
	}
	r.Release()
}

func TestReadFilteredScanBound(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	n := maxIndexSkips + 100
	for i := 0; i < n; i++ {
		s.AppendAsync(&Message{Topic: "b", Properties: []byte("tag=x"), Data: []byte("y")})
	}
	waitReadable(t, s, "b", 0, int64(n))
	// Tag misses are decided from the units: up to maxIndexSkips of them.
	r, _ := s.Read("b", 0, 0, 1000, protocol.ParseTagFilter("other"))
	if r.Status != ReadFiltered || r.NextOffset != maxIndexSkips {
		t.Fatalf("tag misses: status %v next %d", r.Status, r.NextOffset)
	}
	r.Release()
	// An expression on tagged records reads each one: up to maxFilteredScan.
	r, _ = s.Read("b", 0, 0, 1000, protocol.ParseTagFilter("x").WithRecordMatcher(filter.MustCompile("a = 1")))
	if r.Status != ReadFiltered || r.NextOffset != maxFilteredScan {
		t.Fatalf("expression misses: status %v next %d", r.Status, r.NextOffset)
	}
	r.Release()
}

func TestOffsetForTime(t *testing.T) {
	cfg := testConfig(t, "")
	var clock atomic.Int64
	clock.Store(10_000)
	cfg.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	// Offsets 0..99 at times 10000 + 10*(i/2): pairs share a millisecond.
	for i := 0; i < 100; i++ {
		clock.Store(10_000 + int64(10*(i/2)))
		mustAppend(t, s, &Message{Topic: "time", Data: []byte("x")})
		mustAppend(t, s, &Message{Topic: "other", Data: []byte("y")})
	}
	waitReadable(t, s, "time", 0, 100)
	for _, c := range []struct{ ts, want int64 }{
		{0, 0}, {10_000, 0}, {10_001, 2}, {10_010, 2}, {10_015, 4}, {10_490, 98}, {10_491, 100}, {99_999, 100},
	} {
		if got := s.OffsetForTime("time", 0, c.ts); got != c.want {
			t.Errorf("OffsetForTime(%d) = %d, want %d", c.ts, got, c.want)
		}
	}
	if got := s.OffsetForTime("missing", 0, 5); got != 0 {
		t.Errorf("missing partition: %d", got)
	}
}

func TestReadByID(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	var ids []AppendResult
	for i := 0; i < 20; i++ {
		ids = append(ids, mustAppend(t, s, &Message{Topic: "id", Partition: int32(i % 3), Data: body("id", 0, i, 30)}))
	}
	for i, a := range ids {
		r, err := s.ReadByID(a.MsgID)
		if err != nil {
			t.Fatalf("ReadByID %d: %v", i, err)
		}
		rec, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
		if err != nil || rec.MsgID != a.MsgID || !bytes.Equal(rec.Data, body("id", 0, i, 30)) || r.Count != 1 {
			t.Fatalf("ReadByID %d: wrong record", i)
		}
		r.Release()
	}
	for _, id := range []int64{ids[3].MsgID + 1, 8<<48 | ids[3].PhysicalOffset, -1, 7<<48 | 1<<40} {
		if r, err := s.ReadByID(id); err != ErrNotFound {
			t.Fatalf("ReadByID(%x): %v %v", id, r, err)
		}
	}
}

func TestReadNeverServesCorruptRecord(t *testing.T) {
	lb := &logBuf{}
	cfg := testConfig(t, "")
	cfg.Logger = newTestLogger(lb)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	var res []AppendResult
	for i := 0; i < 10; i++ {
		res = append(res, mustAppend(t, s, &Message{Topic: "x", Data: body("x", 0, i, 60)}))
	}
	waitReadable(t, s, "x", 0, 10)
	// Flip a data byte of record 6 on disk (the mapping is shared).
	path, _ := s.activeSegment()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	pos := res[6].PhysicalOffset + int64(res[6].Size) - 3
	var b [1]byte
	f.ReadAt(b[:], pos)
	b[0] ^= 0xFF
	f.WriteAt(b[:], pos)
	f.Close()

	r, err := s.Read("x", 0, 2, 1<<20, nil)
	if err != nil || r.Count != 4 || r.NextOffset != 6 {
		t.Fatalf("read before the corrupt record: %v count %d next %d", err, r.Count, r.NextOffset)
	}
	r.Release()
	if r, err := s.Read("x", 0, 6, 1<<20, nil); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrIO) || r != nil {
		t.Fatalf("read at the corrupt record: %v %v", r, err)
	}
	if _, err := s.ReadByID(res[6].MsgID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadByID of corrupt record: %v", err)
	}
	r, err = s.Read("x", 0, 7, 1<<20, nil)
	if err != nil || r.Count != 3 {
		t.Fatalf("read after: %v", err)
	}
	r.Release()
	if !containsAll(lb.String(), "not served", "offset=6") || s.Stats().CorruptReads < 2 {
		t.Fatalf("corruption not reported: %q", lb.String())
	}
}

// TestReadYourWrites (docs/storage.md, "Flushing and visibility" and
// "Partition indexes"): a record is readable as soon as it is
// appended (async) or as soon as Append returns (sync), without waiting for
// the asynchronous index to be told.
func TestReadYourWrites(t *testing.T) {
	for _, threshold := range []int{0, 1 << 30} {
		t.Run(fmt.Sprint("threshold=", threshold), func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.UnflushThreshold = threshold
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			for i := 0; i < 300; i++ {
				before := time.Now().UnixMilli()
				a, err := s.Append(&Message{Topic: "ryw", Partition: int32(i % 2), Properties: []byte(fmt.Sprintf("keys=k%d", i)), Data: []byte(fmt.Sprint(i))})
				if err != nil {
					t.Fatal(err)
				}
				// A time lookup (seek) sees it too: a consumer starting "from now" must not skip it.
				if q := s.OffsetForTime("ryw", int32(i%2), before); q > a.QueueOffset {
					t.Fatalf("message %d (offset %d): OffsetForTime(%d) = %d right after Append", i, a.QueueOffset, before, q)
				}
				r, err := s.Read("ryw", int32(i%2), a.QueueOffset, 100, nil)
				if err != nil || r.Status != ReadFound || r.Count != 1 {
					t.Fatalf("message %d not readable right after Append: %v %v", i, err, r.Status)
				}
				r.Release()
				if i%50 == 0 {
					q, err := s.QueryKey("ryw", fmt.Sprintf("k%d", i), 1)
					if err != nil {
						t.Fatalf("key of message %d: %v", i, err)
					}
					q.Release()
				}
			}
		})
	}
}

// A read from an old offset returns every record appended before it, not
// only the prefix the dispatcher had indexed when the read began.
func TestReadYourWritesWholeRange(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	for round := 0; round < 200; round++ {
		for i := 0; i < 10; i++ {
			if _, err := s.Append(&Message{Topic: "ryw", Partition: 0, Data: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := s.Read("ryw", 0, 0, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := (round + 1) * 10; r.Count != want {
			t.Fatalf("round %d: read %d records from offset 0, want %d", round, r.Count, want)
		}
		r.Release()
	}
}
