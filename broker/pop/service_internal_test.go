package pop

import (
	"testing"
	"time"
)

// A receive parked on a full window (popMaxInflight) waits on the group's
// "ready" channel only (no store wait for the full partition): an ack, or a
// reject once its dead letter is written, that makes room must wake it, at
// once rather than at the end of its wait.
func TestAckOnFullWindowWakesReceive(t *testing.T) {
	for _, op := range []string{"ack", "reject"} {
		t.Run(op, func(t *testing.T) { testFinishOnFullWindowWakesReceive(t, op) })
	}
}

func testFinishOnFullWindowWakesReceive(t *testing.T, op string) {
	dir := t.TempDir()
	st := testStore(t, dir)
	defer st.Close()
	putN(t, st, 3, nil)
	s := testPop(t, st, 2)
	defer s.Close()
	ds := recv(t, s, nil, 100, 5*time.Second)
	if len(ds) != 2 {
		t.Fatalf("%d delivered, want 2 (window full)", len(ds))
	}
	got := make(chan []Delivery, 1)
	go func() { got <- recv(t, s, nil, 100, 3*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	finish := s.Ack
	if op == "reject" {
		finish = s.Reject
	}
	if err := finish("g", ds[0].Handle); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r := <-got
	if len(r) != 1 || r[0].QueueOffset != 2 || time.Since(t0) > time.Second {
		t.Fatalf("receive parked on a full window returned %d deliveries after %v, want offset 2 at once after the %s", len(r), time.Since(t0).Round(time.Millisecond), op)
	}
}
