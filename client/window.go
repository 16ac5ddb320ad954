package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errWindowClosing: the connection closed while a sender waited for a slot.
var errWindowClosing = errors.New("metaq client: connection closing")

// window bounds the calls in flight on one connection (Config.MaxInFlight).
//
// It used to be a buffered channel used as a semaphore: every send took a
// slot with a channel send and every reply gave one back with a receive. A
// pipelined producer keeps the window full, so each reply woke the parked
// sender for exactly one more message: one goroutine wake-up (and often a
// futex wake of another OS thread) per message on both sides, about 12% of
// the client's CPU in async publish (bench/README.md, "Where the
// microseconds go").
//
// Now the slots are an atomic counter, and a full window has hysteresis:
// senders that find it full wait until it has drained to low (an eighth of
// the window free), and are then woken together, so a pipelined sender
// runs a burst of window/8 sends per wake-up instead of one. While anyone
// waits, newcomers wait too (they would otherwise take each slot as it
// frees and keep the waiters from ever seeing the window drain). Calls in
// flight never exceed max, and every slot is given back when its call
// completes, fails or times out, so the window always drains.
//
// Lock rules: mu guards free; n and waiting are atomics read without it.
// A waiter sets waiting and re-reads n under mu before it sleeps; release
// changes n before it reads waiting, so a waiter either sees the freed
// slots or is woken.
type window struct {
	n       atomic.Int64 // slots taken
	waiting atomic.Bool  // someone waits for the window to drain to low
	max     int64
	low     int64

	mu   sync.Mutex
	free chan struct{} // closed to wake the waiters; nil while nobody waits
}

func newWindow(size int) *window {
	w := &window{max: int64(max(size, 1))}
	w.low = w.max - max(w.max/8, 1)
	return w
}

// tryAcquire takes a slot when one is free and nobody waits.
func (w *window) tryAcquire() bool {
	for !w.waiting.Load() {
		n := w.n.Load()
		if n >= w.max {
			return false
		}
		if w.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
	return false
}

// acquire takes a slot, waiting while the window is full (or others wait),
// until ctx ends or closing is closed (it then returns errWindowClosing).
func (w *window) acquire(ctx context.Context, closing <-chan struct{}) error {
	for {
		if w.tryAcquire() {
			return nil
		}
		w.mu.Lock()
		if w.free == nil {
			w.free = make(chan struct{})
		}
		ch := w.free
		w.waiting.Store(true)
		n := w.n.Load()
		if n <= w.low {
			// Drained already (the release that got it there ran before
			// waiting was set): wake everyone, this caller included.
			w.wakeLocked()
			w.mu.Unlock()
			if w.takeWaited() {
				return nil
			}
			continue
		}
		w.mu.Unlock()
		select {
		case <-ch:
			if w.takeWaited() {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return errWindowClosing
		}
	}
}

// takeWaited takes a slot after a wake-up: waiting was cleared by the wake,
// but a woken waiter must not lose its place to the flag set again by a
// waiter that lost the race, so it ignores the flag.
func (w *window) takeWaited() bool {
	for {
		n := w.n.Load()
		if n >= w.max {
			return false
		}
		if w.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives k slots back and wakes the waiters once the window has
// drained to low.
func (w *window) release(k int) {
	if n := w.n.Add(-int64(k)); n <= w.low && w.waiting.Load() {
		w.mu.Lock()
		w.wakeLocked()
		w.mu.Unlock()
	}
}

func (w *window) wakeLocked() {
	w.waiting.Store(false)
	if w.free != nil {
		close(w.free)
		w.free = nil
	}
}

// inFlight is the number of slots taken.
func (w *window) inFlight() int { return int(w.n.Load()) }
