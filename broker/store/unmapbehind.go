package store

import (
	"golang.org/x/sys/unix"
)

// Unmapping behind the dispatcher. The dispatcher reads every record of the
// commit log through the segment's mapping (dispatch.go), which maps each
// page of the log into the broker's page tables, and nothing unmapped them:
// a broker that had written 9 GB held 9 GB of mapped log (its RSS), and a
// mapped page is not dropped by `echo 1 > /proc/sys/vm/drop_caches` and is
// reclaimed after the unmapped ones under memory pressure. So a backlog the
// operator (or the accumulation benchmark) expected to be cold stayed in the
// page cache, and the old pages competed with the hot tail for memory.
//
// Now the dispatcher drops its mappings (madvise MADV_DONTNEED on the shared
// file mapping: the page-table entries go, the page cache keeps the pages,
// which then age like any unmapped file page) once the dispatch position is
// unmapLag past them, in unmapChunk steps: one madvise per 64 MiB of log.
// Readers near the tail (within unmapLag) keep their mapped pages; a reader
// further back maps what it reads again (populate, readahead.go: page-cache
// hits cost a minor fault each, in one syscall) or reads it directly when
// it is cold (coldread.go). Correctness does not depend on it: a record
// slice that a reply still holds is faulted in again from the page cache
// by the kernel's copy (the writer writes with pwrite, so no page is dirty
// only in the mapping; and a dirty mapped page would keep its data).
var (
	unmapChunk int64 = 64 << 20 // a power of two (tests make it smaller)
	unmapLag   int64 = 64 << 20
)

// unmapBehind drops the mappings of the log below pos-unmapLag (whole
// chunks) not dropped yet; dispMu held (d.unmapped is the dispatcher's).
func (d *dispatcher) unmapBehind(pos int64) {
	to := (pos - unmapLag) &^ (unmapChunk - 1)
	if to <= d.unmapped {
		return
	}
	s := d.s
	from := max(d.unmapped, s.clog.minPos())
	for _, g := range s.clog.segments() {
		lo, hi := max(from, g.base), min(to, g.end())
		if lo >= hi || !g.acquire() {
			continue
		}
		_ = unix.Madvise(g.data[lo-g.base:hi-g.base], unix.MADV_DONTNEED) // advice: a failure keeps the pages mapped
		g.release()
	}
	d.unmapped = to
}
