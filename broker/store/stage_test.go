package store

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// stageConfig is a sync-flush store with a tiny staging buffer, so appends
// keep waiting for it to drain, restart it and roll segments under it.
func stageConfig(t *testing.T) Config {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	cfg.SegmentSize = 16 << 10
	cfg.stageSize = 2 << 10
	return cfg
}

func TestStagedAppendsConcurrentWithRollsAndWaits(t *testing.T) {
	cfg := stageConfig(t)
	s := mustOpen(t, cfg)
	const writers, each = 8, 150
	res := make([][]AppendResult, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				n := 1 + (i*37+w*101)%700 // odd sizes, some near a third of the buffer
				a, err := s.Append(&Message{Topic: "st", Partition: int32(w), Data: body("st", int32(w), i, n)})
				if err != nil {
					t.Error(err)
					return
				}
				res[w] = append(res[w], a)
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if s.counters.stageWaits.Load() == 0 || s.Stats().SegmentRolls < 5 {
		t.Fatalf("want staging waits and rolls, got %d waits, %d rolls", s.counters.stageWaits.Load(), s.Stats().SegmentRolls)
	}
	check := func(s *Store) {
		t.Helper()
		if n := checkSegments(t, s); n != writers*each {
			t.Fatalf("segments hold %d records, want %d", n, writers*each)
		}
		for w := 0; w < writers; w++ {
			waitReadable(t, s, "st", int32(w), each)
			recs := readAll(t, s, "st", int32(w), 0, nil)
			if len(recs) != each {
				t.Fatalf("partition %d: read %d of %d", w, len(recs), each)
			}
			for i, r := range recs {
				n := 1 + (i*37+w*101)%700
				if r.MsgID != res[w][i].MsgID || r.QueueOffset != int64(i) || !bytes.Equal(r.Data, body("st", int32(w), i, n)) {
					t.Fatalf("partition %d record %d differs", w, i)
				}
			}
		}
	}
	check(s)
	mustClose(t, s)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	check(s)
}

func TestStagedRecordLargerThanTheBuffer(t *testing.T) {
	cfg := stageConfig(t)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	small := mustAppend(t, s, &Message{Topic: "big", Data: []byte("x")})
	big := bytes.Repeat([]byte("B"), 5<<10) // > the 2 KiB buffer: it grows
	a := mustAppend(t, s, &Message{Topic: "big", Data: big})
	after := mustAppend(t, s, &Message{Topic: "big", Data: []byte("y")})
	for _, x := range []struct {
		a    AppendResult
		data []byte
	}{{small, []byte("x")}, {a, big}, {after, []byte("y")}} {
		r, err := s.ReadByID(x.a.MsgID)
		if err != nil {
			t.Fatal(err)
		}
		rec, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
		if err != nil || !bytes.Equal(rec.Data, x.data) {
			t.Fatalf("record at %d: %v", x.a.PhysicalOffset, err)
		}
		r.Release()
	}
}

func TestStagedWriteFailureIsStickyAndNothingAckedIsLost(t *testing.T) {
	cfg := stageConfig(t)
	var fail atomic.Bool
	cfg.hooks = &faultHooks{onLogWrite: failWhile(&fail, syscall.EIO)}
	s := mustOpen(t, cfg)
	acked := fill(t, s, "w", 2, 40, 100)
	fail.Store(true)
	if _, err := s.Append(&Message{Topic: "w", Data: []byte("lost")}); !errors.Is(err, ErrIO) {
		t.Fatalf("append with a failing write: %v, want ErrIO", err)
	}
	// Sticky: refused even once writes would work again, and writers waiting
	// for staging room are not left hanging.
	fail.Store(false)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if _, err := s.Append(&Message{Topic: "w", Data: make([]byte, 300)}); !errors.Is(err, ErrIO) {
					t.Errorf("append after the failure: %v, want ErrIO", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.WriteError == "" {
		t.Fatal("stats do not show the write error")
	}
	_ = s.Close()
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	verifyAll(t, s, "w", 2, acked, 100)
	mustAppend(t, s, &Message{Topic: "w", Data: []byte("again")})
}

func TestStagedRecordsAreReadableBeforeWriteOut(t *testing.T) {
	// Async mode: a record appended with AppendAsync and not written out yet
	// is assigned an offset; a read of it (and a key query) must write it out
	// and find it instead of waiting for the catch-up timeout.
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1000
	cfg.UnflushInterval = time.Hour
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	a, f, err := s.AppendAsync(&Message{Topic: "rw", Properties: []byte("keys=k1"), Data: []byte("staged")})
	if err != nil || f != nil {
		t.Fatalf("AppendAsync: %v %v", f, err)
	}
	if s.clog.stage.written.Load() > a.PhysicalOffset {
		t.Fatal("the record was written out by AppendAsync; the test needs it staged")
	}
	// With UnflushInterval 1 h and a threshold of 1000 nothing else writes the record out:
	// found means the read did (a clock bound against catchUpTimeout, 50 ms, failed under
	// load).
	r, err := s.Read("rw", 0, a.QueueOffset, 4096, nil)
	if err != nil || r.Status != ReadFound {
		t.Fatalf("Read of a staged record: %v, status %v (it waited instead of writing the record out)", err, r.Status)
	}
	r.Release()
	if s.clog.stage.written.Load() <= a.PhysicalOffset {
		t.Fatal("the read did not write the staged record out")
	}
	a2, _, err := s.AppendAsync(&Message{Topic: "rw", Properties: []byte("keys=k2"), Data: []byte("staged too")})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.QueryKey("rw", "k2", 10)
	if err != nil {
		t.Fatalf("QueryKey of a staged record: %v", err)
	}
	rec, _, err := protocol.DecodeRecord(q.Bufs[0], 0)
	if err != nil || rec.MsgID != a2.MsgID {
		t.Fatalf("QueryKey found %v, %v", rec.MsgID, err)
	}
	q.Release()
}

func TestAsyncWriteOutFailureIsSticky(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1000
	cfg.UnflushInterval = time.Hour
	var fail atomic.Bool
	cfg.hooks = &faultHooks{onLogWrite: failWhile(&fail, syscall.EIO)}
	s := mustOpen(t, cfg)
	acked := fill(t, s, "aw", 2, 30, 80) // Append writes out: acknowledged
	fail.Store(true)
	if _, _, err := s.AppendAsync(&Message{Topic: "aw", Data: []byte("not acked")}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteOut(); !errors.Is(err, ErrIO) {
		t.Fatalf("WriteOut with a failing write: %v, want ErrIO", err)
	}
	fail.Store(false)
	if err := s.WriteOut(); !errors.Is(err, ErrIO) {
		t.Fatalf("WriteOut after the failure: %v, want the sticky ErrIO", err)
	}
	if _, err := s.Append(&Message{Topic: "aw", Data: []byte("x")}); !errors.Is(err, ErrIO) {
		t.Fatalf("Append after the failure: %v, want ErrIO", err)
	}
	_ = s.Close()
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	verifyAll(t, s, "aw", 2, acked, 80)
}
