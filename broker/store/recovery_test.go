package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// fill appends n messages round-robin over parts partitions of topic and
// returns the results.
func fill(t *testing.T, s *Store, topic string, parts, n, size int) []AppendResult {
	t.Helper()
	out := make([]AppendResult, n)
	for i := 0; i < n; i++ {
		p := int32(i % parts)
		out[i] = mustAppend(t, s, &Message{Topic: topic, Partition: p, Properties: []byte(fmt.Sprintf("keys=k%d", i)),
			Data: body(topic, p, i, size)})
	}
	return out
}

// verifyAll checks that every appended message is readable, intact, at its offset.
func verifyAll(t *testing.T, s *Store, topic string, parts int, res []AppendResult, size int) {
	t.Helper()
	for p := 0; p < parts; p++ {
		waitReadable(t, s, topic, int32(p), int64((len(res)-p+parts-1)/parts))
	}
	for i, a := range res {
		p := int32(i % parts)
		r, err := s.Read(topic, p, a.QueueOffset, 1, nil)
		if err != nil || r.Status != ReadFound {
			t.Fatalf("message %d (%s/%d@%d): %v %v", i, topic, p, a.QueueOffset, err, r)
		}
		rec, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
		if err != nil || rec.MsgID != a.MsgID || !bytes.Equal(rec.Data, body(topic, p, i, size)) {
			t.Fatalf("message %d differs: %v", i, err)
		}
		r.Release()
	}
}

func TestReopenAfterCleanClose(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 8192
	s := mustOpen(t, cfg)
	res := fill(t, s, "t", 3, 300, 50)
	mustClose(t, s)
	if _, err := os.Stat(filepath.Join(cfg.Dir, "abort")); !os.IsNotExist(err) {
		t.Fatal("abort marker left after Close")
	}
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if strings.Contains(lb.String(), "truncated") || strings.Contains(lb.String(), "scanning") {
		t.Fatalf("clean reopen should trust the checkpoint: %s", lb.String())
	}
	verifyAll(t, s, "t", 3, res, 50)
	for p := int32(0); p < 3; p++ {
		if s.MaxOffset("t", p) != 100 || s.MinOffset("t", p) != 0 {
			t.Fatalf("partition %d: min %d max %d", p, s.MinOffset("t", p), s.MaxOffset("t", p))
		}
	}
	a := mustAppend(t, s, &Message{Topic: "t", Partition: 1, Data: []byte("more")})
	if a.QueueOffset != 100 || a.PhysicalOffset != res[len(res)-1].PhysicalOffset+int64(res[len(res)-1].Size) {
		t.Fatalf("append after reopen: %+v", a)
	}
	ti := s.Topics()
	if len(ti) != 1 || len(ti[0].Partitions) != 3 || ti[0].Partitions[1].Max != 101 {
		t.Fatalf("Topics: %+v", ti)
	}
}

func TestRecoverAfterCrash(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 8192
	cfg.CheckpointInterval = time.Hour // recovery scans everything after Open's checkpoint
	s := mustOpen(t, cfg)
	res := fill(t, s, "t", 4, 400, 40)
	s.crash()
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	verifyAll(t, s, "t", 4, res, 40)
	if !strings.Contains(lb.String(), "recovery: commit log verified") || !strings.Contains(lb.String(), "records=400") {
		t.Fatalf("recovery not logged: %s", lb.String())
	}
	for p := int32(0); p < 4; p++ {
		if got := mustAppend(t, s, &Message{Topic: "t", Partition: p, Data: []byte("z")}).QueueOffset; got != 100 {
			t.Fatalf("append after crash: offset %d", got)
		}
	}
	checkSegments(t, s)
}

