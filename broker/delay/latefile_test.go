package delay

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// TestCleanStopAfterLateEntry drives the timer by hand into the window a
// clean stop used to leave: record A (due at its store time) is filed only
// after record B, due later, was delivered. At stop the watermark would be
// A's due time, below B's, and a restart would deliver B again from its
// second bucket. finish delivers A first; after the restart nothing is
// delivered twice.
func TestCleanStopAfterLateEntry(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "data"), SegmentSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := handService(st)
	tdir := filepath.Join(dir, "timer")
	tm, err := newTimer(s, tdir, progress{})
	if err != nil {
		t.Fatal(err)
	}
	a := appendTimerRecord(t, st, "A", 0) // due at its store time
	b := appendTimerRecord(t, st, "B", a.StoreTime+150)
	// B is indexed and delivered; A's record is not read yet.
	tm.add(tm.entryFor(&b))
	if err := tm.flushWrites(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); st.MaxOffset("dst", 0) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("B never delivered")
		}
		now := time.Now().UnixMilli()
		if err := tm.load(now); err != nil {
			t.Fatal(err)
		}
		if _, err := tm.deliverDue(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Now A is filed (late: its due time is below B's), and the indexer's
	// position covers both records.
	tm.add(tm.entryFor(&a))
	tm.pos, tm.posID = 2, b.MsgID+1
	if err := tm.finish(); err != nil {
		t.Fatal(err)
	}
	// The progress record is readable once the store has indexed it.
	pr, found := s.loadProgress()
	for deadline := time.Now().Add(30 * time.Second); !found; pr, found = s.loadProgress() {
		if time.Now().After(deadline) {
			t.Fatal("no progress record")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tm2, err := newTimer(s, tdir, pr)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := tm2.step(); err != nil {
			t.Fatal(err)
		}
	}
	// A sentinel appended after the deliveries: once it is readable, so is
	// everything the timer appended before it.
	sentinel := store.Message{Topic: "dst", Partition: 0, Data: []byte("end")}
	sr, err := st.Append(&sentinel)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Wait("dst", 0, sr.QueueOffset):
	case <-time.After(30 * time.Second):
		t.Fatal("sentinel never readable")
	}
	seen := map[string]int{}
	res, err := st.Read("dst", 0, 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	for _, buf := range res.Bufs {
		for len(buf) > 0 {
			r, n, err := protocol.DecodeRecord(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			seen[string(r.Data)]++
			buf = buf[n:]
		}
	}
	if seen["A"] != 1 || seen["B"] != 1 {
		t.Fatalf("deliveries %v, want A and B once each", seen)
	}
}
