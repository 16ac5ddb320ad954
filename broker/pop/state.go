package pop

import (
	"syscall"
	"time"
	"unsafe"
)

// Delivery state of one group on one partition of one topic.
//
// The window holds one entry per queue offset in [base, cursor): every
// offset below base is done (acknowledged, rejected, dead-lettered or
// skipped by the filter), cursor is the first offset never delivered. An
// entry is 16 bytes; the window is capped at Config.MaxInflight entries
// (Receive delivers no new message of a partition whose window is full,
// only redeliveries).
//
// The window is a list of time slices: slices of sliceLen consecutive
// offsets (1 MiB of entries), each ending at a multiple of sliceLen except
// the newest, which grows as messages are delivered. Offsets are delivered
// for the first time in order, so a slice is a slice of time: when the
// cursor passes its end it is sealed, and a sealed slice older than
// Config.SpillAfter (or any sealed slice, oldest first, while the windows
// in memory exceed Config.SpillMemory) moves to the side file (spill.go);
// its entries are then read and written through the file's mapping. The
// first slice may start before base (the done entries below base are
// compacted away while it is in memory); a slice is dropped once base
// passes its end.

const (
	sliceShift = 16
	sliceLen   = 1 << sliceShift
	sliceMask  = sliceLen - 1
)

type slice struct {
	start  int64   // offset of ents[0]
	ents   []entry // on the heap, in anon, or a view of the side file (slot != nil)
	anon   []byte  // an anonymous mapping holding ents (a large slice), unmapped when it goes
	slot   *slot
	sealed int64 // unix ms the cursor passed its end (0: the newest)
}

// heapMax: a slice grows on the Go heap up to this many entries, then
// moves to an anonymous mapping of its full length, whose pages become
// resident as they are written and go back to the system the moment the
// slice is spilled or dropped (the heap would keep them until a GC and
// the scavenger).
const heapMax = 4096

// allocAnon maps n entries; nil when the system refuses.
func allocAnon(n int) ([]entry, []byte) {
	b, err := syscall.Mmap(-1, 0, n*entrySize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil
	}
	return unsafe.Slice((*entry)(unsafe.Pointer(&b[0])), n), b
}

// freeMem gives the memory of an in-memory slice back at once.
func (s *slice) freeMem() {
	if s.anon != nil {
		_ = syscall.Munmap(s.anon)
		s.anon = nil
	}
	s.ents = nil
}

// Entry states.
const (
	stInflight uint8 = iota + 1 // locked to its receiver until deadline
	stWaiting                   // released with a delay: redelivered at deadline
	stReady                     // in the ready list, to be delivered again
	stDead                      // being moved to the dead-letter queue
	stDone                      // finished for the group
)

type entry struct {
	deadline int64  // unix ms (stInflight, stWaiting)
	attempt  uint16 // deliveries so far (a lower bound after a crash; 0: unknown, see redeliverLocked)
	state    uint8
	// late: the deadline was moved later (extend, release) without a timer
	// entry of its own; the entry at the earlier deadline reschedules it
	// when it fires (timer.go).
	late bool
}

// rrun is a run of ready offsets [off, off+n).
type rrun struct {
	off, n int64
}

type part struct {
	id     int32
	base   int64
	cursor int64
	sl     []*slice // the window's slices, oldest first; the last ends at cursor
	spare  []entry  // a small heap slice kept for reuse when the window empties
	ready  []rrun   // runs of offsets in state stReady, oldest first (from rhead)
	rhead  int
	inited bool   // base/cursor set (from recovery or the partition's min offset)
	spill  *spill // the side file (nil: everything in memory)
}

// at returns the entry of offset o, or nil outside [base, cursor).
func (p *part) at(o int64) *entry {
	if o < p.base || o >= p.cursor {
		return nil
	}
	s := p.sl[0]
	if i := o - s.start; i < int64(len(s.ents)) {
		return &s.ents[i]
	}
	s = p.sl[1+int((o-p.sl[1].start)>>sliceShift)]
	return &s.ents[o-s.start]
}

func (p *part) inflight() int { return int(p.cursor - p.base) }

