package store

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tailArena hands out index-tail buffers (indextail.go) carved from 2 MiB
// anonymous mappings the kernel is asked to back with transparent huge pages
// (MADV_HUGEPAGE), so 1,000 busy tails share two TLB entries instead of
// taking 1,000: with puts going round-robin over many partitions each unit
// lands in another partition's tail, and on this VM the page walk of a 4 KiB
// tail page was the largest single cost of the spread (the dispatcher's
// prefetch of the next tail line stalled on it, ~37 ns per message in the
// topics-1000 profile; docs/storage.md, "Partition indexes").
//
// The arena is process-wide and only grows (up to tailArenaMax; past that,
// or where mmap fails, tailPool falls back to the Go heap): a buffer goes
// back to its free list when a tail returns it (tailPool.put), including at
// Store.Close, and is reused by any store. Memory is never unmapped, so the
// process keeps the peak of its tails' memory (bounded per store by
// Config.IndexBufferSize) — the same order as the heap buffers it replaces,
// rounded up to 2 MiB.
//
// Lock rules: a.mu is a leaf lock (tailPool.get/put may be called with
// p.tailMu held).
type tailArena struct {
	mu     sync.Mutex
	chunks map[uintptr]struct{} // chunk start >> tailChunkShift
	free   [][]byte
	failed bool // mmap failed or the arena is full: heap buffers from now on
}

const (
	tailChunkShift = 21 // 2 MiB chunks, the x86-64 huge page
	tailChunk      = 1 << tailChunkShift
	tailArenaMax   = 1 << 30 // process-wide
)

var tailBufs = tailArena{chunks: make(map[uintptr]struct{})}

// get returns a tailBytes buffer from the arena, nil if it cannot.
func (a *tailArena) get() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.free); n > 0 {
		b := a.free[n-1]
		a.free[n-1] = nil
		a.free = a.free[:n-1]
		return b
	}
	if a.failed {
		return nil
	}
	if len(a.chunks)*tailChunk >= tailArenaMax {
		a.failed = true
		return nil
	}
	// Twice the chunk, to cut an aligned chunk out of it (the rest stays
	// mapped and unused: address space, no memory).
	m, err := unix.Mmap(-1, 0, 2*tailChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		a.failed = true
		return nil
	}
	off := (tailChunk - int(uintptr(unsafe.Pointer(&m[0]))%tailChunk)) % tailChunk
	c := m[off : off+tailChunk : off+tailChunk]
	_ = unix.Madvise(c, unix.MADV_HUGEPAGE) // a hint: 4 KiB pages work too
	a.chunks[uintptr(unsafe.Pointer(&c[0]))>>tailChunkShift] = struct{}{}
	for i := tailChunk/tailBytes - 1; i >= 1; i-- { // lowest first out
		a.free = append(a.free, c[i*tailBytes:(i+1)*tailBytes:(i+1)*tailBytes])
	}
	return c[:tailBytes:tailBytes]
}

// put takes b back if it is the arena's; false for a heap buffer.
func (a *tailArena) put(b []byte) bool {
	k := uintptr(unsafe.Pointer(&b[0])) >> tailChunkShift
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.chunks[k]; !ok {
		return false
	}
	a.free = append(a.free, b[:tailBytes:tailBytes])
	return true
}
