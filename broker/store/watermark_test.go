package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replicaOf opens a replica store (Config.Replica) in dir with m's layout.
func replicaOf(t *testing.T, dir string, lb *logBuf, sync bool) (*Store, Config) {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Replica = true
	if sync {
		cfg.UnflushThreshold = 0
	}
	if lb != nil {
		cfg.Logger = newTestLogger(lb)
	}
	return mustOpen(t, cfg), cfg
}

// wmFixture: a master's log of 20 records of "t" (partitions 0 and 1 in
// turn) and 2 of "u" copied to a replica whose read limit stops after the
// 10th record of "t" and is saved.
func wmFixture(t *testing.T, dir string, lb *logBuf, sync bool) (r *Store, cfg Config, acked []AppendResult) {
	t.Helper()
	mc := testConfig(t, "")
	if sync {
		mc.UnflushThreshold = 0
	}
	m := mustOpen(t, mc)
	defer mustClose(t, m)
	for i := 0; i < 20; i++ {
		acked = append(acked, mustAppend(t, m, &Message{Topic: "t", Partition: int32(i % 2), Data: body("t", int32(i%2), i/2, 300)}))
	}
	for i := 0; i < 2; i++ {
		acked = append(acked, mustAppend(t, m, &Message{Topic: "u", Data: body("u", 0, i, 300)}))
	}
	_ = m.WriteOut()
	r, cfg = replicaOf(t, dir, lb, sync)
	if got := r.ReadLimit(); got != 0 {
		t.Fatalf("a new replica's read limit is %d, want 0", got)
	}
	copyRaw(t, m, r, 0, 1<<20)
	r.RaiseReadLimit(acked[10].PhysicalOffset)
	waitReadable(t, r, "t", 1, 5)
	if err := r.SaveReadLimit(); err != nil {
		t.Fatal(err)
	}
	return r, cfg, acked
}

// wmRecord is the topic and partition of wmFixture's record i.
func wmRecord(i int) (string, int32) {
	if i < 20 {
		return "t", int32(i % 2)
	}
	return "u", 0
}

// servedUpTo checks that r serves exactly the records of acked below n.
func servedUpTo(t *testing.T, r *Store, acked []AppendResult, n int) {
	t.Helper()
	for _, c := range []struct {
		topic string
		part  int32
	}{{"t", 0}, {"t", 1}, {"u", 0}} {
		want := int64(0)
		for i := range acked[:n] {
			if topic, part := wmRecord(i); topic == c.topic && part == c.part {
				want++
			}
		}
		if got := r.MaxOffset(c.topic, c.part); got != want {
			t.Fatalf("MaxOffset(%s, %d) = %d, want %d", c.topic, c.part, got, want)
		}
	}
	for i, a := range acked {
		res, err := r.ReadByID(a.MsgID)
		if (err == nil) != (i < n) {
			t.Fatalf("ReadByID of record %d: %v, want served %v", i, err, i < n)
		}
		if err == nil {
			res.Release()
		}
	}
}

// A replica reopened after a crash starts with its saved watermark as its
// read limit, before recovery indexes the log: the records past it are not
// served, and are not lost either: each partition's next queue offset
// counts them, the limit rises over them, and lifting it (a promotion)
// serves them, removes the file and lets local appends continue the queue
// offsets.
func TestReplicaWatermarkAcrossRestart(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) { replicaWatermarkAcrossRestart(t, sync) })
	}
}

