package store

import (
	"strings"
	"testing"
	"unsafe"
)

func TestTailArenaGetPut(t *testing.T) {
	var a = tailArena{chunks: make(map[uintptr]struct{})}
	seen := make(map[uintptr]bool)
	var bufs [][]byte
	for range tailChunk/tailBytes + 3 { // into a second chunk
		b := a.get()
		if b == nil {
			t.Skip("no anonymous mapping here")
		}
		if len(b) != tailBytes || cap(b) != tailBytes {
			t.Fatalf("buffer len %d cap %d, want %d", len(b), cap(b), tailBytes)
		}
		p := uintptr(unsafe.Pointer(&b[0]))
		if p%tailBytes != 0 || seen[p] {
			t.Fatalf("buffer at %#x: misaligned or handed out twice", p)
		}
		seen[p] = true
		b[0], b[tailBytes-1] = 1, 2 // writable
		bufs = append(bufs, b)
	}
	if len(a.chunks) != 2 {
		t.Fatalf("%d chunks, want 2", len(a.chunks))
	}
	for _, b := range bufs {
		if !a.put(b) {
			t.Fatal("the arena's buffer not taken back")
		}
	}
	if a.put(make([]byte, tailBytes)) {
		t.Fatal("a heap buffer taken as the arena's")
	}
	if b := a.get(); !seen[uintptr(unsafe.Pointer(&b[0]))] {
		t.Fatal("a freed buffer not reused")
	}
}

// Close hands the tails' buffers back, so a store opened after it reuses them.
func TestCloseReleasesTails(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	for i := range 3 {
		mustAppend(t, s, &Message{Topic: "t", Partition: int32(i), Data: []byte("x")})
	}
	waitFor(t, "tails holding the units", func() bool { return s.tailBytesHeld() == 3*tailBytes })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.tailBytesHeld(); n != 0 {
		t.Fatalf("%d tail bytes held after Close", n)
	}
}

// Where the arena cannot map (or is full), the tails take heap buffers and
// the store works the same: units buffered, read back, flushed at Close, the
// buffers handed back to the heap pool, not to the arena.
func TestTailHeapFallback(t *testing.T) {
	a := &tailBufs
	a.mu.Lock()
	failed, free := a.failed, a.free
	a.failed, a.free = true, nil
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.failed = failed
		a.free = append(free, a.free...) // arena buffers other tests gave back meanwhile
		a.mu.Unlock()
	}()
	cfg := testConfig(t, "")
	s := mustOpen(t, cfg)
	for i := range 300 {
		mustAppend(t, s, &Message{Topic: "t", Partition: int32(i % 3), Data: body("t", int32(i%3), i, 100)})
	}
	waitFor(t, "tails holding the units", func() bool { return s.tailBytesHeld() == 3*tailBytes })
	for p := range int32(3) {
		waitReadable(t, s, "t", p, 100)
		if got := len(readAll(t, s, "t", p, 0, nil)); got != 100 {
			t.Fatalf("t/%d: %d records read, want 100", p, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.tailBytesHeld(); n != 0 {
		t.Fatalf("%d tail bytes held after Close", n)
	}
	a.mu.Lock()
	n := len(a.free)
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d heap buffers taken into the arena's free list", n)
	}
	// The units were written at Close: the reopened store finds them and
	// rebuilds nothing (recovery logs "recovery: done" only when it redid work).
	var lb logBuf
	cfg.Logger = newTestLogger(&lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	for p := range int32(3) {
		if got := s.MaxOffset("t", p); got != 100 {
			t.Fatalf("t/%d: max offset %d after reopening, want 100", p, got)
		}
	}
	if strings.Contains(lb.String(), "recovery: done") {
		t.Fatalf("recovery redid work after a clean Close:\n%s", lb.String())
	}
}