// corruptFile XORs the bytes [pos, pos+n) of path with mask (0 = zero them).
func corruptFile(t *testing.T, path string, pos int64, n int, mask byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	f.ReadAt(b, pos)
	for i := range b {
		if mask == 0 {
			b[i] = 0
		} else {
			b[i] ^= mask
		}
	}
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func segPath(dir string, pos, segSize int64) string {
	return filepath.Join(dir, "commitlog", segmentName(pos/segSize*segSize))
}

func TestRecoverTornAndGarbledTail(t *testing.T) {
	for _, mode := range []string{"truncated", "garbled", "header"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.SegmentSize = 1 << 20
			cfg.CheckpointInterval = time.Hour
			s := mustOpen(t, cfg)
			res := fill(t, s, "t", 2, 50, 100)
			s.crash()
			last := res[len(res)-1]
			path := segPath(cfg.Dir, last.PhysicalOffset, cfg.SegmentSize)
			switch mode {
			case "truncated": // the last 30 bytes never reached the disk
				corruptFile(t, path, last.PhysicalOffset+int64(last.Size)-30, 30, 0)
			case "garbled":
				corruptFile(t, path, last.PhysicalOffset+int64(last.Size)-30, 30, 0x5A)
			case "header": // size field torn
				corruptFile(t, path, last.PhysicalOffset, 2, 0xFF)
			}
			lb := &logBuf{}
			cfg.Logger = newTestLogger(lb)
			s = mustOpen(t, cfg)
			defer mustClose(t, s)
			if !containsAll(lb.String(), "truncated the commit log", fmt.Sprintf("at=%d", last.PhysicalOffset), "bytesCut=") {
				t.Fatalf("cut not reported: %s", lb.String())
			}
			verifyAll(t, s, "t", 2, res[:len(res)-1], 100)
			lastPart := int32((len(res) - 1) % 2)
			if got := s.MaxOffset("t", lastPart); got != last.QueueOffset {
				t.Fatalf("max offset %d, want %d", got, last.QueueOffset)
			}
			// The tail is clean and appends continue where the cut was.
			a := mustAppend(t, s, &Message{Topic: "t", Partition: lastPart, Data: []byte("again")})
			if a.QueueOffset != last.QueueOffset || a.PhysicalOffset != last.PhysicalOffset {
				t.Fatalf("append after cut: %+v", a)
			}
			waitReadable(t, s, "t", lastPart, a.QueueOffset+1)
			recs := readAll(t, s, "t", lastPart, a.QueueOffset, nil)
			if len(recs) != 1 || string(recs[0].Data) != "again" {
				t.Fatalf("tail after append: %d records", len(recs))
			}
			checkSegments(t, s)
		})
	}
}

func TestRecoverMidFileCorruption(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 8192
	cfg.CheckpointInterval = time.Hour
	s := mustOpen(t, cfg)
	res := fill(t, s, "t", 3, 300, 60) // ~ 4 segments
	s.crash()
	bad := res[40] // in the first segment
	corruptFile(t, segPath(cfg.Dir, bad.PhysicalOffset, cfg.SegmentSize), bad.PhysicalOffset+70, 1, 0x01)
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	log := lb.String()
	if !containsAll(log, "truncated the commit log", fmt.Sprintf("at=%d", bad.PhysicalOffset), "checksum mismatch", "segmentsDeleted=") {
		t.Fatalf("mid-file corruption not reported: %s", log)
	}
	// Everything from the corrupt record on is gone, everything before intact.
	verifyAll(t, s, "t", 3, res[:40], 60)
	for p := 0; p < 3; p++ {
		want := int64((40 - p + 2) / 3)
		if got := s.MaxOffset("t", int32(p)); got != want {
			t.Fatalf("partition %d: max %d want %d", p, got, want)
		}
		r, _ := s.Read("t", int32(p), want, 1<<20, nil)
		if r.Status != ReadNoMessage {
			t.Fatalf("partition %d: %v past the cut", p, r.Status)
		}
		r.Release()
	}
	if st := s.Stats(); st.Segments != 1 || st.CommitLogMax != bad.PhysicalOffset {
		t.Fatalf("segments %d max %d", st.Segments, st.CommitLogMax)
	}
	// New appends reuse the cut space; a second crash must not resurrect old records.
	more := fill(t, s, "u", 1, 20, 10)
	s.crash()
	s = mustOpen(t, cfg)
	verifyAll(t, s, "u", 1, more, 10)
	if s.MaxOffset("t", 0) != 14 || s.MaxOffset("u", 0) != 20 {
		t.Fatalf("after second crash: t %d u %d", s.MaxOffset("t", 0), s.MaxOffset("u", 0))
	}
	checkSegments(t, s)
	mustClose(t, s)
}

