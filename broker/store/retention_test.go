package store

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) set(t time.Time)     { c.ms.Store(t.UnixMilli()) }
func (c *fakeClock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(ents)
}

// waitAllDispatched waits until both s.dispatched and the flushed position
// cover everything visible: retention only deletes segments below the lower
// of the two. The dispatcher publishes its position after the batch's
// partitions (and the key index), and in async mode the flusher runs on its
// own, so a partition being readable (waitReadable) implies neither on a
// loaded machine.
func waitAllDispatched(t *testing.T, s *Store) {
	t.Helper()
	waitFor(t, "everything visible flushed and dispatched", func() bool {
		v := s.clog.visibleLimit()
		return s.dispatched.Load() >= v && s.clog.flushedPos() >= v
	})
}

func TestRetentionDeletesOldSegments(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.IndexFileSize = 160 // 10 units per file
	cfg.Retention = time.Hour
	clock := &fakeClock{}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.set(t0)
	cfg.Now = clock.now
	cfg.KeyIndexEntries = 16
	s := mustOpen(t, cfg)
	old := fill(t, s, "t", 2, 100, 100) // ~ 5 segments at t0
	clock.add(2 * time.Hour)
	fresh := fill(t, s, "t", 2, 20, 100)
	waitReadable(t, s, "t", 1, 60)
	waitAllDispatched(t, s)
	segsBefore := len(s.clog.segs.Load().segs)
	keyFilesBefore := countFiles(t, filepath.Join(cfg.Dir, "keyindex"))

	// Nothing expired yet an hour after the old batch... (fresh batch is at t0+2h).
	if n, err := s.DeleteExpired(t0.Add(59 * time.Minute)); err != nil || n != 0 {
		t.Fatalf("premature deletion: %d %v", n, err)
	}
	// A reader holding a record of the oldest segment keeps it mapped.
	held, err := s.Read("t", 0, 0, 1, nil)
	if err != nil || held.Status != ReadFound {
		t.Fatal(err)
	}
	n, err := s.DeleteExpired(clock.now())
	if err != nil || n == 0 {
		t.Fatalf("DeleteExpired: %d %v", n, err)
	}
	segs := s.clog.segs.Load().segs
	if len(segs) != segsBefore-n || len(segs) < 1 {
		t.Fatalf("segments %d -> %d, deleted %d", segsBefore, len(segs), n)
	}
	// Every deleted segment only held old records; the one holding the first
	// fresh record is kept.
	if s.clog.logMin.Load() > fresh[0].PhysicalOffset {
		t.Fatal("deleted a segment holding a fresh record")
	}
	if _, err := os.Stat(segPath(cfg.Dir, 0, cfg.SegmentSize)); !os.IsNotExist(err) {
		t.Fatal("oldest segment file still exists")
	}
	// The held record is still readable and intact (unlinked, still mapped).
	if _, _, err := protocol.DecodeRecord(held.Bufs[0], 0); err != nil {
		t.Fatalf("held record after deletion: %v", err)
	}
	held.Release()

	// Min offsets moved to the first record in the oldest kept segment.
	for p := int32(0); p < 2; p++ {
		min := s.MinOffset("t", p)
		if min == 0 {
			t.Fatalf("partition %d: min did not move", p)
		}
		r, _ := s.Read("t", p, 0, 100, nil)
		if r.Status != ReadOffsetTooSmall || r.MinOffset != min || r.NextOffset != min {
			t.Fatalf("partition %d: read below min: %v %d", p, r.Status, r.MinOffset)
		}
		r.Release()
		r, _ = s.Read("t", p, min, 100, nil)
		if r.Status != ReadFound {
			t.Fatalf("partition %d: read at min: %v", p, r.Status)
		}
		rec, _, _ := protocol.DecodeRecord(r.Bufs[0], 0)
		if rec.PhysicalOffset < s.clog.logMin.Load() || rec.QueueOffset != min {
			t.Fatalf("record at min %d: %+v", min, rec)
		}
		r.Release()
		if got := s.OffsetForTime("t", p, 0); got != min {
			t.Fatalf("OffsetForTime(0) = %d, min %d", got, min)
		}
	}
	// Index files wholly below min are gone (10 units per file).
	if got := countFiles(t, filepath.Join(cfg.Dir, "index", "t", "0")); got >= 6 {
		t.Fatalf("index files not deleted: %d", got)
	}
	if got := countFiles(t, filepath.Join(cfg.Dir, "keyindex")); got >= keyFilesBefore {
		t.Fatalf("key index files not deleted: %d -> %d", keyFilesBefore, got)
	}
	verifyAll(t, s, "t", 2, fresh, 100)
	_ = old
	// Reopen: mins are recomputed from the oldest segment.
	mins := []int64{s.MinOffset("t", 0), s.MinOffset("t", 1)}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	for p := int32(0); p < 2; p++ {
		if s.MinOffset("t", p) != mins[p] || s.MaxOffset("t", p) != 60 {
			t.Fatalf("after reopen partition %d: min %d (want %d) max %d", p, s.MinOffset("t", p), mins[p], s.MaxOffset("t", p))
		}
	}
	mustClose(t, s)
}

