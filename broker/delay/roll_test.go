package delay

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// The far-future path, driven by hand (no goroutines, a chosen "now"): a
// deliverAt beyond the roll boundary is filed into an hour bucket; ten
// minutes before its hour the bucket is streamed into second buckets,
// checkpointed and removed; a restart finds the second bucket; loading it
// puts the entry in the window.
func TestHourBucketRoll(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "data"), BrokerID: 3, SegmentSize: 1 << 20, IndexFileSize: 1 << 16,
		UnflushThreshold: 1000, UnflushInterval: time.Second, Logger: slog.New(slog.DiscardHandler)})
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
	due := tm.rolledTo + 30*time.Minute.Milliseconds() + 1234 // inside the hour after the boundary
	m := store.Message{Topic: scheduleTopic, Partition: TimerPartition, Data: []byte("far"),
		Properties: ScheduleProps(nil, []byte("deliverAt="+strconv.FormatInt(due, 10)), "t", 0)}
	res, err := st.Append(&m)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteOut(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); tm.pos == 0; {
		if _, err := tm.index(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("record never indexed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	hour := due - due%hourMs
	if !tm.coarse.has(hour) || tm.fine.total != 0 {
		t.Fatalf("not in an hour bucket: coarse %v fine %v", tm.coarse.keys, tm.fine.keys)
	}
	// Ten minutes before the hour: rolled into second buckets, the hour file gone.
	if err := tm.roll(hour - 10*time.Minute.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if tm.coarse.has(hour) || !tm.fine.has(due/1000) {
		t.Fatalf("not rolled: coarse %v fine %v", tm.coarse.keys, tm.fine.keys)
	}
	if _, err := os.Stat(filepath.Join(tdir, coarseName(hour))); !os.IsNotExist(err) {
		t.Fatalf("hour bucket still there: %v", err)
	}
	// A restart (same checkpoint) finds the second bucket, not the hour.
	tm2, err := newTimer(s, tdir, progress{})
	if err != nil {
		t.Fatal(err)
	}
	if !tm2.fine.has(due/1000) || tm2.coarse.total != 0 || tm2.rolledTo <= hour {
		t.Fatalf("after restart: fine %v coarse %v rolledTo %d", tm2.fine.keys, tm2.coarse.keys, tm2.rolledTo)
	}
	// Loading that second puts exactly one entry for the record in the window.
	tm2.loadedTo = due/1000 - 1
	if err := tm2.load(due); err != nil {
		t.Fatal(err)
	}
	if len(tm2.heap) != 1 || tm2.heap[0].id != res.MsgID || tm2.heap[0].due != due {
		t.Fatalf("window %+v, want one entry for %d due %d", tm2.heap, res.MsgID, due)
	}
}