func replicaWatermarkAcrossRestart(t *testing.T, sync bool) {
	dir := t.TempDir()
	r, cfg, acked := wmFixture(t, dir, nil, sync)
	r.RaiseReadLimit(acked[14].PhysicalOffset) // saved by the raise itself
	r.crash()
	r = mustOpen(t, cfg)
	defer mustClose(t, r)
	if lim := r.ReadLimit(); lim != acked[14].PhysicalOffset {
		t.Fatalf("reopened with read limit %d, want the saved %d", lim, acked[14].PhysicalOffset)
	}
	servedUpTo(t, r, acked, 14)
	r.RaiseReadLimit(acked[21].PhysicalOffset)
	waitReadable(t, r, "u", 0, 1)
	servedUpTo(t, r, acked, 21)
	r.SetReadLimit(-1)
	waitReadable(t, r, "u", 0, 2)
	servedUpTo(t, r, acked, len(acked))
	if _, err := os.Stat(filepath.Join(dir, watermarkFile)); !os.IsNotExist(err) {
		t.Fatalf("the watermark file after the limit was lifted: %v", err)
	}
	r.SetReplica(false)
	for _, c := range []struct {
		topic string
		part  int32
		want  int64
	}{{"t", 0, 10}, {"t", 1, 10}, {"u", 0, 2}} {
		if a := mustAppend(t, r, &Message{Topic: c.topic, Partition: c.part, Data: []byte("local")}); a.QueueOffset != c.want {
			t.Fatalf("a local append to %s/%d after the promotion got queue offset %d, want %d", c.topic, c.part, a.QueueOffset, c.want)
		}
	}
}

