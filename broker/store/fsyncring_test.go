package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ringOrSkip returns a ring, or skips where io_uring is refused (old
// kernel, seccomp, kernel.io_uring_disabled): the fallback is tested below.
func ringOrSkip(t *testing.T) *fsyncRing {
	t.Helper()
	r, err := newFsyncRing()
	if err != nil {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	t.Cleanup(r.close)
	return r
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func TestFsyncRingSyncsAndReportsTheFsyncsErrors(t *testing.T) {
	r := ringOrSkip(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 3 {
		if _, err := f.Write([]byte("some bytes")); err != nil {
			t.Fatal(err)
		}
		if err := r.fdatasync(int(f.Fd())); err != nil {
			t.Fatalf("fsync %d: %v", i, err)
		}
	}
	if n := r.ops.Load(); n != 3 {
		t.Fatalf("ops %d, want 3", n)
	}
	// An error of the fsync itself is returned as fdatasync(2) returns it,
	// and the ring keeps working: here a descriptor that is not open.
	bad, err := unix.Open(os.DevNull, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(bad)
	if err := r.fdatasync(bad); !errors.Is(err, syscall.EBADF) || errors.Is(err, errRingBroken) {
		t.Fatalf("fsync of a closed descriptor: %v, want EBADF", err)
	}
	if err := r.fdatasync(int(f.Fd())); err != nil {
		t.Fatalf("fsync after an error: %v", err)
	}
	r.close()
	r.close() // idempotent
	if err := r.fdatasync(int(f.Fd())); !errors.Is(err, errRingClosed) || !errors.Is(err, errRingBroken) {
		t.Fatalf("fsync on a closed ring: %v", err)
	}
}

func TestFsyncRingReleasesItsDescriptors(t *testing.T) {
	ringOrSkip(t).close()
	before := openFDs(t)
	for range 20 {
		r, err := newFsyncRing()
		if err != nil {
			t.Fatal(err)
		}
		r.close()
	}
	if after := openFDs(t); after > before {
		t.Fatalf("open descriptors %d → %d after 20 rings", before, after)
	}
}

// The store: an async-flush log fsyncs through its ring, a sync-flush one
// and a process with the ring turned off with fdatasync(2); the fsync hook
// (fault injection) applies either way, and a failure stays sticky.
func TestAsyncFlushFsyncsThroughTheRing(t *testing.T) {
	ringOrSkip(t)
	before := openFDs(t)
	cfg := testConfig(t, "") // UnflushThreshold 1: async flush
	s := mustOpen(t, cfg)
	if s.clog.ring == nil {
		t.Fatal("async-flush log without a ring")
	}
	fill(t, s, "r", 1, 50, 30)
	waitFor(t, "flushed", func() bool { return s.clog.flushed.Load() == s.clog.written.Load() })
	if s.clog.ring.ops.Load() == 0 {
		t.Fatal("no fsync went through the ring")
	}
	mustClose(t, s)
	if after := openFDs(t); after > before {
		t.Fatalf("open descriptors %d → %d after Close", before, after)
	}

	cfg = testConfig(t, "")
	cfg.UnflushThreshold = 0
	s = mustOpen(t, cfg)
	if s.clog.ring != nil {
		t.Fatal("sync-flush log with a ring")
	}
	mustClose(t, s)

	ringOff.Store(true)
	s, err := Open(testConfig(t, ""))
	ringOff.Store(false) // before any Fatal: the other tests get their rings
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if s.clog.ring != nil {
		t.Fatal("ring turned off, but the log has one")
	}
	fill(t, s, "r", 1, 5, 30)
	mustClose(t, s)
}

func TestAsyncFlushFsyncFailureThroughTheRingIsSticky(t *testing.T) {
	ringOrSkip(t)
	var fail atomic.Bool
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.hooks = &faultHooks{onFdatasync: failWhile(&fail, syscall.EIO)}
	s := mustOpen(t, cfg)
	fill(t, s, "f", 1, 10, 30)
	if _, err := s.SyncRaw(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	fail.Store(true)
	if _, _, err := s.AppendAsync(&Message{Topic: "f", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SyncRaw(); !errors.Is(err, ErrIO) {
		t.Fatalf("flush with a failing fsync: %v, want ErrIO", err)
	}
	fail.Store(false)
	if _, err := s.Append(&Message{Topic: "f", Data: []byte("y")}); !errors.Is(err, ErrIO) {
		t.Fatalf("append after the fsync failure: %v, want the sticky ErrIO", err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close should report the sticky error")
	}
}

// A ring that breaks (here: closed under the log) makes the log fall back
// to fdatasync(2), once and for good, without failing a flush.
func TestAsyncFlushFallsBackWhenTheRingFails(t *testing.T) {
	ringOrSkip(t)
	var lb logBuf
	cfg := testConfig(t, "")
	cfg.Logger = newTestLogger(&lb)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	s.clog.ring.mu.Lock()
	s.clog.ring.broken = true
	s.clog.ring.mu.Unlock()
	n := s.clog.ring.ops.Load()
	fill(t, s, "b", 1, 20, 30)
	if _, err := s.SyncRaw(); err != nil {
		t.Fatalf("flush after the ring broke: %v", err)
	}
	if s.clog.ring.ops.Load() != n {
		t.Fatal("a broken ring was still used")
	}
	fill(t, s, "b2", 1, 20, 30)
	if _, err := s.SyncRaw(); err != nil {
		t.Fatalf("second flush after the ring broke: %v", err)
	}
	if c := strings.Count(lb.String(), "io_uring fsync failed"); c != 1 {
		t.Fatalf("fallback warning logged %d times, want once:\n%s", c, lb.String())
	}
}
