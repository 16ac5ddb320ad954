package pop

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

func testStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "data"), SegmentSize: 1 << 20, UnflushThreshold: 1000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// testPop opens the service on st for topic "t" (one partition); maxInflight
// 0 is the default.
func testPop(t *testing.T, st *store.Store, maxInflight int) *Pop {
	t.Helper()
	return testPopConfig(t, Config{Store: st, MaxInflight: maxInflight})
}

func testPopConfig(t *testing.T, cfg Config) *Pop {
	t.Helper()
	cfg.CheckpointInterval = time.Hour
	cfg.Topics = func(topic string) (int, bool) { return 1, topic == "t" }
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// crash stops the service's goroutines without the final checkpoint (a kill -9).
func crash(s *Pop) {
	s.closing.Store(true)
	close(s.done)
	s.wg.Wait()
}

func putN(t *testing.T, st *store.Store, n int, props func(i int) string) {
	t.Helper()
	for i := 0; i < n; i++ {
		m := store.Message{Topic: "t", Data: []byte(fmt.Sprintf("m%d", i))}
		if props != nil {
			m.Properties = []byte(props(i))
		}
		if _, err := st.Append(&m); err != nil {
			t.Fatal(err)
		}
	}
}

func recv(t *testing.T, s *Pop, f Filter, max int, wait time.Duration) []Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ds, err := s.Receive(ctx, "g", "t", f, max, time.Hour)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	return ds
}

// recvAll receives until nothing more comes within 300 ms.
func recvAll(t *testing.T, s *Pop, f Filter) []int64 {
	t.Helper()
	var got []int64
	for {
		ds := recv(t, s, f, 100, 300*time.Millisecond)
		if len(ds) == 0 {
			return got
		}
		for _, d := range ds {
			got = append(got, d.QueueOffset)
		}
	}
}

// An ack answered before a crash is never undone (docs/push.md, "The exact
// rule after a crash"). The checkpoint holds a full window [0,10); after it
// 0..9 are acked (base moves to 10), 10..19 are delivered and 19 is acked.
// Replaying the done records must move base as it goes: the done record of
// 19 lies 19 entries past the checkpoint's base, beyond MaxInflight.
func TestRecoveryKeepsAckPastMaxInflight(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	putN(t, st, 20, nil)
	s := testPop(t, st, 10)
	first := recv(t, s, nil, 100, 5*time.Second)
	if len(first) != 10 {
		t.Fatalf("%d delivered, want the window of 10", len(first))
	}
	if err := s.checkpoint(true); err != nil {
		t.Fatal(err)
	}
	for _, d := range first {
		if err := s.Ack("g", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	second := recv(t, s, nil, 100, 5*time.Second)
	if len(second) != 10 || second[9].QueueOffset != 19 {
		t.Fatalf("second batch: %d", len(second))
	}
	if err := s.Ack("g", second[9].Handle); err != nil { // answered: must survive
		t.Fatal(err)
	}
	crash(s)
	st.Close()

	st = testStore(t, dir)
	defer st.Close()
	s = testPop(t, st, 10)
	defer s.Close()
	got := recvAll(t, s, nil)
	for _, o := range got {
		if o == 19 {
			t.Fatalf("offset 19, acknowledged before the crash, delivered again after recovery: %v", got)
		}
	}
	if len(got) != 9 {
		t.Fatalf("after recovery %v delivered, want 10..18", got)
	}
}

// A checkpoint restored with a lower popMaxInflight keeps its whole window:
// the acknowledged entries past the new cap stay done.
func TestRecoveryWithLowerMaxInflightKeepsAcks(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	putN(t, st, 10, nil)
	s := testPop(t, st, 10)
	ds := recv(t, s, nil, 100, 5*time.Second)
	if len(ds) != 10 {
		t.Fatalf("%d delivered, want 10", len(ds))
	}
	for _, d := range ds[5:] {
		if err := s.Ack("g", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // the final checkpoint holds 5..9 done
		t.Fatal(err)
	}
	st.Close()

	st = testStore(t, dir)
	defer st.Close()
	s = testPop(t, st, 3)
	defer s.Close()
	got := recvAll(t, s, nil)
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("restarted with popMaxInflight=3: %v delivered, want the 5 not acknowledged", got)
	}
}

// Messages a filter skips count as done (docs/push.md) but are in no done
// record. After a crash with no checkpoint since, the replay leaves the
// offsets between the done records (here the skipped one) unfinished; they
// are delivered through the group's filter, so a message it excludes is not
// delivered, while one that was delivered and not acknowledged still is.
func TestRecoveryKeepsFilterOfSkippedMessages(t *testing.T) {
	dir := t.TempDir()
	st := testStore(t, dir)
	tags := map[int]string{0: "tag=a", 1: "tag=b", 2: "tag=a", 3: "tag=b", 4: "tag=a", 5: "tag=a"}
	putN(t, st, 6, func(i int) string { return tags[i] })
	s := testPop(t, st, 0)
	f := protocol.ParseTagFilter("a")
	ds := recv(t, s, f, 100, 5*time.Second)
	if len(ds) != 4 {
		t.Fatalf("%d delivered, want the 4 tagged a", len(ds))
	}
	for _, d := range ds {
		if d.QueueOffset == 4 { // delivered, not acknowledged: comes back
			continue
		}
		if err := s.Ack("g", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	crash(s)
	st.Close()

	st = testStore(t, dir)
	defer st.Close()
	s = testPop(t, st, 0)
	defer s.Close()
	var got []int64
	for _, d := range recv(t, s, f, 100, 300*time.Millisecond) {
		r, _, _ := protocol.DecodeRecord(d.Record, 0)
		if tag := protocol.Property(r.Properties, "tag"); tag != "a" {
			t.Errorf("after recovery, filter \"a\" delivered offset %d tag %q (attempt %d)", d.QueueOffset, tag, d.Attempt)
		}
		got = append(got, d.QueueOffset)
	}
	if fmt.Sprint(got) != "[4]" {
		t.Fatalf("after recovery %v delivered, want [4] (the one not acknowledged)", got)
	}
	if sn := s.Snapshots(); len(sn) != 1 || sn[0].Inflight != 1 {
		t.Fatalf("state after recovery: %+v, want only offset 4 unfinished", sn)
	}
}
