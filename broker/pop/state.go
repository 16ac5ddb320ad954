package pop

import "time"

// Delivery state of one group on one partition of one topic.
//
// The window holds one entry per queue offset in [base, cursor): every
// offset below base is done (acknowledged, rejected, dead-lettered or
// skipped by the filter), cursor is the first offset never delivered. An
// entry is 16 bytes, so a million messages in flight on a partition cost
// 16 MiB, plus 24 bytes each in the timer heap while they are locked;
// the window is capped at Config.MaxInflight entries (Receive delivers no
// new message of a partition whose window is full, only redeliveries).

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
	attempt  uint16 // deliveries so far (a lower bound after a crash)
	state    uint8
}

// rrun is a run of ready offsets [off, off+n).
type rrun struct {
	off, n int64
}

type part struct {
	id     int32
	base   int64
	cursor int64
	win    []entry // win[head+i] is offset base+i
	head   int
	ready  []rrun // runs of offsets in state stReady, oldest first (from rhead)
	rhead  int
	inited bool // base/cursor set (from recovery or the partition's min offset)
}

// at returns the entry of offset o, or nil outside [base, cursor).
func (p *part) at(o int64) *entry {
	if o < p.base || o >= p.cursor {
		return nil
	}
	return &p.win[p.head+int(o-p.base)]
}

func (p *part) inflight() int { return int(p.cursor - p.base) }

// push appends the entry of offset cursor.
func (p *part) push(e entry) {
	p.win = append(p.win, e)
	p.cursor++
}

// advance moves base over the done prefix and compacts the window.
func (p *part) advance() {
	for p.head < len(p.win) && p.win[p.head].state == stDone {
		p.head++
		p.base++
	}
	if p.head == len(p.win) {
		p.win, p.head = p.win[:0], 0
		if cap(p.win) > 1<<16 {
			p.win = nil // a burst is over: give its memory back
		}
	} else if p.head > 4096 && p.head > len(p.win)/2 {
		n := copy(p.win, p.win[p.head:])
		p.win, p.head = p.win[:n], 0
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
