package store

import (
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Zero-filling the commit log ahead of the writer (prefill).
//
// Segments are preallocated with fallocate, which on ext4 (and xfs) creates
// UNWRITTEN extents: the blocks are reserved but reading them returns zeros
// without I/O. The first write-back of a page in such an extent has to
// convert the extent to written, a metadata update that the next fdatasync
// must also make durable. With group commit every round's fdatasync pays it.
// Measured on the dev VM (ext4, 2026-11-29, tests/… see docs/storage.md):
// mmap write + fdatasync of 11 KiB took p50 ~236 µs on a fallocated file
// and ~169 µs once the blocks had been written with zeros beforehand
// (90 KiB: ~433 vs ~308 µs).
//
// So the preallocator goroutine writes zeros into the log ahead of the
// writer, with O_DIRECT (fallocate first, so a full disk still shows up as a
// clean error when a segment is created): the extents become written, and
// no page cache is used or polluted. (Zeros written through the page cache
// in large writes are worse than nothing: the cache then holds them in
// large folios, and a later small write dirties, and fdatasync writes back,
// a whole large folio — measured ~430 µs for a 4 KiB round.)
//
// Ranges: the filler keeps filling from max(filled, written + prefillGap) up
// to written + prefillGap + prefillLead, in chunks of prefillChunk, into the
// active segment and the prepared next one (it waits for the latter rather
// than delaying a roll). prefillGap keeps it clear of the pages the writer
// touches (staged writes pad at most to the end of the write position's
// page, stage.go).
//
// Safety does not depend on timing. An O_DIRECT write invalidates the page
// cache over its range afterwards; if a page there is dirty (or shares a
// large folio with a dirty page) the invalidation fails and the kernel
// records EIO on the file, which the next fdatasync returns ("Page cache
// invalidation failure on direct I/O" in the kernel log) — the log would
// refuse appends until restart. So while a chunk is written, l.fillFence
// holds the folio boundary at or below it (maxFolio: folios are naturally
// aligned and never larger), set under the append lock after checking it is
// at least prefillGap past the write position, and an append that would
// reach it waits for the chunk (makeRoomLocked). Nothing else dirties the
// log past the write position's page. Writing zeros past the write position never changes the log's
// content: recovery ends the log at the first zero header anyway.
//
// A failed zero write (the disk, not the log) is logged and skips the rest
// of that segment; appends are not affected. On tmpfs, and where O_DIRECT is
// not supported, filling is off.
//
// Cost: every byte of the log is written twice (zeros, then records), at the
// writer's pace (the lead is refilled as the writer advances), and every
// mmap page fault of the writer reads a page of zeros back instead of
// getting a fresh zero page. That is why Config.ZeroFill defaults to sync
// mode only: there the fdatasync per round is what limits throughput; in
// async mode the log is synced rarely and the extra reads and writes cost
// more than they save.

// ZeroFill selects when the commit log is zero-filled ahead of the writer.
type ZeroFill int

const (
	ZeroFillAuto   ZeroFill = iota // sync-flush mode only (default)
	ZeroFillAlways                 // both modes
	ZeroFillNever                  // never: segments stay as fallocate left them
)

// maxFolio is the largest page-cache folio (naturally aligned): PMD size,
// capped by the page cache's maximum order (2 MiB with 4 KiB pages).
var maxFolio = func() int64 {
	p := int64(os.Getpagesize())
	return min(p*p/8, p<<11)
}()

const (
	prefillChunk = 512 << 10 // one O_DIRECT write
	prefillGap   = 1 << 20   // start this far past the write position (sync mode)
	prefillLead  = 32 << 20  // fill up to this far past the gap
	dioAlign     = 4096
)

// prefillGapFor returns the distance the filler keeps from the writer.
func (l *commitLog) prefillGapFor() int64 {
	if l.cfg.prefillGap > 0 {
		return l.cfg.prefillGap // tests
	}
	return prefillGap
}

// filler is the prefill state, owned by the preallocator goroutine.
type filler struct {
	on     bool
	gap    int64
	lead   int64
	chunk  int64
	zeros  []byte // chunk bytes of an anonymous read-only zero mapping
	filled int64  // log position up to which filling was done or skipped
	path   string // file open in fd
	fd     int    // O_DIRECT descriptor of path, -1 none
	failed bool   // last write failed (logged once per failure run)
}

func (l *commitLog) newFiller() *filler {
	f := &filler{fd: -1}
	switch l.cfg.ZeroFill {
	case ZeroFillAlways:
		f.on = true
	case ZeroFillAuto:
		f.on = l.sync
	}
	if f.on && !hasUnwrittenExtents(l.dir) {
		l.log.Debug("zero-fill off: the commit log is on tmpfs")
		f.on = false
	}
	if !f.on {
		return f
	}
	f.gap = l.prefillGapFor()
	f.lead = prefillLead
	f.chunk = prefillChunk
	if l.cfg.prefillChunk > 0 {
		f.chunk = l.cfg.prefillChunk // tests
		f.lead = 4 * f.chunk
	}
	if l.cfg.prefillLead > 0 {
		f.lead = l.cfg.prefillLead // tests
	}
	z, err := unix.Mmap(-1, 0, int(f.chunk), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		l.log.Warn("zero-fill disabled: cannot map a zero buffer", "err", err)
		f.on = false
		return f
	}
	f.zeros = z
	return f
}

func (f *filler) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
	if f.zeros != nil {
		unix.Munmap(f.zeros)
		f.zeros = nil
	}
}

