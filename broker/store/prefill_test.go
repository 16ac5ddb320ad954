package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
	"golang.org/x/sys/unix"
)

// Zero-filling ahead of the writer (prefill.go).

func prefillConfig(t *testing.T) Config {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0 // sync flush: zero-fill on by default
	cfg.SegmentSize = 256 << 10
	cfg.prefillGap = 8 << 10 // far closer than in production: the fence gets hit
	cfg.prefillChunk = 16 << 10
	return cfg
}

// unwrittenBytes returns how many bytes of [off, off+n) of path lie in
// unwritten (preallocated, never written) extents, using FIEMAP; ok is false
// when the file system does not support it.
func unwrittenBytes(t *testing.T, path string, off, n int64) (int64, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const (
		fsIocFiemap   = 0xC020660B
		extentSize    = 56
		maxExtents    = 256
		flagUnwritten = 0x800
		flagLast      = 0x1
	)
	var total int64
	start := off
	for start < off+n {
		buf := make([]byte, 32+maxExtents*extentSize)
		le := func(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }
		*le(buf[0:]) = uint64(start)
		*le(buf[8:]) = uint64(off + n - start)
		*(*uint32)(unsafe.Pointer(&buf[16])) = 1 // FIEMAP_FLAG_SYNC
		*(*uint32)(unsafe.Pointer(&buf[24])) = maxExtents
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return 0, false
		}
		mapped := *(*uint32)(unsafe.Pointer(&buf[20]))
		if mapped == 0 {
			break
		}
		last := false
		for i := 0; i < int(mapped); i++ {
			e := buf[32+i*extentSize:]
			logical, length := int64(*le(e[0:])), int64(*le(e[16:]))
			flags := *(*uint32)(unsafe.Pointer(&e[40]))
			lo, hi := max(logical, off), min(logical+length, off+n)
			if flags&flagUnwritten != 0 && hi > lo {
				total += hi - lo
			}
			start = logical + length
			last = flags&flagLast != 0
		}
		if last {
			break
		}
	}
	return total, true
}

