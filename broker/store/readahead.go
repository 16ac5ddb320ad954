package store

import (
	"errors"
	"sync/atomic"
	"syscall"
)

// Read-ahead and populate for cold reads. Records are served straight from
// the segments' memory mappings, so a read of data that is not in the page
// cache (a consumer draining an old backlog) would take a page fault per
// 4 KiB inside the broker's reader goroutine: a synchronous disk read of the
// kernel's fault-around size, taken in user mode, so the Go runtime cannot
// hand the goroutine's P to other work while it waits (with GOMAXPROCS 2, a
// faulting reader stalls half of the broker's publishing). Two advices fix
// that:
//
//   - readAhead: as a read moves through the commit log it asks the kernel
//     (madvise MADV_WILLNEED) to start reading the next raWindow bytes
//     asynchronously, one syscall per raStep of stream read; less than
//     populateMin before the write position it advises nothing (a tail
//     reader's data was just written);
//   - populate: before a read touches its records (the CRC check, then the
//     writer's writev), madvise(MADV_POPULATE_READ) maps the pages the read
//     will serve, up to its byte budget, in one syscall. Waiting for the
//     disk then happens inside a syscall, where the runtime hands the P to
//     another goroutine, and the minor faults of fresh mappings (one per
//     16 pages of fault-around) become one page-table walk. Reads of less
//     than 64 KiB (consumers at the tail, reading what was just written and
//     is in the page cache) are left alone: one syscall per small get would
//     cost more than the faults it saves.
//
// Both remember the 1 MiB chunks of the commit log they covered in small
// rings, so hot reads (and many readers of the same data) cost a few atomic
// loads. A chunk is remembered only when it was covered whole. Pages can be
// reclaimed after they were populated; the read then faults as it would
// without the advice. Kernels before 5.14 refuse MADV_POPULATE_READ
// (EINVAL): populate turns itself off after the first refusal.

const (
	raChunkShift = 20      // the rings remember 1 MiB chunks of the stream
	raWindow     = 8 << 20 // advised ahead of a read
	raStep       = 4 << 20 // a new advice once the read is this far into the last one
	raRing       = 64

	madvPopulateRead = 22       // MADV_POPULATE_READ (Linux 5.14); not in package syscall
	populateMin      = 64 << 10 // smaller reads are not populated
)

// readAheads remembers recently covered chunks (chunk+1; 0 = empty).
type readAheads struct {
	ring [raRing]atomic.Int64
}

func (a *readAheads) seen(chunk int64) bool { return a.ring[chunk%raRing].Load() == chunk+1 }

func (a *readAheads) mark(chunk int64) { a.ring[chunk%raRing].Store(chunk + 1) }

// populateOff is set when the kernel refused MADV_POPULATE_READ.
var populateOff atomic.Bool

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
	if end-start < populateMin {
		// Near the write position (a consumer at the tail, reading what was
		// just written and is in the page cache): nothing worth advising,
		// and since such a range never reaches the probe chunk, advising it
		// cost a madvise on every get of a tail reader.
		return
	}
	_ = syscall.Madvise(g.data[start:end], syscall.MADV_WILLNEED) // advice only: a failure changes nothing
	for c := (g.base + start) >> raChunkShift; c <= (g.base+end-1)>>raChunkShift; c++ {
		s.ra.mark(c)
	}
}

// populate maps g's pages from off up to n bytes (never past limit, the
// write position) before a read touches them, unless the range is shorter
// than populateMin or every 1 MiB chunk of it was populated recently.
func (s *Store) populate(g *segment, off int64, n int, limit int64) {
	if populateOff.Load() {
		return
	}
	end := min(off+int64(n), g.size, limit-g.base)
	if end-off < populateMin {
		return // a small read (a consumer at the tail): its few pages are not worth a syscall
	}
	first, last := (g.base+off)>>raChunkShift, (g.base+end-1)>>raChunkShift
	c := first
	for c <= last && s.pop.seen(c) {
		c++
	}
	if c > last {
		return
	}
	start := max(off, (c<<raChunkShift)-g.base) &^ 4095
	err := syscall.Madvise(g.data[start:end], madvPopulateRead)
	if errors.Is(err, syscall.EINVAL) {
		populateOff.Store(true) // an old kernel; reads fault as before
		return
	}
	if err != nil {
		return // advice only (EFAULT, ENOMEM, EINTR): the read faults what is missing
	}
	for ; c <= last; c++ {
		if (c<<raChunkShift)-g.base >= start && ((c+1)<<raChunkShift)-g.base <= end {
			s.pop.mark(c) // covered whole
		}
	}
}
