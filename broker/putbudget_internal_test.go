package broker

import (
	"testing"
	"time"
)

// Unit test of the budget alone: a reservation that does not fit waits,
// gets the bytes when they are released, gives up at its deadline (the
// 503 path) or when the broker shuts down; one larger than the whole budget
// is let in when nothing else is reserved.
func TestPutBudgetAcquire(t *testing.T) {
	b := newPutBudget(100)
	if err := b.acquire(60, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	// Does not fit, and nobody releases: the deadline ends the wait.
	if err := b.acquire(60, time.Now().Add(20*time.Millisecond), nil); err != errPutBudgetTimeout {
		t.Fatalf("acquire over budget: %v", err)
	}
	if used, waiting := b.snapshot(); used != 60 || waiting != 0 {
		t.Fatalf("used %d waiting %d", used, waiting)
	}
	// Released meanwhile: the waiter gets it.
	got := make(chan error, 1)
	go func() { got <- b.acquire(60, time.Time{}, nil) }()
	for {
		if _, waiting := b.snapshot(); waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Shutdown wakes a waiter.
	go func() { got <- b.acquire(60, time.Time{}, nil) }()
	for {
		if _, waiting := b.snapshot(); waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.close()
	if err := <-got; err != errPutBudgetClosed {
		t.Fatalf("acquire at shutdown: %v", err)
	}
	b.release(60)
	// Bigger than the budget, alone: admitted.
	if err := b.acquire(500, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	b.release(500)
	if used, _ := b.snapshot(); used != 0 {
		t.Fatalf("used %d", used)
	}
}
