package store

import (
	"runtime"
	"testing"
	"time"
)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestWait(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	goroutines := runtime.NumGoroutine()
	// Many waiters on a never-written partition share one channel; no goroutines.
	chs := make([]<-chan struct{}, 100)
	for i := range chs {
		chs[i] = s.Wait("w", 3, 0)
	}
	if chs[0] != chs[99] || isClosed(chs[0]) {
		t.Fatal("waiters should share one open channel")
	}
	if runtime.NumGoroutine() > goroutines {
		t.Fatal("Wait started goroutines")
	}
	other := s.Wait("w", 4, 0)
	mustAppend(t, s, &Message{Topic: "w", Partition: 3, Data: []byte("x")})
	select {
	case <-chs[0]:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken")
	}
	if isClosed(other) {
		t.Fatal("another partition's waiter woke")
	}
	// Already readable: closed at once.
	if !isClosed(s.Wait("w", 3, 0)) {
		t.Fatal("Wait on a readable offset should be closed")
	}
	// Waiting for the next offset.
	next := s.Wait("w", 3, 1)
	if isClosed(next) {
		t.Fatal("offset 1 is not readable yet")
	}
	mustAppend(t, s, &Message{Topic: "w", Partition: 3, Data: []byte("y")})
	<-next
	r, _ := s.Read("w", 3, 1, 100, nil)
	if r.Status != ReadFound {
		t.Fatalf("after wake: %v", r.Status)
	}
	r.Release()
	// Close wakes everyone.
	mustClose(t, s)
	<-other
	if !isClosed(s.Wait("w", 9, 0)) {
		t.Fatal("Wait on a closed store should be closed")
	}
	if _, err := s.Read("w", 3, 0, 100, nil); err != ErrClosed {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := s.Append(&Message{Topic: "w"}); err != ErrClosed {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := s.Close(); err != ErrClosed {
		t.Fatalf("second Close: %v", err)
	}
}

// While a long poll waits and the dispatcher sleeps, the WriteOut that makes
// a put visible indexes it itself and wakes the waiter before it returns: no
// hand-off to the dispatcher goroutine (dispatch.go, "Inline dispatch").
func TestWriteOutWakesWaiterInline(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	inline := 0
	for i := int64(0); i < 20 && inline < 3; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for !s.dispSleep.Load() { // the dispatcher goes back to sleep
			if time.Now().After(deadline) {
				t.Fatal("the dispatcher never slept")
			}
			time.Sleep(time.Millisecond)
		}
		ch := s.Wait("inline", 0, i)
		before := s.counters.inlineDispatches.Load()
		if _, _, err := s.AppendAsync(&Message{Topic: "inline", Data: []byte("m")}); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteOut(); err != nil {
			t.Fatal(err)
		}
		if s.counters.inlineDispatches.Load() > before {
			select {
			case <-ch:
				inline++
			default:
				t.Fatal("WriteOut dispatched inline but the waiter is not woken")
			}
		}
		select { // either way the waiter is woken
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter was never woken")
		}
	}
	if inline == 0 {
		t.Fatal("no WriteOut dispatched inline")
	}
	if s.waitParts.Load() != 0 {
		t.Fatalf("waitParts = %d after every waiter was woken", s.waitParts.Load())
	}
}

// WaitFunc calls its waiter once a record at or past its offset is
// readable, not before; CancelWait disarms; Close calls every armed waiter.
func TestWaitFunc(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	fired := make(chan int, 10)
	w0 := &Waiter{Fn: func() { fired <- 0 }}
	w1 := &Waiter{Fn: func() { fired <- 1 }}
	w2 := &Waiter{Fn: func() { fired <- 2 }}
	if !s.WaitFunc("wf", 0, 0, w0) || !s.WaitFunc("wf", 0, 1, w1) || !s.WaitFunc("wf", 0, 1, w2) {
		t.Fatal("not armed on an empty partition")
	}
	if !s.CancelWait(w2) || s.CancelWait(w2) {
		t.Fatal("CancelWait: want true once, then false")
	}
	mustAppend(t, s, &Message{Topic: "wf", Data: []byte("m0")})
	select {
	case i := <-fired:
		if i != 0 {
			t.Fatalf("waiter %d called for offset 0", i)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter for offset 0 was never called")
	}
	if s.CancelWait(w0) {
		t.Fatal("a called waiter is still armed")
	}
	if s.WaitFunc("wf", 0, 0, w0) {
		t.Fatal("armed for a readable offset")
	}
	mustClose(t, s)
	select {
	case i := <-fired:
		if i != 1 {
			t.Fatalf("Close called waiter %d", i)
		}
	default:
		t.Fatal("Close did not call the armed waiter")
	}
	select {
	case i := <-fired:
		t.Fatalf("waiter %d called again", i)
	default:
	}
}

// A waiter of a partition that does not exist creates none (wait.go,
// "Waiters of partitions that do not exist yet"): it waits in s.pending,
// dropped with its last waiter, and Close calls it.
func TestWaitFuncOnMissingPartitionCreatesNone(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	fired := make(chan int, 4)
	w0 := &Waiter{Fn: func() { fired <- 0 }}
	w1 := &Waiter{Fn: func() { fired <- 1 }}
	w2 := &Waiter{Fn: func() { fired <- 2 }}
	if !s.WaitFunc("none", 3, 0, w0) || !s.WaitFunc("none", 3, 0, w1) || !s.WaitFunc("other", 0, 5, w2) {
		t.Fatal("not armed on missing partitions")
	}
	if n := s.PartitionCount(""); n != 0 {
		t.Fatalf("waiting created %d partitions", n)
	}
	if n := s.PendingWaits(); n != 2 {
		t.Fatalf("%d partitions waited for, want 2", n)
	}
	// Cancel the middle, then the head of a pending list.
	if !s.CancelWait(w0) || s.CancelWait(w0) || !s.CancelWait(w1) {
		t.Fatal("CancelWait of pending waiters: want true once each")
	}
	if n := s.PendingWaits(); n != 1 {
		t.Fatalf("%d partitions waited for after cancelling none/3's waiters, want 1", n)
	}
	if !s.WaitFunc("none", 3, 0, w0) { // re-armed after a cancel
		t.Fatal("not re-armed")
	}
	mustClose(t, s)
	got := map[int]bool{}
	for len(got) < 2 {
		select {
		case i := <-fired:
			got[i] = true
		default:
			t.Fatalf("Close called %v, want waiters 0 and 2", got)
		}
	}
	if got[1] || s.PendingWaits() != 0 || s.CancelWait(w0) || s.CancelWait(w2) {
		t.Fatalf("after Close: called %v, %d pending", got, s.PendingWaits())
	}
}
