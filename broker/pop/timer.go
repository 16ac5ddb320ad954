package pop

import (
	"container/heap"
	"sync"
	"time"
)

// The timer ends invisibility times: one min-heap of deadlines for the
// whole service and one goroutine sleeping until the earliest. A heap
// entry covers a run of consecutive offsets locked by the same Receive (a
// fresh batch is one entry, however many messages it holds). Entries are
// never removed early: when one fires, each offset it covers is expired
// only if its entry still has that deadline and is still locked or
// waiting (an ack, release or extension since then makes it stale).
//
// A deadline moved later (extend, a release with a delay) adds no entry:
// the one at the earlier deadline is still there, and the message's entry
// is marked late; when that timer entry fires it schedules one entry at
// the new deadline (one per run of consecutive offsets with the same
// deadline). Only a deadline moved earlier adds an entry. So extending a
// delivery again and again, or one command carrying the same handle many
// times, keeps one entry for it.
//
// Lock rules: timer.mu guards the heap only; it is taken inside queue.mu
// (schedule) but never held while taking queue.mu (the loop pops due
// entries, unlocks, then expires them).

type tentry struct {
	at  int64 // unix ms
	q   *queue
	p   *part
	off int64
	n   int32
}

type theap []tentry

func (h theap) Len() int           { return len(h) }
func (h theap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h theap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *theap) Push(x any)        { *h = append(*h, x.(tentry)) }
func (h *theap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = tentry{}
	*h = old[:n-1]
	return x
}

type timer struct {
	mu   sync.Mutex
	h    theap
	wake chan struct{} // cap 1: the earliest deadline changed
	due  []tentry      // loop only
}

func newTimer() *timer { return &timer{wake: make(chan struct{}, 1)} }

// schedule adds a deadline (called with q.mu held).
func (t *timer) schedule(e tentry) {
	t.mu.Lock()
	heap.Push(&t.h, e)
	first := t.h[0].at == e.at && t.h[0].off == e.off && t.h[0].p == e.p
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *timer) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.h)
}

// loop fires due entries through expire until done is closed.
func (t *timer) loop(done <-chan struct{}, expire func([]tentry, int64)) {
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		now := nowMs()
		t.mu.Lock()
		t.due = t.due[:0]
		for len(t.h) > 0 && t.h[0].at <= now && len(t.due) < 4096 {
			t.due = append(t.due, heap.Pop(&t.h).(tentry))
		}
		next := time.Hour
		if len(t.due) == 4096 {
			next = 0
		} else if len(t.h) > 0 {
			next = time.Duration(t.h[0].at-now) * time.Millisecond
		}
		t.mu.Unlock()
		if len(t.due) > 0 {
			expire(t.due, now)
			clear(t.due)
			if next == 0 {
				continue
			}
		}
		tm.Reset(next)
		select {
		case <-tm.C:
		case <-t.wake:
			if !tm.Stop() {
				select {
				case <-tm.C:
				default:
				}
			}
		case <-done:
			return
		}
	}
}
