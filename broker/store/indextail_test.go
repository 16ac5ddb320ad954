package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Index tails (indextail.go): the newest units of a partition stay in memory
// until they fill a 4 KiB block; readers see them at once, the checkpoint
// never claims them before they are written, recovery rebuilds them.

// tailConfig: big index files (so blocks, not file ends, bound the tails)
// and no periodic checkpoint (so only the tests write tails out).
func tailConfig(t *testing.T) Config {
	cfg := testConfig(t, "")
	cfg.IndexFileSize = 1 << 20
	cfg.SegmentSize = 1 << 20
	cfg.CheckpointInterval = time.Hour
	cfg.UnflushThreshold = 1 << 20
	cfg.UnflushInterval = time.Hour
	return cfg
}

// fileUnits returns the units stored in partition part's first index file
// (zeros where nothing was written yet).
func fileUnits(t *testing.T, cfg Config, topic string, part int32, n int) []byte {
	t.Helper()
	b := make([]byte, n*unitSize)
	f, err := os.Open(filepath.Join(cfg.Dir, "index", topic, fmt.Sprint(part), segmentName(0)))
	if os.IsNotExist(err) {
		return b
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.ReadAt(b, 0)
	return b
}

func countUsedUnits(b []byte) int {
	n := 0
	for i := 0; i+unitSize <= len(b); i += unitSize {
		if _, size, _ := getUnit(b[i:]); size > 0 {
			n++
		}
	}
	return n
}

func appendN(t *testing.T, s *Store, topic string, parts, n, size int) []AppendResult {
	t.Helper()
	out := make([]AppendResult, n)
	for i := 0; i < n; i++ {
		p := int32(i % parts)
		r, _, err := s.AppendAsync(&Message{Topic: topic, Partition: p, Properties: []byte(fmt.Sprintf("keys=k%d", i)),
			Data: body(topic, p, i, size)})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r
	}
	return out
}

func TestIndexTailServesReadsFromMemory(t *testing.T) {
	cfg := tailConfig(t)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	// 300 units in partition 0: one whole block (256) goes to the file, 44
	// stay in the tail; partition 1 gets 10, all in the tail.
	res := appendN(t, s, "t", 1, 300, 30)
	res1 := make([]AppendResult, 10)
	for i := range res1 {
		r, _, err := s.AppendAsync(&Message{Topic: "t", Partition: 1, Data: body("t", 1, i, 30)})
		if err != nil {
			t.Fatal(err)
		}
		res1[i] = r
	}
	waitReadable(t, s, "t", 0, 300)
	waitReadable(t, s, "t", 1, 10)
	if n := countUsedUnits(fileUnits(t, cfg, "t", 0, 300)); n != tailUnits {
		t.Fatalf("partition 0: %d units in the file, want %d", n, tailUnits)
	}
	if n := countUsedUnits(fileUnits(t, cfg, "t", 1, 10)); n != 0 {
		t.Fatalf("partition 1: %d units in the file, want 0", n)
	}
	if st := s.Stats(); st.IndexBufferBytes != 2*tailBytes {
		t.Fatalf("IndexBufferBytes %d", st.IndexBufferBytes)
	}
	// Reads across the file/tail boundary and wholly from the tail.
	verifyAll(t, s, "t", 1, res, 30)
	recs := readAll(t, s, "t", 0, 250, nil)
	if len(recs) != 50 || recs[0].QueueOffset != 250 || recs[49].QueueOffset != 299 {
		t.Fatalf("read across the boundary: %d records", len(recs))
	}
	recs = readAll(t, s, "t", 1, 0, nil)
	if len(recs) != 10 || !bytes.Equal(recs[9].Data, body("t", 1, 9, 30)) {
		t.Fatalf("read from the tail: %d records", len(recs))
	}
	// Time lookup and the long-poll wait see tail units too.
	if q := s.OffsetForTime("t", 1, res1[0].StoreTime); q != 0 {
		t.Fatalf("OffsetForTime %d", q)
	}
	if q := s.OffsetForTime("t", 0, res[299].StoreTime+1); q != 300 {
		t.Fatalf("OffsetForTime past the end %d", q)
	}
	ch := s.Wait("t", 1, 10)
	select {
	case <-ch:
		t.Fatal("Wait fired before a new message")
	default:
	}
	if _, err := s.Append(&Message{Topic: "t", Partition: 1, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not fire for a unit held in the tail")
	}
	// A checkpoint writes the tails out before claiming them.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := countUsedUnits(fileUnits(t, cfg, "t", 0, 300)); n != 300 {
		t.Fatalf("after checkpoint: %d units of partition 0 in the file", n)
	}
	if n := countUsedUnits(fileUnits(t, cfg, "t", 1, 11)); n != 11 {
		t.Fatalf("after checkpoint: %d units of partition 1 in the file", n)
	}
	// Busy partitions keep their buffers; one idle for a whole checkpoint
	// interval returns it.
	if st := s.Stats(); st.IndexBufferBytes != 2*tailBytes {
		t.Fatalf("after checkpoint: IndexBufferBytes %d", st.IndexBufferBytes)
	}
	extra := appendN(t, s, "t", 1, 1, 30)
	waitReadable(t, s, "t", 0, 301)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.IndexBufferBytes != tailBytes {
		t.Fatalf("idle partition kept its buffer: IndexBufferBytes %d", st.IndexBufferBytes)
	}
	res = append(res, extra...)
	// Appending after a partial write continues the block.
	more := appendN(t, s, "t", 1, 300, 30)
	for i := range more {
		res = append(res, more[i])
	}
	waitReadable(t, s, "t", 0, 601)
	recs = readAll(t, s, "t", 0, 0, nil)
	if len(recs) != 601 {
		t.Fatalf("read %d of 601", len(recs))
	}
	for i, r := range recs {
		if r.MsgID != res[i].MsgID {
			t.Fatalf("message %d differs", i)
		}
	}
}

func TestIndexTailLostInCrashIsRebuilt(t *testing.T) {
	cfg := tailConfig(t)
	s := mustOpen(t, cfg)
	res := appendN(t, s, "t", 3, 900, 40) // 300 per partition: 44 in each tail
	for p := int32(0); p < 3; p++ {
		waitReadable(t, s, "t", p, 300)
	}
	if err := s.Flush(); err != nil { // log durable, tails written, checkpointed
		t.Fatal(err)
	}
	more := appendN(t, s, "t", 3, 30, 40)
	for p := int32(0); p < 3; p++ {
		waitReadable(t, s, "t", p, 310)
	}
	// Make the log durable without a checkpoint: the new units exist only
	// in memory (and the checkpoint does not claim them).
	if err := s.clog.flushOnce(); err != nil {
		t.Fatal(err)
	}
	ck, ok := s.readCheckpoint()
	if !ok || ck.dispatched > res[len(res)-1].PhysicalOffset+int64(res[len(res)-1].Size) {
		t.Fatalf("checkpoint claims units not written: %+v", ck)
	}
	for p := int32(0); p < 3; p++ {
		if n := countUsedUnits(fileUnits(t, cfg, "t", p, 310)); n != 300 {
			t.Fatalf("partition %d: %d units in the file before the crash, want 300", p, n)
		}
	}
	s.crash()

	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	all := append(res, more...)
	for p := int32(0); p < 3; p++ {
		if m := s.MaxOffset("t", p); m != 310 {
			t.Fatalf("partition %d: max %d after recovery", p, m)
		}
	}
	for p := int32(0); p < 3; p++ {
		recs := readAll(t, s, "t", p, 0, nil)
		if len(recs) != 310 {
			t.Fatalf("partition %d: %d records after recovery", p, len(recs))
		}
		for i, r := range recs {
			want := all[i*3+int(p)]
			k := i*3 + int(p) // appendN numbers each call's messages from 0
			if i >= 300 {
				k -= 900
			}
			if r.MsgID != want.MsgID || r.QueueOffset != int64(i) || !bytes.Equal(r.Data, body("t", p, k, 40)) {
				t.Fatalf("partition %d message %d differs", p, i)
			}
		}
	}
	if !strings.Contains(lb.String(), "redispatchedFrom") {
		t.Fatalf("no re-dispatch reported: %s", lb.String())
	}
	for p := int32(0); p < 3; p++ {
		a := mustAppend(t, s, &Message{Topic: "t", Partition: p, Data: []byte("next")})
		if a.QueueOffset != 310 {
			t.Fatalf("partition %d: next offset %d", p, a.QueueOffset)
		}
	}
}

func TestIndexTailBudget(t *testing.T) {
	cfg := tailConfig(t)
	cfg.IndexBufferSize = 3 * tailBytes // three partitions buffer, the rest write through
	s := mustOpen(t, cfg)
	const parts = 20
	res := appendN(t, s, "t", parts, parts*40, 20)
	for p := int32(0); p < parts; p++ {
		waitReadable(t, s, "t", p, 40)
	}
	st := s.Stats()
	if st.IndexBufferBytes > cfg.IndexBufferSize {
		t.Fatalf("IndexBufferBytes %d over the budget %d", st.IndexBufferBytes, cfg.IndexBufferSize)
	}
	buffered := 0
	for p := int32(0); p < parts; p++ {
		if countUsedUnits(fileUnits(t, cfg, "t", p, 40)) < 40 {
			buffered++
		}
	}
	if buffered == 0 || buffered > 3 {
		t.Fatalf("%d partitions hold units in memory, want 1..3", buffered)
	}
	verifyAll(t, s, "t", parts, res, 20)
	mustClose(t, s)

	// No buffering at all.
	cfg.IndexBufferSize = -1
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	res2 := appendN(t, s, "u", 2, 20, 20)
	waitReadable(t, s, "u", 1, 10)
	if n := countUsedUnits(fileUnits(t, cfg, "u", 1, 10)); n != 10 {
		t.Fatalf("unbuffered: %d units in the file", n)
	}
	verifyAll(t, s, "u", 2, res2, 20)
}

// Small index files: a tail never crosses a file boundary (it is written
// when it reaches the end of its file), and retention of old files keeps
// working with tails.
func TestIndexTailSmallFiles(t *testing.T) {
	cfg := tailConfig(t)
	cfg.IndexFileSize = 160 // 10 units per file
	s := mustOpen(t, cfg)
	res := appendN(t, s, "t", 2, 95, 25)
	waitReadable(t, s, "t", 1, 47)
	verifyAll(t, s, "t", 2, res, 25)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	verifyAll(t, s, "t", 2, res, 25)
	if m := s.MaxOffset("t", 0); m != 48 {
		t.Fatalf("max %d", m)
	}
}

// A partition's index file is created with its first unit, not when its
// first tail block fills: creating the directory and file costs ~1 ms of
// kernel CPU, which a broker given many new topics otherwise paid for all of
// them at once, ~256 messages into their traffic.
func TestIndexFileCreatedWithFirstUnit(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	mustAppend(t, s, &Message{Topic: "eager", Data: []byte("first")})
	waitDispatched(s)
	p := s.partition("eager", 0, false)
	if p == nil || p.indexed.Load() != 1 {
		t.Fatal("the first message is not indexed")
	}
	if _, err := os.Stat(filepath.Join(p.dir, segmentName(0))); err != nil {
		t.Fatalf("index file after the first unit: %v", err)
	}
	if p.filed.Load() != 0 {
		t.Fatalf("filed = %d: the unit should still be in the tail", p.filed.Load())
	}
}
