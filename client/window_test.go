package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A full window wakes its waiters only once it has drained to low, and
// newcomers queue behind them.
func TestWindowHysteresis(t *testing.T) {
	w := newWindow(16) // low = 14
	for i := 0; i < 16; i++ {
		if !w.tryAcquire() {
			t.Fatalf("slot %d refused", i)
		}
	}
	if w.tryAcquire() {
		t.Fatal("a 17th slot")
	}
	got := make(chan error, 1)
	go func() { got <- w.acquire(context.Background(), nil) }()
	deadline := time.Now().Add(30 * time.Second)
	for !w.waiting.Load() { // the waiter is queued
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(time.Millisecond)
	}
	w.release(1) // 15 in flight: above low, the waiter sleeps on
	if w.tryAcquire() {
		t.Fatal("a newcomer overtook the waiter")
	}
	select {
	case err := <-got:
		t.Fatalf("woken above the low mark: %v", err)
	default:
	}
	w.release(1) // 14 = low: wake
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := w.inFlight(); n != 15 {
		t.Fatalf("%d in flight, want 15", n)
	}
	if !w.tryAcquire() || w.tryAcquire() {
		t.Fatal("after the wake: want exactly one more slot")
	}
}

// Waiters give up with their context or when the connection closes.
func TestWindowWaitEnds(t *testing.T) {
	w := newWindow(1)
	if !w.tryAcquire() {
		t.Fatal("first slot refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.acquire(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	closing := make(chan struct{})
	close(closing)
	if err := w.acquire(context.Background(), closing); err != errWindowClosing {
		t.Fatalf("closing wait: %v", err)
	}
	w.release(1)
	if err := w.acquire(context.Background(), nil); err != nil {
		t.Fatalf("free slot: %v", err)
	}
}

// Many senders on a small window all get through, and the window is never
// exceeded.
func TestWindowManySenders(t *testing.T) {
	const size, senders, each = 8, 16, 2000
	w := newWindow(size)
	var mu sync.Mutex
	held, most := 0, 0
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				if err := w.acquire(context.Background(), nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				held++
				most = max(most, held)
				mu.Unlock()
				go func() { // completed by "the reader"
					mu.Lock()
					held--
					mu.Unlock()
					w.release(1)
				}()
			}
		})
	}
	wg.Wait()
	if most > size {
		t.Fatalf("%d slots held at once, window %d", most, size)
	}
}
