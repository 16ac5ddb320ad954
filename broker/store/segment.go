package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"
)

// Commit-log segment files.
//
//	commitlog/<20-digit base>   e.g. commitlog/00000000001073741824
//
// A segment holds the commit-log bytes [base, base+size), where size is the
// file's length (SegmentSize when it was created). Its content is a run of
// records (protocol.EncodeRecord) written strictly sequentially from offset 0,
// followed either by zeros (not written yet) or, once the segment is full, by
// one BLANK filler (protocol.EncodeBlank: size + magic "BLNK") that covers the
// rest of the file exactly. A record never spans two segments, and the space
// left after a record is 0 or >= 8 bytes so a BLANK always fits. The next
// segment's base is this base+size.
//
// Files are preallocated with fallocate to their full size BEFORE they are
// mapped, so a write through the mapping can never hit ENOSPC (which would be
// a SIGBUS, not an error). Only the last segment is written.
type segment struct {
	base int64
	size int64
	path string
	f    *os.File
	data mmap.MMap

	// refs counts the segment list (1 while the segment is in it) plus one per
	// reader (ReadResult, flusher, dispatcher). The mapping and file are
	// closed when it drops to zero; retention unlinks the file first.
	refs atomic.Int64

	dio     atomic.Int64 // O_DIRECT descriptor + 1 for cold reads (coldread.go); 0 none yet, -1 none
	raFront atomic.Int64 // end of the furthest direct read (or read-ahead) in it (coldread.go)
}

func segmentName(base int64) string { return fmt.Sprintf("%020d", base) }

// parseSegmentName returns the base encoded in a 20-digit file name.
func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// createSegment creates, preallocates (fallocate), syncs and maps a new
// segment. Any leftover file of that name is replaced.
func createSegment(dir string, base, size int64, h *faultHooks) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, ioError("create segment", err)
	}
	fail := func(op string, err error) (*segment, error) {
		f.Close()
		os.Remove(path)
		return nil, ioError(op+" "+path, err)
	}
	if err := h.fallocate(f, size); err != nil {
		return fail("fallocate", err)
	}
	if err := h.fdatasync(f); err != nil {
		return fail("fdatasync", err)
	}
	if err := syncDir(dir); err != nil {
		return fail("fsync dir", err)
	}
	m, err := mmap.Map(f, mmap.RDWR, 0)
	if err != nil {
		return fail("mmap", err)
	}
	g := &segment{base: base, size: size, path: path, f: f, data: m}
	g.refs.Store(1)
	return g, nil
}

// openSegment maps an existing segment file.
func openSegment(path string, base int64) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, ioError("open segment", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, ioError("stat segment", err)
	}
	if fi.Size() == 0 {
		f.Close()
		return &segment{base: base, path: path}, nil // empty: caller removes it
	}
	m, err := mmap.Map(f, mmap.RDWR, 0)
	if err != nil {
		f.Close()
		return nil, ioError("mmap "+path, err)
	}
	g := &segment{base: base, size: fi.Size(), path: path, f: f, data: m}
	g.refs.Store(1)
	return g, nil
}

func (g *segment) end() int64 { return g.base + g.size }

// acquire takes a reader reference; it fails once the segment was released
// by the list and every reader (it is about to be, or was, unmapped).
func (g *segment) acquire() bool {
	for {
		r := g.refs.Load()
		if r <= 0 {
			return false
		}
		if g.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// release drops a reference; the last one unmaps and closes the file.
func (g *segment) release() {
	if g.refs.Add(-1) == 0 {
		g.unmap()
	}
}

func (g *segment) unmap() {
	g.closeDirect()
	if g.data != nil {
		_ = g.data.Unmap()
	}
	if g.f != nil {
		_ = g.f.Close()
	}
}

// segList is an immutable snapshot of the segments, oldest first, contiguous
// (each base is the previous end). Replaced copy-on-write under l.segsMu.
type segList struct{ segs []*segment }

// find returns the segment containing physical offset pos, or nil.
func (l *segList) find(pos int64) *segment {
	segs := l.segs
	n := len(segs)
	if n == 0 || pos < segs[0].base {
		return nil
	}
	// Fast path: the last segment (appends, dispatch, tail reads).
	if last := segs[n-1]; pos >= last.base {
		if pos < last.end() {
			return last
		}
		return nil
	}
	i := sort.Search(n, func(i int) bool { return segs[i].base > pos }) - 1
	if i < 0 || pos >= segs[i].end() {
		return nil
	}
	return segs[i]
}

// acquire finds and references the segment containing pos.
func (l *commitLog) acquireSegment(pos int64) *segment {
	for range 3 {
		g := l.segs.Load().find(pos)
		if g == nil {
			return nil
		}
		if g.acquire() {
			return g
		}
		// Released between the load and the acquire: the list changed.
	}
	return nil
}

// setSegmentsLocked publishes a new segment list; l.segsMu held.
func (l *commitLog) setSegmentsLocked(segs []*segment) {
	l.segs.Store(&segList{segs: segs})
	if len(segs) > 0 {
		l.logMin.Store(segs[0].base)
	}
}

// closeSegments drops the segment list's references (Close, failed Open).
func (l *commitLog) closeSegments() {
	l.segsMu.Lock()
	old := l.segs.Load()
	l.segs.Store(&segList{})
	l.segsMu.Unlock()
	for _, g := range old.segs {
		g.release()
	}
}

// setSegments publishes the segment list recovered (recovery).
func (l *commitLog) setSegments(segs []*segment) {
	l.segsMu.Lock()
	defer l.segsMu.Unlock()
	l.setSegmentsLocked(segs)
}

// dropBefore deletes the n oldest segments (retention) if the list still
// starts with first; readers holding one keep it mapped until they release
// it. It reports whether it did; the caller syncs the directory.
func (l *commitLog) dropBefore(first *segment, n int) bool {
	l.segsMu.Lock()
	cur := l.segs.Load().segs
	if n >= len(cur) || cur[0] != first {
		l.segsMu.Unlock()
		return false
	}
	dead := append([]*segment(nil), cur[:n]...)
	l.setSegmentsLocked(append([]*segment(nil), cur[n:]...))
	l.segsMu.Unlock()
	for _, g := range dead {
		os.Remove(g.path)
		g.release() // unmapped when the last reader releases it
	}
	return true
}