// A damaged (torn) watermark file serves nothing past what the indexes of
// the last run covered (the checkpoint); without a checkpoint, nothing. A
// value past the log's end is capped at the end. A store that is not a
// replica ignores the file.
func TestReplicaWatermarkDamagedOrPastEnd(t *testing.T) {
	dir := t.TempDir()
	var lb logBuf
	r, cfg, acked := wmFixture(t, dir, &lb, false)
	mustClose(t, r) // its checkpoint covers the 10 records indexed
	path := filepath.Join(dir, watermarkFile)
	if err := os.WriteFile(path, []byte("0000000000001"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	if lim := r.ReadLimit(); lim != acked[10].PhysicalOffset {
		t.Fatalf("read limit %d with a torn watermark file, want the checkpoint's %d", lim, acked[10].PhysicalOffset)
	}
	servedUpTo(t, r, acked, 10)
	if !strings.Contains(lb.String(), "high watermark file is damaged") {
		t.Fatalf("the damaged file was not logged:\n%s", lb.String())
	}
	r.crash()
	if err := os.Remove(filepath.Join(dir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	if lim := r.ReadLimit(); lim != 0 {
		t.Fatalf("read limit %d with a torn watermark file and no checkpoint, want 0", lim)
	}
	servedUpTo(t, r, acked, 0)
	mustClose(t, r)

	var b [watermarkSize]byte
	encodeWatermark(&b, 1<<40)
	if err := os.WriteFile(path, b[:], 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	if lim, end := r.ReadLimit(), r.WritePos(); lim != end {
		t.Fatalf("read limit %d with a watermark past the log, want its end %d", lim, end)
	}
	servedUpTo(t, r, acked, len(acked))
	mustClose(t, r)

	cfg.Replica = false
	r = mustOpen(t, cfg)
	defer mustClose(t, r)
	if lim := r.ReadLimit(); lim != -1 {
		t.Fatalf("a store that is not a replica opened with read limit %d", lim)
	}
}

// A truncation of the replica's log removes the watermark file and caps
// this run's limit at the cut: the bytes later written past the cut are
// another history. A reset (wipe) removes it too.
func TestReplicaWatermarkTruncateAndReset(t *testing.T) {
	dir := t.TempDir()
	r, cfg, acked := wmFixture(t, dir, nil, false)
	r.RaiseReadLimit(acked[16].PhysicalOffset)
	waitReadable(t, r, "t", 1, 8)
	if err := r.SaveReadLimit(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, r)
	path := filepath.Join(dir, watermarkFile)
	cut := acked[12].PhysicalOffset
	if err := ScheduleReset(dir, ResetTruncate, cut); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	if lim := r.ReadLimit(); lim != cut {
		t.Fatalf("read limit %d after a truncation at %d", lim, cut)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the watermark file after a truncation: %v", err)
	}
	servedUpTo(t, r, acked[:12], 12)
	if err := r.SaveReadLimit(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the watermark file is not written again: %v", err)
	}
	mustClose(t, r)

	base := 5 * cfg.SegmentSize
	if err := ScheduleReset(dir, ResetWipe, base); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	defer mustClose(t, r)
	if lim := r.ReadLimit(); lim != base {
		t.Fatalf("read limit %d after a reset to %d", lim, base)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the watermark file after a reset: %v", err)
	}
}

// The file's encoding: a value round-trips; a changed digit, a short file
// or a bad CRC are refused.
func TestWatermarkEncoding(t *testing.T) {
	var b [watermarkSize]byte
	for _, v := range []int64{0, 1, 123456789, 1<<63 - 1} {
		encodeWatermark(&b, v)
		if got, ok := decodeWatermark(b[:]); !ok || got != v {
			t.Fatalf("%d → %q → %d %v", v, b, got, ok)
		}
	}
	encodeWatermark(&b, 4096)
	bad := b
	bad[15]++
	for _, x := range [][]byte{bad[:], b[:31], append(b[:], '\n'), []byte(strings.Repeat("0", 32))} {
		if _, ok := decodeWatermark(x); ok {
			t.Fatalf("accepted %q", x)
		}
	}
}

// The cost of keeping the read limit on disk: a save after a rise (one
// pwrite of 32 bytes into the page cache) and a save with nothing to do
// (an atomic load).
func BenchmarkSaveReadLimit(b *testing.B) {
	cfg := testConfig(b, "")
	cfg.Replica = true
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	var lim int64
	b.Run("rise", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			lim++
			s.clog.readLimit.Store(lim)
			if err := s.SaveReadLimit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := s.SaveReadLimit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A truncation keeps serving what the last run's indexes covered below the
// cut, with no watermark file: a former master (its file was removed when it
// was promoted) restarted as a slave and cut at its divergence point from the
// new master serves its log up to the cut, as it did before, not nothing
// until the new master speaks; the records past the limit would otherwise
// also be scanned at open and by every handshake's epoch lookup.
func TestReplicaWatermarkTruncateWithoutFile(t *testing.T) {
	dir := t.TempDir()
	r, cfg, acked := wmFixture(t, dir, nil, false)
	r.SetReadLimit(-1) // promoted: serves everything, the file is removed
	waitReadable(t, r, "u", 0, 2)
	mustClose(t, r) // its checkpoint covers every record
	cut := acked[12].PhysicalOffset
	if err := ScheduleReset(dir, ResetTruncate, cut); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, cfg)
	defer mustClose(t, r)
	if lim := r.ReadLimit(); lim != cut {
		t.Fatalf("read limit %d after a truncation at %d of a log whose indexes covered %d", lim, cut, acked[21].PhysicalOffset)
	}
	servedUpTo(t, r, acked[:12], 12)
}

// A raise of the read limit is on the watermark file before it takes
// effect: a slave killed right after one (before its syncer's next ack)
// restarts serving what its consumers could already read.
func TestReplicaWatermarkSavedBeforeRaise(t *testing.T) {
	dir := t.TempDir()
	r, cfg, acked := wmFixture(t, dir, nil, false)
	r.RaiseReadLimitFrom(acked[14].PhysicalOffset, nil) // no SaveReadLimit after it
	waitReadable(t, r, "t", 1, 7)
	r.crash()
	r = mustOpen(t, cfg)
	defer mustClose(t, r)
	if lim := r.ReadLimit(); lim != acked[14].PhysicalOffset {
		t.Fatalf("reopened with read limit %d, want %d: what was readable before the kill", lim, acked[14].PhysicalOffset)
	}
	servedUpTo(t, r, acked, 14)
}