func TestZeroFillAheadOfWriter(t *testing.T) {
	cfg := prefillConfig(t)
	cfg.prefillLead = 1 << 20 // covers the whole next segment
	s := mustOpen(t, cfg)
	type rec struct {
		a    AppendResult
		data []byte
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < 150; i++ {
				n := rng.Intn(2000)
				if i%25 == 0 {
					n = 10<<10 + rng.Intn(20<<10) // larger than the gap: may meet the fence
				}
				data := make([]byte, n)
				rng.Read(data)
				a, err := s.Append(&Message{Topic: "z", Partition: int32(w % 3), Data: data})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				recs = append(recs, rec{a, data})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	st := s.Stats()
	if st.ZeroFilledBytes == 0 {
		t.Fatalf("nothing zero-filled (segments %d, rolls %d)", st.Segments, st.SegmentRolls)
	}
	if st.SegmentRolls < 3 {
		t.Fatalf("only %d rolls", st.SegmentRolls)
	}
	t.Logf("zero-filled %d KiB, %d rolls, %d fence waits", st.ZeroFilledBytes>>10, st.SegmentRolls, s.counters.fillWaits.Load())
	check := func(s *Store) {
		t.Helper()
		for _, r := range recs {
			res, err := s.ReadByID(r.a.MsgID)
			if err != nil {
				t.Fatalf("ReadByID %d: %v", r.a.MsgID, err)
			}
			got, _, err := protocol.DecodeRecord(res.Bufs[0], 0)
			if err != nil || !bytes.Equal(got.Data, r.data) || got.QueueOffset != r.a.QueueOffset {
				t.Fatalf("record at %d differs: %v", r.a.PhysicalOffset, err)
			}
			res.Release()
		}
	}
	check(s)

	// The log ahead of the writer was filled: the prepared next segment
	// (filled while the writer was in the active one: with these small
	// segments the active one is never filled, its folio block holds the
	// writer) has no unwritten extent left.
	var next string
	waitFor(t, "the next segment filled", func() bool {
		s.clog.pre.mu.Lock()
		defer s.clog.pre.mu.Unlock()
		if g := s.clog.pre.ready; g != nil {
			next = g.path
			u, ok := unwrittenBytes(t, g.path, 0, g.size)
			return !ok || u == 0
		}
		return false
	})
	if _, ok := unwrittenBytes(t, next, 0, cfg.SegmentSize); !ok {
		t.Log("FIEMAP not supported here; extent check skipped")
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	check(s)
	if _, err := s.Append(&Message{Topic: "z", Data: []byte("more")}); err != nil {
		t.Fatal(err)
	}
}

func TestZeroFillFenceStopsAppendsAtTheChunk(t *testing.T) {
	// A zero-fill chunk in flight in the next segment: an append that rolls
	// into it waits until the chunk is written, then lands intact.
	cfg := prefillConfig(t)
	cfg.SegmentSize = 64 << 10
	release := make(chan struct{})
	var entered atomic.Bool
	cfg.hooks = &faultHooks{onZeroFill: func(string) error {
		if !entered.Swap(true) {
			<-release // hold the first chunk
		}
		return nil
	}}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	waitFor(t, "a chunk in flight", entered.Load)
	s.clog.mu.Lock()
	fence, wpos, activeEnd := s.clog.fillFence, s.clog.wpos, s.clog.active.end()
	s.clog.mu.Unlock()
	if fence != activeEnd || fence-wpos < cfg.prefillGap {
		t.Fatalf("fence %d: want the next segment's start %d, at least %d past the writer at %d",
			fence, activeEnd, cfg.prefillGap, wpos)
	}
	// This one fits in the active segment.
	if _, _, err := s.AppendAsync(&Message{Topic: "f", Data: make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	// This one does not: it rolls into the segment being filled and waits.
	big := bytes.Repeat([]byte("B"), int(cfg.SegmentSize/2))
	done := make(chan AppendResult, 1)
	go func() {
		defer close(done)
		for i := 0; i < 2; i++ {
			a, _, err := s.AppendAsync(&Message{Topic: "f", Data: big})
			if err != nil {
				t.Error(err)
				return
			}
			done <- a
		}
	}()
	a0 := <-done // fits in the active segment
	waitFor(t, "the append to wait at the fence", func() bool { return s.counters.fillWaits.Load() > 0 })
	select {
	case <-done:
		t.Fatal("append crossed a chunk being zero-filled")
	default:
	}
	close(release)
	a1 := <-done
	if a1.PhysicalOffset != activeEnd {
		t.Fatalf("second record at %d, want %d (after the roll)", a1.PhysicalOffset, activeEnd)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []AppendResult{a0, a1} {
		r, err := s.ReadByID(a.MsgID)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
		if err != nil || !bytes.Equal(got.Data, big) {
			t.Fatalf("record at %d is damaged: %v", a.PhysicalOffset, err)
		}
		r.Release()
	}
}

func TestZeroFillErrorsDoNotAffectAppends(t *testing.T) {
	cfg := prefillConfig(t)
	var calls atomic.Int64
	cfg.hooks = &faultHooks{onZeroFill: func(string) error {
		calls.Add(1)
		return syscall.EIO
	}}
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	res := fill(t, s, "e", 2, 600, 1000) // ~700 KiB: several segments
	verifyAll(t, s, "e", 2, res, 1000)
	if calls.Load() == 0 {
		t.Fatal("zero-fill never tried")
	}
	if st := s.Stats(); st.ZeroFilledBytes != 0 || st.WriteError != "" {
		t.Fatalf("stats after failing zero-fill: %+v", st)
	}
	if n := strings.Count(lb.String(), "zero-fill write failed"); n != 1 {
		t.Fatalf("failure logged %d times (want once per failure run): %s", n, lb.String())
	}
}

func TestZeroFillWithDiskFull(t *testing.T) {
	// fallocate comes first: a full disk still fails cleanly when a segment
	// is created; zero-fill only writes into preallocated segments.
	var full atomic.Bool
	cfg := prefillConfig(t)
	cfg.SegmentSize = 32 << 10
	cfg.prefillGap = 4 << 10
	cfg.prefillChunk = 8 << 10
	cfg.hooks = &faultHooks{onFallocate: failWhile(&full, syscall.ENOSPC)}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	waitPrepared(t, s)
	full.Store(true)
	acked, err := appendUntilError(t, s, 400, 300)
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("expected ErrDiskFull, got %v", err)
	}
	full.Store(false)
	waitFor(t, "appends accepted again", func() bool {
		_, err := s.Append(&Message{Topic: "d", Data: []byte("x")})
		return err == nil
	})
	for i, a := range acked {
		r, err := s.Read("d", 0, a.QueueOffset, 1, nil)
		if err != nil || r.Status != ReadFound {
			t.Fatalf("acked message %d lost: %v", i, err)
		}
		rec, _, _ := protocol.DecodeRecord(r.Bufs[0], 0)
		if !bytes.Equal(rec.Data, body("d", 0, i, 300)) {
			t.Fatalf("acked message %d differs", i)
		}
		r.Release()
	}
	if s.Stats().ZeroFilledBytes == 0 {
		t.Fatal("nothing zero-filled")
	}
}

func TestZeroFillOffOnTmpfs(t *testing.T) {
	// tmpfs has no unwritten extents: zero-fill stays off.
	fi, err := os.Stat("/dev/shm")
	if err != nil || !fi.IsDir() || unix.Access("/dev/shm", unix.W_OK) != nil {
		t.Skip("no /dev/shm")
	}
	t.Setenv("TMPDIR", "/dev/shm")
	cfg := prefillConfig(t)
	cfg.ZeroFill = ZeroFillAlways
	cfg.UnflushThreshold = 1
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	res := fill(t, s, "m", 1, 300, 1000)
	verifyAll(t, s, "m", 1, res, 1000)
	if n := s.Stats().ZeroFilledBytes; n != 0 {
		t.Fatalf("zero-filled %d bytes on tmpfs", n)
	}
}

func TestZeroFillModes(t *testing.T) {
	for _, c := range []struct {
		mode ZeroFill
		sync bool
		want bool
	}{
		{ZeroFillAuto, true, true}, {ZeroFillAuto, false, false},
		{ZeroFillAlways, false, true}, {ZeroFillNever, true, false},
	} {
		t.Run(fmt.Sprintf("%d/%v", c.mode, c.sync), func(t *testing.T) {
			cfg := prefillConfig(t)
			cfg.ZeroFill = c.mode
			if !c.sync {
				cfg.UnflushThreshold = 1
			}
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			if s.clog.pre.fl.on != c.want {
				t.Fatalf("zero-fill on = %v, want %v", s.clog.pre.fl.on, c.want)
			}
		})
	}
}

func TestZeroFillNeverCollidesWithTheWriter(t *testing.T) {
	// Production distances, async mode (fast writer, zero-fill forced on): the
	// O_DIRECT zero writes must never overlap a page-cache folio the writer
	// dirtied, or the kernel fails the page-cache invalidation after the
	// write and the next fdatasync returns EIO (seen with a fence at the
	// chunk instead of the folio boundary below it).
	if testing.Short() {
		t.Skip("writes ~100 MB")
	}
	cfg := testConfig(t, "")
	cfg.SegmentSize = 64 << 20
	cfg.IndexFileSize = 4 << 20
	cfg.UnflushThreshold = 10000
	cfg.ZeroFill = ZeroFillAlways
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	m := &Message{Topic: "c", Data: make([]byte, 200)}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for i := 0; s.clog.written.Load() < 100<<20 && time.Now().Before(deadline); i++ {
		m.Partition = int32(i % 4)
		if _, _, err := s.AppendAsync(m); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("fsync after zero-filling next to the writer: %v", err)
	}
	st := s.Stats()
	if st.ZeroFilledBytes == 0 {
		t.Fatal("nothing zero-filled")
	}
	t.Logf("wrote %d MiB, zero-filled %d MiB", st.CommitLogMax>>20, st.ZeroFilledBytes>>20)
}