func TestRecoverRebuildsIndexes(t *testing.T) {
	for _, what := range []string{"checkpoint", "index", "both"} {
		t.Run(what, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.SegmentSize = 8192
			s := mustOpen(t, cfg)
			res := fill(t, s, "t", 3, 200, 30)
			mustClose(t, s)
			if what != "index" {
				os.Remove(filepath.Join(cfg.Dir, "checkpoint"))
			}
			if what != "checkpoint" {
				os.RemoveAll(filepath.Join(cfg.Dir, "index"))
				os.Remove(filepath.Join(cfg.Dir, "checkpoint"))
			}
			s = mustOpen(t, cfg)
			defer mustClose(t, s)
			verifyAll(t, s, "t", 3, res, 30)
			q, err := s.QueryKey("t", "k7", 10)
			if err != nil || q.Count != 1 {
				t.Fatalf("key after rebuild: %v", err)
			}
			q.Release()
		})
	}
}

func TestRecoverCutsIndexPastLogEnd(t *testing.T) {
	// Async mode: indexes are built from unflushed bytes; if those bytes are
	// lost (power failure) the units pointing at them must go.
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.UnflushInterval = time.Hour
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	var res []AppendResult
	for i := 0; i < 100; i++ {
		r, _, err := s.AppendAsync(&Message{Topic: "a", Data: body("a", 0, i, 20)})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	waitReadable(t, s, "a", 0, 100)
	// Readable is not yet dispatched: the dispatcher publishes its position after the
	// batch's partitions (and the key index), and the checkpoint records that position.
	end := res[99].PhysicalOffset + int64(res[99].Size)
	waitFor(t, "every record dispatched", func() bool { return s.dispatched.Load() >= end })
	if err := s.checkpoint(); err != nil { // records dispatched=end; flushed is still 0
		t.Fatal(err)
	}
	s.crash()
	// Lose the last 30 records' bytes.
	cut := res[70].PhysicalOffset
	corruptFile(t, segPath(cfg.Dir, cut, cfg.SegmentSize), cut, int(res[99].PhysicalOffset+int64(res[99].Size)-cut), 0)
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	// Nothing below the checkpoint's flushed position (0) was cut: units
	// cut, not "messages lost" (issue 11.3).
	if !containsAll(lb.String(), "cut index units", "unitsCut=30", "never flushed") || strings.Contains(lb.String(), "messages lost") {
		t.Fatalf("index cut not reported as it is: %s", lb.String())
	}
	if s.MaxOffset("a", 0) != 70 {
		t.Fatalf("max %d", s.MaxOffset("a", 0))
	}
	verifyAll(t, s, "a", 1, res[:70], 20)
	a := mustAppend(t, s, &Message{Topic: "a", Data: []byte("new")})
	if a.QueueOffset != 70 {
		t.Fatalf("offset %d", a.QueueOffset)
	}
}

func TestCleanTailMismatchTriggersScan(t *testing.T) {
	cfg := testConfig(t, "")
	s := mustOpen(t, cfg)
	res := fill(t, s, "t", 1, 10, 20)
	mustClose(t, s)
	// Garbage after the clean end: must be detected and zeroed, not trusted.
	end := res[9].PhysicalOffset + int64(res[9].Size)
	corruptFile(t, segPath(cfg.Dir, end, cfg.SegmentSize), end, 16, 0x33)
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if !containsAll(lb.String(), "does not match the commit log tail", "truncated the commit log") {
		t.Fatalf("mismatch not handled: %s", lb.String())
	}
	verifyAll(t, s, "t", 1, res, 20)
	checkSegments(t, s)
}

func TestFlockExcludesSecondOpen(t *testing.T) {
	cfg := testConfig(t, "")
	s := mustOpen(t, cfg)
	if _, err := Open(cfg); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "another broker") {
		t.Fatalf("second Open: %v", err)
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	mustClose(t, s)
}

func TestOpenRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: t.TempDir(), BrokerID: 40000},
		{Dir: t.TempDir(), SegmentSize: 100},
		{Dir: t.TempDir(), IndexFileSize: 100},
	} {
		if s, err := Open(c); err == nil {
			s.Close()
			t.Fatalf("Open(%+v) should fail", c)
		}
	}
}

