package store

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Fault injection: Config.hooks (faults.go) makes fallocate, fdatasync or
// index pwrite fail on demand.

func TestDiskFullOnPreallocationIsStickyUntilSpaceReturns(t *testing.T) {
	var full atomic.Bool
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.hooks = &faultHooks{onFallocate: failWhile(&full, syscall.ENOSPC)}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	// Wait for the next segment to be prepared, then fill the disk.
	waitPrepared(t, s)
	full.Store(true)
	acked, err := appendUntilError(t, s, 200, 100)
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrIO) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("expected ErrDiskFull, got %v", err)
	}
	if len(acked) < 30 {
		t.Fatalf("only %d appended before the disk filled", len(acked))
	}
	// Sticky: later appends fail too, and quickly.
	for i := 0; i < 5; i++ {
		if _, err := s.Append(&Message{Topic: "d", Data: []byte("x")}); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("append %d while full: %v", i, err)
		}
	}
	if st := s.Stats(); !strings.Contains(st.WriteError, "disk full") || st.PutErrors < 6 {
		t.Fatalf("stats: %q %d", st.WriteError, st.PutErrors)
	}
	// Space returns: a retry of the preallocation clears the error.
	full.Store(false)
	waitFor(t, "appends accepted again", func() bool {
		_, err := s.Append(&Message{Topic: "d", Data: []byte("back")})
		return err == nil
	})
	verifyAll(t, s, "d", 1, acked, 100)
}

func TestFsyncErrorIsSticky(t *testing.T) {
	var fail atomic.Bool
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	cfg.hooks = &faultHooks{onFdatasync: failWhile(&fail, syscall.EIO)}
	s := mustOpen(t, cfg)
	acked := fill(t, s, "f", 1, 20, 30)
	fail.Store(true)
	_, f, err := s.AppendAsync(&Message{Topic: "f", Data: []byte("lost")})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); !errors.Is(err, ErrIO) || f.Err() != err {
		t.Fatalf("round error: %v", err)
	}
	fail.Store(false)
	// Sticky until the store is reopened (a failed fsync may have dropped pages).
	if _, err := s.Append(&Message{Topic: "f", Data: []byte("x")}); !errors.Is(err, ErrIO) {
		t.Fatalf("append after fsync failure: %v", err)
	}
	// The unflushed record is never visible in sync mode.
	if r, _ := s.Read("f", 0, 20, 100, nil); r.Status != ReadNoMessage {
		t.Fatalf("unflushed record visible: %v", r.Status)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close should report the sticky error")
	}
	s = mustOpen(t, cfg) // crash recovery: the abort marker was kept
	defer mustClose(t, s)
	verifyAll(t, s, "f", 1, acked, 30)
	if _, err := s.Append(&Message{Topic: "f", Data: []byte("y")}); err != nil {
		t.Fatal(err)
	}
}

func TestIndexWriteErrorRefusesAppendsUntilRetrySucceeds(t *testing.T) {
	var fail atomic.Bool
	cfg := testConfig(t, "")
	cfg.hooks = &faultHooks{onPwrite: failWhile(&fail, syscall.ENOSPC)}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	acked := fill(t, s, "i", 2, 10, 20)
	waitReadable(t, s, "i", 1, 5)
	fail.Store(true)
	// Appends are accepted until the dispatcher meets the failure.
	for i := 10; ; i++ {
		a, err := s.Append(&Message{Topic: "i", Data: body("i", 0, i, 20)})
		if err != nil {
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("refused with %v", err)
			}
			break
		}
		acked = append(acked, a)
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := s.Append(&Message{Topic: "i", Data: []byte("x")}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("not sticky: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	fail.Store(false)
	waitFor(t, "appends accepted", func() bool {
		_, err := s.Append(&Message{Topic: "i", Partition: 1, Data: body("i", 1, 11, 20)})
		return err == nil
	})
	var p0 []AppendResult
	for i, a := range acked {
		if i%2 == 0 || i >= 10 {
			p0 = append(p0, a)
		}
	}
	waitReadable(t, s, "i", 0, int64(len(p0)))
	recs := readAll(t, s, "i", 0, 0, nil)
	if len(recs) != len(p0) {
		t.Fatalf("partition 0: read %d of %d acked", len(recs), len(p0))
	}
	for i, r := range recs {
		if r.MsgID != p0[i].MsgID {
			t.Fatalf("message %d differs", i)
		}
	}
}