func TestRetentionNeverDeletesActiveSegment(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Retention = time.Minute
	clock := &fakeClock{}
	clock.set(time.Unix(1000, 0))
	cfg.Now = clock.now
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	fill(t, s, "t", 1, 10, 10)
	if n, err := s.DeleteExpired(clock.now().Add(24 * time.Hour)); n != 0 || err != nil {
		t.Fatalf("deleted %d: %v", n, err)
	}
	if s.MinOffset("t", 0) != 0 {
		t.Fatal("min moved")
	}
}

func TestRetentionPerTopic(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.Retention = 0 // forever by default
	cfg.TopicRetention = func(topic string) time.Duration {
		if topic == "short" {
			return time.Hour
		}
		return 0
	}
	clock := &fakeClock{}
	t0 := time.Unix(1_000_000, 0)
	clock.set(t0)
	cfg.Now = clock.now
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	fill(t, s, "short", 1, 40, 100)
	fill(t, s, "long", 1, 40, 100)
	clock.add(2 * time.Hour)
	fill(t, s, "short", 1, 5, 100)
	fill(t, s, "long", 1, 5, 100)
	waitReadable(t, s, "long", 0, 45)
	waitAllDispatched(t, s)
	n, err := s.DeleteExpired(clock.now())
	if err != nil || n != 0 {
		t.Fatalf("a topic kept forever must keep every segment: deleted %d %v", n, err)
	}
	// "short" expires logically: its min moves to the first fresh message.
	if got := s.MinOffset("short", 0); got != 40 {
		t.Fatalf("short min %d", got)
	}
	if got := s.MinOffset("long", 0); got != 0 {
		t.Fatalf("long min %d", got)
	}
	r, _ := s.Read("short", 0, 3, 100, nil)
	if r.Status != ReadOffsetTooSmall || r.MinOffset != 40 {
		t.Fatalf("read expired: %v", r.Status)
	}
	r.Release()
}

func TestRetentionSchedule(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.Retention = time.Millisecond
	cfg.DeleteWhen = Every(5 * time.Millisecond)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	fill(t, s, "t", 1, 100, 100)
	time.Sleep(2 * time.Millisecond) // let the records age past 1 ms
	mustAppend(t, s, &Message{Topic: "t", Data: []byte("roll me")})
	waitFor(t, "scheduled retention", func() bool { return s.Stats().SegmentsDeleted > 0 })
	if next := Every(time.Minute).Next(time.Unix(0, 0)); !next.Equal(time.Unix(60, 0)) {
		t.Fatal("Every")
	}
	if next := (hourly{}).Next(time.Date(2024, 1, 1, 5, 30, 0, 0, time.UTC)); !next.Equal(time.Date(2024, 1, 1, 6, 0, 0, 0, time.UTC)) {
		t.Fatal("hourly")
	}
}