func TestRepeatedCrashesRandomTails(t *testing.T) {
	// Crash many times, each time damaging a random number of tail bytes of
	// the unacknowledged region; acknowledged data must always survive.
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.CheckpointInterval = 5 * time.Millisecond
	rng := rand.New(rand.NewSource(7))
	var acked []AppendResult
	var ackedData [][]byte
	var seq atomic.Int64
	for round := 0; round < 15; round++ {
		s := mustOpen(t, cfg)
		for i := 0; i < 30+rng.Intn(50); i++ {
			d := []byte(fmt.Sprintf("m%d-%s", seq.Add(1), strings.Repeat("x", rng.Intn(300))))
			a := mustAppend(t, s, &Message{Topic: "r", Data: d})
			acked = append(acked, a)
			ackedData = append(ackedData, d)
		}
		// An unacknowledged record written but never flushed, torn at random.
		s.clog.mu.Lock()
		end := s.clog.wpos
		s.clog.mu.Unlock()
		s.crash()
		if g := end % cfg.SegmentSize; g+40 < cfg.SegmentSize {
			f, _ := os.OpenFile(segPath(cfg.Dir, end, cfg.SegmentSize), os.O_RDWR, 0)
			junk := make([]byte, 1+rng.Intn(39))
			rng.Read(junk)
			f.WriteAt(junk, end%cfg.SegmentSize)
			f.Close()
		}
		s = mustOpen(t, cfg)
		if got := s.MaxOffset("r", 0); got != int64(len(acked)) {
			t.Fatalf("round %d: max %d, acked %d", round, got, len(acked))
		}
		waitReadable(t, s, "r", 0, int64(len(acked)))
		recs := readAll(t, s, "r", 0, 0, nil)
		if len(recs) != len(acked) {
			t.Fatalf("round %d: read %d of %d", round, len(recs), len(acked))
		}
		for i, r := range recs {
			if r.MsgID != acked[i].MsgID || !bytes.Equal(r.Data, ackedData[i]) {
				t.Fatalf("round %d: message %d differs", round, i)
			}
		}
		checkSegments(t, s)
		mustClose(t, s)
	}
}

func TestRecoverIndexFileCreatedButNeverWritten(t *testing.T) {
	// A crash right after an index file was created and before its first
	// units were written leaves an all-zero file; the records are past the
	// checkpoint's dispatched position. Recovery must rebuild the stream
	// from its start: every message readable, min offset 0.
	cfg := testConfig(t, "")
	s := mustOpen(t, cfg)
	res := fill(t, s, "z", 1, 5, 40)
	path := filepath.Join(s.partition("z", 0, false).dir, segmentName(0))
	mustClose(t, s)
	// The crash state: units never written, checkpoint from before them,
	// abort marker present.
	if err := os.WriteFile(path, make([]byte, cfg.IndexFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, ok := (&Store{cfg: cfg, log: cfg.Logger}).readCheckpoint()
	if !ok {
		t.Fatal("no checkpoint")
	}
	ck.dispatched = ck.logMin
	if err := writeCheckpointFile(cfg.Dir, &ck); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "abort"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if m := s.MinOffset("z", 0); m != 0 {
		t.Fatalf("min offset %d after rebuilding, want 0", m)
	}
	verifyAll(t, s, "z", 1, res, 40)
}