// push appends the entry of offset cursor; now seals the previous slice
// when a new one begins.
func (p *part) push(e entry, now int64) {
	n := len(p.sl)
	if n == 0 || p.cursor&sliceMask == 0 {
		if n > 0 {
			p.sl[n-1].sealed = now
		}
		ents := p.spare[:0]
		p.spare = nil
		if ents == nil {
			ents = make([]entry, 0, 64)
		}
		p.sl = append(p.sl, &slice{start: p.cursor, ents: ents})
		n++
	}
	s := p.sl[n-1]
	if len(s.ents) == cap(s.ents) {
		// grow by doubling, never past the slice's end (append's own growth
		// would); past heapMax to the whole slice in an anonymous mapping
		need := sliceLen - int(s.start&sliceMask)
		want := min(max(2*cap(s.ents), 64), need)
		var ne []entry
		var anon []byte
		if want > heapMax {
			ne, anon = allocAnon(need)
		}
		if ne == nil {
			ne = make([]entry, want)
		}
		copy(ne, s.ents)
		if s.anon != nil {
			_ = syscall.Munmap(s.anon)
		}
		s.ents, s.anon = ne[:len(s.ents)], anon
	}
	s.ents = append(s.ents, e)
	p.cursor++
}

// advance moves base over the done prefix, dropping the slices it passes
// and compacting the first one while it is in memory.
func (p *part) advance() {
	for len(p.sl) > 0 {
		s := p.sl[0]
		i := p.base - s.start
		for i < int64(len(s.ents)) && s.ents[i].state == stDone {
			i++
		}
		p.base = s.start + i
		if i < int64(len(s.ents)) {
			if s.slot == nil && i > 4096 && i > int64(len(s.ents))/2 {
				k := copy(s.ents, s.ents[i:])
				s.ents, s.start = s.ents[:k], p.base
			}
			return
		}
		p.dropFirst()
	}
}

// dropFirst removes the first slice (every entry of it is done).
func (p *part) dropFirst() {
	s := p.sl[0]
	switch {
	case s.slot != nil:
		p.spill.free(s.slot)
	case s.anon != nil:
		s.freeMem()
	case len(p.sl) == 1:
		p.spare = s.ents[:0] // a small window emptied: keep its memory
	}
	copy(p.sl, p.sl[1:])
	p.sl[len(p.sl)-1] = nil
	p.sl = p.sl[:len(p.sl)-1]
}

// freeAll gives back the memory of every slice (Close: nothing uses them
// any more).
func (p *part) freeAll() {
	for _, s := range p.sl {
		if s.slot == nil {
			s.freeMem()
		}
	}
	p.sl = nil
}

// reset empties the window and moves it to offset o.
func (p *part) reset(o int64) {
	for len(p.sl) > 0 {
		p.dropFirst()
	}
	p.base, p.cursor = o, o
}

// scan calls fn with the window's entries, slice by slice, from base; a
// spilled slice is read from the side file into buf (not through the
// mapping, so that a full scan does not fault the file into memory). fn
// must not keep ents.
func (p *part) scan(buf *[]entry, fn func(start int64, ents []entry)) {
	for _, s := range p.sl {
		ents, start := s.ents, s.start
		if s.slot != nil {
			if cap(*buf) < len(ents) {
				*buf = make([]entry, sliceLen)
			}
			b := (*buf)[:len(ents)]
			if p.spill.read(s.slot, b) == nil {
				ents = b
			}
		}
		if start < p.base {
			ents, start = ents[p.base-start:], p.base
		}
		fn(start, ents)
	}
}

// addReady appends offset o to the ready list (a run of consecutive
// offsets grows by one: a batch whose lock ended is one run).
func (p *part) addReady(o int64) {
	if n := len(p.ready); n > p.rhead && p.ready[n-1].off+p.ready[n-1].n == o {
		p.ready[n-1].n++
		return
	}
	p.ready = append(p.ready, rrun{off: o, n: 1})
}

// peekReady returns the oldest ready offset (dropping stale ones).
func (p *part) peekReady() (int64, bool) {
	for p.rhead < len(p.ready) {
		o := p.ready[p.rhead].off
		if e := p.at(o); e != nil && e.state == stReady {
			return o, true
		}
		p.dropReady()
	}
	return 0, false
}

// readyRun is how many offsets follow the oldest ready one in its run.
func (p *part) readyRun() int64 {
	if p.rhead < len(p.ready) {
		return p.ready[p.rhead].n
	}
	return 0
}

// dropReady removes the oldest ready offset.
func (p *part) dropReady() {
	r := &p.ready[p.rhead]
	r.off++
	if r.n--; r.n == 0 {
		p.rhead++
		if p.rhead == len(p.ready) {
			p.ready, p.rhead = p.ready[:0], 0
		}
	}
}

// readyLen counts the ready offsets (stale ones included).
func (p *part) readyLen() int {
	n := 0
	for _, r := range p.ready[p.rhead:] {
		n += int(r.n)
	}
	return n
}

func nowMs() int64 { return time.Now().UnixMilli() }