// open returns an O_DIRECT descriptor of path.
func (f *filler) open(path string) (int, error) {
	if f.fd >= 0 && f.path == path {
		return f.fd, nil
	}
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	f.fd, f.path = fd, path
	return fd, nil
}

// fillSegment returns the segment holding log position pos that the filler
// may write: the active one (or any in the list) or the prepared next one.
// Its path and bounds are all the filler needs (it writes through its own
// descriptor), so no reference is kept.
func (p *preallocator) fillSegment(pos int64) (base, end int64, path string, ok bool) {
	if g := p.l.acquireSegment(pos); g != nil {
		base, end, path = g.base, g.end(), g.path
		g.release()
		return base, end, path, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.ready; g != nil && pos >= g.base && pos < g.end() {
		return g.base, g.end(), g.path, true
	}
	return 0, 0, "", false
}

// fill zero-fills ahead of the writer, one chunk per call; it reports
// whether there is more to do now.
func (p *preallocator) fill() bool {
	f, l := p.fl, p.l
	if !f.on {
		return false
	}
	w := l.written.Load()
	from := max(f.filled, w+f.gap)
	if from >= w+f.gap+f.lead {
		return false
	}
	base, end, path, ok := p.fillSegment(from)
	if !ok {
		return false // next segment not prepared yet: retried on the next kick
	}
	// File offsets, aligned for O_DIRECT; the unaligned bits stay as they are.
	off := (from - base + dioAlign - 1) / dioAlign * dioAlign
	stop := min(off+f.chunk, (end-base)/dioAlign*dioAlign)
	if off >= stop {
		f.filled = end // nothing (more) to fill in this segment
		return true
	}
	// The fence starts at the page-cache folio boundary at or below the
	// chunk: no folio the writer may dirty can then overlap the chunk. When
	// that is too close to the writer, skip to the next folio block.
	fence := base + off/maxFolio*maxFolio
	skip := func() bool {
		f.filled = min(end, fence+maxFolio)
		return true
	}
	if fence < w+f.gap {
		return skip()
	}
	fd, err := f.open(path)
	if err != nil {
		if err == unix.EINVAL {
			l.log.Info("zero-fill disabled: O_DIRECT not supported here", "path", path)
		} else {
			l.log.Warn("zero-fill disabled", "path", path, "err", err)
		}
		f.on = false
		return false
	}
	// Fence the chunk, unless the writer got too close meanwhile.
	p.mu.Lock()
	p.filling = true
	p.mu.Unlock()
	l.mu.Lock()
	okToWrite := fence >= l.wpos+f.gap && !l.closed
	if okToWrite {
		l.fillFence = fence
	}
	l.mu.Unlock()
	if okToWrite {
		err = l.hooks.zeroFill(fd, path, f.zeros[:stop-off], off)
		l.mu.Lock()
		l.fillFence = math.MaxInt64
		l.mu.Unlock()
	}
	p.mu.Lock()
	p.filling = false
	p.cond.Broadcast()
	p.mu.Unlock()
	if !okToWrite {
		return skip() // the writer got close meanwhile
	}
	if err != nil {
		if !f.failed {
			l.log.Warn("zero-fill write failed; the rest of the segment stays preallocated only", "path", path, "err", err)
		}
		f.failed = true
		f.filled = end
		return true
	}
	f.failed = false
	l.ctr.zeroFilled.Add(stop - off)
	f.filled = base + stop
	if stop == (end-base)/dioAlign*dioAlign {
		f.filled = end
	}
	return true
}

// hasUnwrittenExtents reports whether dir's file system is one where
// zero-filling helps: not tmpfs/ramfs (memory; fallocate already populates).
func hasUnwrittenExtents(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return true
	}
	return st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC
}

// waitFill waits until no zero-fill chunk is being written (makeRoomLocked,
// without the append lock).
func (p *preallocator) waitFill() {
	p.mu.Lock()
	for p.filling {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// zeroFill writes zeros (a chunk of the zero mapping) at off of the file
// open as fd (O_DIRECT).
func (h *faultHooks) zeroFill(fd int, path string, zeros []byte, off int64) error {
	if h != nil && h.onZeroFill != nil {
		if err := h.onZeroFill(path); err != nil {
			return err
		}
	}
	for len(zeros) > 0 {
		n, err := unix.Pwrite(fd, zeros, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "pwrite", Path: path, Err: err}
		}
		if n <= 0 {
			return &os.PathError{Op: "pwrite", Path: path, Err: unix.EIO}
		}
		zeros = zeros[n:]
		off += int64(n)
	}
	return nil
}
