// Package poswait wakes goroutines waiting for a position to pass a point:
// the store's visible and written limits and its dispatcher's progress, a
// master's high watermark. A waiter gets the current round's channel; Wake
// closes it and starts the next round. Wake costs one atomic load while nobody waits, so it can sit
// on a path that runs for every append.
package poswait

import (
	"sync"
	"sync/atomic"
)

// Closed is an already-closed channel: the answer when the wait is over.
var Closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Waiters is one position's waiters; the zero value is ready. mu is a leaf
// lock, held only to arm or close the round's channel.
type Waiters struct {
	mu    sync.Mutex
	ch    chan struct{}
	armed atomic.Bool
}

// Wait returns a channel closed once at() passes pos: Closed when it has,
// else the current round's channel, armed before at() is read again so that
// a Wake between the two reads is not missed.
func (w *Waiters) Wait(pos int64, at func() int64) <-chan struct{} {
	if at() > pos {
		return Closed
	}
	w.mu.Lock()
	if w.ch == nil {
		w.ch = make(chan struct{})
		w.armed.Store(true)
	}
	ch := w.ch
	w.mu.Unlock()
	if at() > pos {
		return Closed
	}
	return ch
}

// Wake closes the current round's channel, if anyone waits on it, and
// reports whether it did (someone may have been woken). Call it after the
// position moved (after the store that Wait's at reads).
func (w *Waiters) Wake() bool {
	if !w.armed.Load() {
		return false
	}
	w.mu.Lock()
	woke := w.ch != nil
	if woke {
		close(w.ch)
		w.ch = nil
		w.armed.Store(false)
	}
	w.mu.Unlock()
	return woke
}
