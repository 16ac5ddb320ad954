package store

import (
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
