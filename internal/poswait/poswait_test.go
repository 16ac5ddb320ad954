package poswait

import (
	"sync/atomic"
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A wait that is over gets Closed; one that is not gets a channel that a
// Wake after the position moved closes, and the next wait a new one.
func TestWaitWake(t *testing.T) {
	var w Waiters
	var pos atomic.Int64
	at := pos.Load
	if ch := w.Wait(-1, at); !closed(ch) {
		t.Fatal("a wait for a passed position is not over")
	}
	ch := w.Wait(5, at)
	if closed(ch) {
		t.Fatal("a wait for position 5 at 0 is over")
	}
	w.Wake() // the position did not move: the waiter wakes, sees 0, and waits again
	if !closed(ch) {
		t.Fatal("Wake left the round's channel open")
	}
	ch = w.Wait(5, at)
	if closed(ch) {
		t.Fatal("a new round's channel is closed")
	}
	pos.Store(6)
	w.Wake()
	if !closed(ch) || !closed(w.Wait(5, at)) {
		t.Fatal("the wait is not over once the position passed it")
	}
	w.Wake() // nobody waits: a no-op
}

// The position moving between Wait's first read and its arming is not
// missed: Wait reads it again after arming.
func TestWaitSeesMoveWhileArming(t *testing.T) {
	var w Waiters
	n := 0
	at := func() int64 { // 0 at the first read, past the wait at the second
		n++
		if n == 1 {
			return 0
		}
		return 10
	}
	if ch := w.Wait(5, at); !closed(ch) {
		t.Fatal("a move between the two reads was missed")
	}
}

func TestManyWaiters(t *testing.T) {
	var w Waiters
	var pos atomic.Int64
	done := make(chan struct{})
	const n = 8
	for range n {
		go func() {
			for pos.Load() <= 100 {
				<-w.Wait(100, pos.Load)
			}
			done <- struct{}{}
		}()
	}
	go func() {
		for i := int64(1); i <= 101; i++ {
			pos.Store(i)
			w.Wake()
		}
	}()
	deadline := time.After(time.Minute)
	for range n {
		select {
		case <-done:
		case <-deadline:
			t.Fatal("a waiter never saw the position pass 100")
		}
	}
}
