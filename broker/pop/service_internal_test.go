package pop

import (
	"context"
	"errors"
	"fmt"
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

// Extending the same delivery again and again, or one command carrying its
// handle many times, must not add a timer entry each time (entries are held
// until their deadline, up to 12 h): the heap would grow with what a client
// sends.
func TestRepeatedExtendKeepsOneTimerEntry(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	defer st.Close()
	putN(t, st, 1, nil)
	s := testPop(t, st, 0)
	defer s.Close()
	ds := recv(t, s, nil, 1, 5*time.Second)
	h, _ := ParseHandle([]byte(ds[0].Handle))
	hs := make([]Handle, 65536) // one `extend g 43200000 <len>` command's worth (maxHandles)
	for i := range hs {
		hs[i] = h
	}
	before := s.TimerLen()
	for round := 0; round < 4; round++ {
		if _, _, _, _, err := s.Finish([]byte("g"), hs, OpExtend, MaxInvisible, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.TimerLen() - before; n > 16 {
		t.Fatalf("one in-flight message, 4 extend commands: %d timer entries added (each held until its deadline)", n)
	}
}

// An extended lock ends at its new deadline: the timer entry of the old one
// fires, finds the deadline moved later and schedules it; a lock shortened
// by an extend ends at the shorter deadline.
func TestExtendMovesLockEnd(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	defer st.Close()
	putN(t, st, 2, nil)
	s := testPop(t, st, 0)
	defer s.Close()
	ctx := context.Background()
	ds, err := s.Receive(ctx, "g", "t", nil, 1, 300*time.Millisecond)
	if err != nil || len(ds) != 1 {
		t.Fatal(ds, err)
	}
	long, err := s.Receive(ctx, "g", "t", nil, 1, time.Hour)
	if err != nil || len(long) != 1 {
		t.Fatal(long, err)
	}
	t0 := time.Now()
	if err := s.Extend("g", ds[0].Handle, 900*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend("g", long[0].Handle, 400*time.Millisecond); err != nil { // shorter
		t.Fatal(err)
	}
	var got []int64
	var at []time.Duration
	for len(got) < 2 {
		r := recv(t, s, nil, 10, 5*time.Second)
		if len(r) == 0 {
			t.Fatalf("redelivered %v, want both", got)
		}
		for _, d := range r {
			got = append(got, d.QueueOffset)
			at = append(at, time.Since(t0))
		}
	}
	if got[0] != 1 || got[1] != 0 || at[0] < 350*time.Millisecond || at[1] < 850*time.Millisecond || at[1] > 3*time.Second {
		t.Fatalf("redelivered %v after %v, want 1 after 400 ms (shortened) and 0 after 900 ms (extended)", got, at)
	}
	// the 2 redeliveries' and the shortened lock's first (stale until it fires)
	if n := s.TimerLen(); n != 3 {
		t.Fatalf("%d timer entries, want 3", n)
	}
}

// popMaxInflight bounds a window (the bound on the side file and memory),
// done entries included: offsets retention removed below a lagging cursor,
// while an older message is still in flight, are skipped only as far as the
// window's cap, and the rest once the window moved.
func TestRetentionGapKeepsMaxInflight(t *testing.T) {
	s := &Pop{cfg: Config{MaxInflight: 1000}}
	p := &part{inited: true}
	p.push(entry{state: stInflight, attempt: 1, deadline: 1 << 62}, 1) // offset 0 held
	// the store's min offset moved to 5,000,000 (ReadOffsetTooSmall in freshLocked)
	s.skipLocked(p, 5_000_000, 1)
	if p.inflight() > s.cfg.MaxInflight {
		t.Fatalf("window of %d entries (%d MiB) with popMaxInflight=%d", p.inflight(), p.inflight()*entrySize>>20, s.cfg.MaxInflight)
	}
	p.at(0).state = stDone // acknowledged: the window empties
	p.advance()
	s.skipLocked(p, 5_000_000, 1)
	if p.base != 5_000_000 || p.inflight() != 0 {
		t.Fatalf("after the ack: base %d cursor %d, want the gap skipped", p.base, p.cursor)
	}
}

// Every distinct group name a client sends in a pop creates delivery state
// that is kept for good and written into every checkpoint: popMaxGroups
// bounds it. A new group beyond it is refused; existing groups go on, and
// groups recovered at start are kept whatever the cap.
func TestGroupsCapped(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	defer st.Close()
	s := testPopConfig(t, Config{Store: st, MaxGroups: 1000})
	var b Batch
	refused := 0
	for i := 0; i < 20000; i++ {
		err := s.Poll(fmt.Sprintf("g%d", i), "t", nil, 1, time.Second, &b)
		b.Release()
		switch {
		case errors.Is(err, ErrTooManyGroups):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	if n := len(s.Snapshots()); n > 1000 || refused != 19000 {
		t.Fatalf("%d queues kept for %d one-off group names, %d refused", n, 20000, refused)
	}
	if err := s.Poll("g7", "t", nil, 1, time.Second, &b); err != nil {
		t.Fatalf("an existing group refused: %v", err)
	}
	b.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = testPopConfig(t, Config{Store: st, MaxGroups: 10})
	defer s.Close()
	if n := len(s.Snapshots()); n != 1000 {
		t.Fatalf("%d groups recovered with popMaxGroups=10, want the 1000 checkpointed", n)
	}
}
