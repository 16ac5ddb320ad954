package store

import (
	"sync/atomic"
	"syscall"
)

// Read-ahead for cold reads. Records are served straight from the
// segments' memory mappings, so a read of data that is not in the page
// cache (a consumer draining an old backlog) takes a page fault per 4 KiB
// inside the broker's reader goroutine — synchronous disk reads of the
// kernel's fault-around size that also hold one of Go's Ps while they
// wait. As a read moves through the commit log, readAhead asks the kernel
// (madvise MADV_WILLNEED) to start reading the next raWindow bytes
// asynchronously, so the faults find their pages in flight or resident.
// One syscall per raStep of stream read, remembered in a small ring, so hot
// reads (and many readers of the same data) cost a few atomic loads.

const (
	raChunkShift = 20      // the ring remembers 1 MiB chunks of the stream
	raWindow     = 8 << 20 // advised ahead of a read
	raStep       = 4 << 20 // a new advice once the read is this far into the last one
	raRing       = 64
)

// readAheads remembers the chunks advised recently (chunk+1; 0 = empty).
type readAheads struct {
	ring [raRing]atomic.Int64
}

func (a *readAheads) seen(chunk int64) bool { return a.ring[chunk%raRing].Load() == chunk+1 }

// readAhead advises the kernel to read g's mapping from off on, up to
// raWindow bytes and never past limit (the stream's write position), unless
// the chunk raStep ahead of off was advised already.
func (s *Store) readAhead(g *segment, off, limit int64) {
	pos := g.base + off
	probe := (pos + raStep) >> raChunkShift
	if s.ra.seen(probe) || pos >= limit {
		return
	}
	start := off &^ 4095
	end := min(off+raWindow, g.size, limit-g.base)
	if end <= start {
		return
	}
	_ = syscall.Madvise(g.data[start:end], syscall.MADV_WILLNEED) // advice only: a failure changes nothing
	for c := (g.base + start) >> raChunkShift; c <= (g.base+end-1)>>raChunkShift; c++ {
		s.ra.ring[c%raRing].Store(c + 1)
	}
}
