package delay

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// TestCloseProgressCoversLevelDeliveries stops the service while a delay
// level is in the middle of delivering a large batch: the last progress
// record written by Close must account for every message the level
// appended, or a clean restart delivers them a second time.
func TestCloseProgressCoversLevelDeliveries(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "data"), SegmentSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }() // the store open at the end
	s, err := Open(Config{Store: st, Dir: filepath.Join(dir, "delay"), Levels: []time.Duration{200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	// Many records of level 1, all stored within a few milliseconds, so they
	// fall due together and the level delivers them in big batches.
	const n = 20000
	var scratch []byte
	for i := 0; i < n; i++ {
		m := store.Message{Topic: "dst", Partition: 0, Data: []byte("m" + strconv.Itoa(i))}
		sm, sc := ScheduleMessage(&m, Plan{Partition: 1}, scratch)
		scratch = sc
		if _, _, err := st.AppendAsync(&sm); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.WriteOut(); err != nil {
		t.Fatal(err)
	}
	// Stop as soon as the first delivery shows (a deadline on a hung
	// service, not a timing assertion).
	deadline := time.Now().Add(30 * time.Second)
	for st.MaxOffset("dst", 0) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing delivered")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen the store (as a clean restart does: everything appended is
	// durable and indexed) and read the newest progress record back.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(store.Config{Dir: filepath.Join(dir, "data"), SegmentSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	delivered := st.MaxOffset("dst", 0)
	p, found := (&Service{st: st, log: s.log}).loadProgress()
	if !found || len(p.levels) != 1 {
		t.Fatalf("progress after Close: %+v found=%v", p, found)
	}
	if p.levels[0] != delivered {
		t.Fatalf("the last progress record says level 1 delivered below offset %d, but %d messages were delivered: a clean restart would deliver %d twice",
			p.levels[0], delivered, delivered-p.levels[0])
	}
}
