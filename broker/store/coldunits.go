package store

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cold index reads. A read scans its partition's index units through the
// page cache, 256 units (4 KiB) per pread. On a cold backlog those pages are
// as cold as the commit log's, and filling the page cache costs as much per
// byte for them (coldread.go): one unit per record, a sixteenth of a 185-byte
// record's bytes, measured at ~20% of the broker's CPU on a cold drain once
// the log itself was read directly. So a large read (a budget of coldMin or
// more) whose units the page cache does not hold — cachestat(2) of the
// window finds at most one page cached (the first unit may have been read
// alone, e.g. the partition's min offset's) — reads up to coldUnitWindow
// bytes of units with one O_DIRECT pread into a buffer its ReadResult keeps,
// and scans from there; anything more cached keeps the normal path. (The
// probe used to be a buffered one-unit pread with RWF_NOWAIT, which answers
// EAGAIN for an uncached page but starts reading it into the page cache:
// the probe itself warmed the page it tested. cachestat only counts. On a
// kernel without it, 6.5 and older, the units are read through the page
// cache.) Only units below the partition's filed position are read this way
// (the rest live in memory, indextail.go). The safety argument is the log's:
// a page not in the page cache holds nothing newer than the disk, and units
// below filed are not written again except by a repair (a pwrite: its pages
// are then cached, and a direct read writes a cached dirty range back
// before reading it).

const coldUnitWindow = 128 << 10 // 8,192 units: a 1 MiB get of records down to 128 bytes

var coldUnitsOff bool // tests only: the commit log read directly, the units through the page cache

// coldUnits holds the units [q0, q1) of p read directly.
type coldUnits struct {
	raw, data []byte
	p         *partition
	q0, q1    int64
	cached    bool // this read found its units cached: it probes no more
}

// scanUnits returns up to want units of p from q for readInto: from the
// units read directly for r, when they cover q, else with readUnits into
// r.units (after a direct read when the units are cold and the read large).
func (s *Store) scanUnits(r *ReadResult, p *partition, q, want int64, budget int) ([]byte, int, error) {
	if b, n := r.ucold.units(p, q, want); n > 0 {
		return b, n, nil
	}
	if budget >= coldMin && !coldOff.Load() && !coldUnitsOff && !r.ucold.cached && s.coldUnitRead(r, p, q) {
		if b, n := r.ucold.units(p, q, want); n > 0 {
			return b, n, nil
		}
	}
	nb, err := s.readUnits(p, q, r.units[:want*unitSize])
	return r.units, nb, err
}

// units returns up to want units from q when u holds q.
func (u *coldUnits) units(p *partition, q, want int64) ([]byte, int) {
	if u.p != p || q < u.q0 || q >= u.q1 {
		return nil, 0
	}
	o := (q - u.q0) * unitSize
	n := min(want, u.q1-q) * unitSize
	return u.data[o : o+n], int(n)
}

func (u *coldUnits) reset() { u.p, u.q0, u.q1, u.cached = nil, 0, 0, false }

// coldUnitRead reads p's units from q directly into r.ucold when they are
// not in the page cache; false otherwise (or on any error: the
// normal path reads and reports).
func (s *Store) coldUnitRead(r *ReadResult, p *partition, q int64) bool {
	filed := p.filed.Load()
	if q >= filed {
		return false
	}
	x, err := s.ixFileFor(p, q, false)
	if err != nil || x == nil {
		return false
	}
	off := q*unitSize - x.base
	end := min(off+coldUnitWindow, s.cfg.IndexFileSize, filed*unitSize-x.base)
	if end-off < coldMin/8 {
		return false // a few units: not worth an open
	}
	start := off &^ (coldAlign - 1)
	want := (end - start + coldAlign - 1) &^ (coldAlign - 1)
	if n, err := s.files.cachedPages(x, start, want); err != nil || n > 1 {
		r.ucold.cached = true // cached (or not known): the page cache serves
		return false
	}
	dfd, err := unix.Open(x.path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	u := &r.ucold
	if u.data == nil {
		u.raw = make([]byte, coldUnitWindow+3*coldAlign)
		a := int((coldAlign - uintptr(unsafe.Pointer(&u.raw[0]))%coldAlign) % coldAlign)
		u.data = u.raw[a : a+coldUnitWindow+2*coldAlign]
	}
	got, err := unix.Pread(dfd, u.data[:want], start)
	if err != nil || int64(got) < end-start {
		return false
	}
	u.p, u.q0, u.q1 = p, (x.base+start)/unitSize, (x.base+end)/unitSize
	s.counters.coldUnitReads.Add(1)
	return true
}
