package pop_test

import (
	"sort"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
)

// Millions in flight: older time slices of a window go to the side file
// (here: a 1 MiB memory budget and a 100 ms age), and everything keeps
// working through it — acks, expiries and redeliveries of messages whose
// entries are on disk, a checkpoint and a restart from %POP% records, and
// the slots are given back once the window moves past them.
func TestSpillToSideFile(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	o := brokertest.Options{Dir: t.TempDir(), Topics: map[string]int{"test": 1}, ExtraINI: "popMemoryMb=1\npopSpillAfterMs=100\n", SegSize: 64 << 20}
	b := brokertest.RunBroker(t, o)
	const n = 3*65536 + 1000
	for i := 0; i < n; i++ {
		m := store.Message{Topic: "test", Partition: 0, Data: []byte("x")}
		if _, _, err := b.Store.AppendAsync(&m); err != nil {
			t.Fatal(err)
		}
	}
	svc := b.PopService()
	var hs []pop.Handle
	var held []int64 // every 977th offset is not acknowledged
	got := 0
	for got < n {
		for _, d := range receive(t, svc, "g", "test", 1024, time.Hour) {
			got++
			if d.QueueOffset%977 == 0 {
				held = append(held, d.QueueOffset)
				continue
			}
			h, err := pop.ParseHandle([]byte(d.Handle))
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
	}
	waitFor(t, "slices in the side file", func() bool { sl, _ := svc.SpillStats(); return sl >= 2 })
	finishAll(t, svc, hs, pop.OpAck, 0)
	snap := func() pop.Snapshot {
		for _, s := range svc.Snapshots() {
			if s.Group == "g" {
				return s
			}
		}
		return pop.Snapshot{}
	}
	if s := snap(); s.Inflight != len(held) {
		t.Fatalf("in flight %d, want %d held", s.Inflight, len(held))
	}
	// the held ones end their locks (entries in spilled slices) and come back
	var ext []pop.Handle
	for _, off := range held {
		ext = append(ext, pop.Handle{Topic: []byte("test"), Offset: off, Attempt: 1})
	}
	finishAll(t, svc, ext, pop.OpExtend, 100*time.Millisecond)
	again := receiveOffsets(t, svc, len(held), 2)
	if !equalOffsets(again, held) {
		t.Fatalf("redelivered %d offsets, want the %d held", len(again), len(held))
	}
	// a restart rebuilds the state from %POP% (the side file is discarded)
	b.Stop()
	b = brokertest.RunBroker(t, o)
	svc = b.PopService()
	again = receiveOffsets(t, svc, len(held), 3)
	if !equalOffsets(again, held) {
		t.Fatalf("after restart: %d offsets, want the %d held", len(again), len(held))
	}
	ack := make([]pop.Handle, 0, len(held))
	for _, off := range held {
		ack = append(ack, pop.Handle{Topic: []byte("test"), Offset: off, Attempt: 3})
	}
	finishAll(t, svc, ack, pop.OpAck, 0)
	if s := snap(); s.Inflight != 0 || s.Window != 0 {
		t.Fatalf("after the last acks: %+v", s)
	}
	if sl, _ := svc.SpillStats(); sl != 0 {
		t.Fatalf("%d slices still in the side file", sl)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func finishAll(t *testing.T, svc *pop.Pop, hs []pop.Handle, op pop.Op, arg time.Duration) {
	t.Helper()
	var scratch []byte
	for len(hs) > 0 {
		k := min(len(hs), 4096)
		applied, stale, _, sc, err := svc.Finish([]byte("g"), hs[:k], op, arg, scratch)
		scratch = sc
		if err != nil || stale != 0 || applied != k {
			t.Fatalf("finish: applied %d stale %d of %d: %v", applied, stale, k, err)
		}
		hs = hs[k:]
	}
}

func receiveOffsets(t *testing.T, svc *pop.Pop, want, attempt int) []int64 {
	t.Helper()
	var out []int64
	for len(out) < want {
		for _, d := range receive(t, svc, "g", "test", 1024, time.Hour) {
			if d.Attempt != attempt {
				t.Fatalf("offset %d: attempt %d, want %d", d.QueueOffset, d.Attempt, attempt)
			}
			out = append(out, d.QueueOffset)
		}
	}
	return out
}

func equalOffsets(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	a = append([]int64(nil), a...)
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
