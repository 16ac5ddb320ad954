package store

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Damage found by trying the broker as an operator would (issue 11): a torn
// active segment with its preallocated successor present, index units
// overwritten after a clean stop, and what recovery says it cut.

// tornConfig is an async store (fsync only on Flush/Close), as in the issue.
func tornConfig(t *testing.T) Config {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 1 << 20
	cfg.UnflushThreshold = 1 << 30
	cfg.UnflushInterval = time.Hour
	cfg.CheckpointInterval = time.Hour
	return cfg
}

// fillTorn appends n messages to torn/0, waits until they are indexed and
// the next segment is preallocated, then crashes (kill -9).
func fillTorn(t *testing.T, cfg Config, n int) []AppendResult {
	t.Helper()
	s := mustOpen(t, cfg)
	res := fill(t, s, "torn", 1, n, 200)
	waitReadable(t, s, "torn", 0, int64(n))
	waitPrepared(t, s)
	if err := s.checkpointNow(true); err != nil { // dispatched units claimed durable
		t.Fatal(err)
	}
	s.crash()
	return res
}

// TestRecoverTornSegmentWithPreallocatedNext is issue 11.2's file surgery:
// the active segment truncated to the middle of its last record while the
// preallocated next segment exists. Recovery used to refuse to start ("commit
// log has a gap").
func TestRecoverTornSegmentWithPreallocatedNext(t *testing.T) {
	for _, mode := range []string{"extend", "cannot-extend"} {
		t.Run(mode, func(t *testing.T) {
			cfg := tornConfig(t)
			res := fillTorn(t, cfg, 3000)
			last := res[len(res)-1]
			seg0 := filepath.Join(cfg.Dir, "commitlog", segmentName(0))
			next := filepath.Join(cfg.Dir, "commitlog", segmentName(cfg.SegmentSize))
			if _, err := os.Stat(next); err != nil {
				t.Fatalf("the preallocated next segment should exist: %v", err)
			}
			half := int64(last.Size / 2)
			if err := os.Truncate(seg0, last.PhysicalOffset+half); err != nil {
				t.Fatal(err)
			}
			lb := &logBuf{}
			cfg.Logger = newTestLogger(lb)
			if mode == "cannot-extend" {
				var once bool
				cfg.hooks = &faultHooks{onFallocate: func(path string) error {
					if path == seg0 && !once {
						once = true
						return syscall.ENOSPC
					}
					return nil
				}}
			}
			s, err := Open(cfg)
			if err != nil {
				t.Fatalf("Open after a torn tail: %v", err)
			}
			defer mustClose(t, s)
			log := lb.String()
			if !containsAll(log, "torn tail", "truncated the commit log", fmt.Sprintf("at=%d", last.PhysicalOffset),
				fmt.Sprintf("bytesCut=%d", half), "recordsCut=1", fmt.Sprintf("cutRecordSize=%d", last.Size),
				fmt.Sprintf("cutRecordBytesPresent=%d", half)) {
				t.Fatalf("torn tail not reported exactly: %s", log)
			}
			if !containsAll(log, "unitsCut=1") {
				t.Fatalf("the cut record's index unit not reported: %s", log)
			}
			verifyAll(t, s, "torn", 1, res[:len(res)-1], 200)
			if got := s.MaxOffset("torn", 0); got != last.QueueOffset {
				t.Fatalf("max offset %d, want %d", got, last.QueueOffset)
			}
			a := mustAppend(t, s, &Message{Topic: "torn", Data: []byte("after")})
			if a.QueueOffset != last.QueueOffset || a.PhysicalOffset != last.PhysicalOffset {
				t.Fatalf("append after the cut: %+v, want offset %d at %d", a, last.QueueOffset, last.PhysicalOffset)
			}
			fi, err := os.Stat(seg0)
			if err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "extend": // extended back; the empty successor is reused
				if fi.Size() != cfg.SegmentSize || s.Stats().Segments != 1 {
					t.Fatalf("segment size %d, %d segments", fi.Size(), s.Stats().Segments)
				}
			case "cannot-extend": // the short segment stays; it rolls at its end
				if fi.Size() != last.PhysicalOffset+half {
					t.Fatalf("segment size %d", fi.Size())
				}
				if !strings.Contains(log, "deleting the empty segments") {
					t.Fatalf("fallback not logged: %s", log)
				}
				more := fill(t, s, "more", 1, 40, 200) // past the short end: a roll
				verifyAll(t, s, "more", 1, more, 200)
				if s.Stats().SegmentRolls == 0 {
					t.Fatal("no roll at the short segment's end")
				}
			}
			waitReadable(t, s, "torn", 0, a.QueueOffset+1)
			checkSegments(t, s)
		})
	}
}

// A gap followed by a segment that holds data is not a torn tail: Open still
// refuses, naming the files, rather than deleting data.
func TestRecoverGapBeforeDataRefused(t *testing.T) {
	cfg := tornConfig(t)
	res := fillTorn(t, cfg, 100)
	seg0 := filepath.Join(cfg.Dir, "commitlog", segmentName(0))
	next := filepath.Join(cfg.Dir, "commitlog", segmentName(cfg.SegmentSize))
	corruptFile(t, next, 0, 8, 0x77) // "data" at the start of the successor
	if err := os.Truncate(seg0, res[50].PhysicalOffset); err != nil {
		t.Fatal(err)
	}
	_, err := Open(cfg)
	if err == nil || !strings.Contains(err.Error(), "commit log has a gap") || !strings.Contains(err.Error(), "holds data") {
		t.Fatalf("Open: %v", err)
	}
}

// TestRecoverReportsLostVsUncommitted: units cut because their records were
// below the checkpoint's flushed position (here: a torn tail that took
// flushed bytes) are "messages lost"; the same cut of never-flushed records
// is not (TestRecoverTornSegmentWithPreallocatedNext,
// TestRecoverCutsIndexPastLogEnd).
func TestRecoverReportsLostVsUncommitted(t *testing.T) {
	cfg := tornConfig(t)
	s := mustOpen(t, cfg)
	res := fill(t, s, "l", 1, 100, 20)
	waitReadable(t, s, "l", 0, 100)
	if err := s.Flush(); err != nil { // flushed = end, units durable
		t.Fatal(err)
	}
	waitPrepared(t, s)
	s.crash()
	last := res[99]
	if err := os.Truncate(filepath.Join(cfg.Dir, "commitlog", segmentName(0)), last.PhysicalOffset+5); err != nil {
		t.Fatal(err)
	}
	lb := &logBuf{}
	cfg.Logger = newTestLogger(lb)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if !containsAll(lb.String(), "messages lost", "messages=1", "unitsCut=1", "level=ERROR") {
		t.Fatalf("loss of a flushed record not reported as such: %s", lb.String())
	}
	if s.MaxOffset("l", 0) != 99 {
		t.Fatalf("max %d", s.MaxOffset("l", 0))
	}
}

// TestReadRepairsDamagedIndexUnits is issue 11.3's surgery: 10 units of a
// partition overwritten after a clean stop (dd bs=16 seek=1000 count=10).
// Reads used to skip them (zeros), answer "offset too small" with min 0
// (random units pointing below the log: the consumer went back to 0) or fail.
// Every read must now get the right records, the damage is logged and the
// units rebuilt from the commit log.
func TestReadRepairsDamagedIndexUnits(t *testing.T) {
	for _, how := range []string{"zeros", "random", "other-units"} {
		t.Run(how, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.SegmentSize = 1 << 20
			cfg.IndexFileSize = 64 << 10 // 4096 units: unit 1000 is in the first file
			s := mustOpen(t, cfg)
			const n = 6000
			res := make([]AppendResult, n)
			for i := range res {
				res[i] = mustAppend(t, s, &Message{Topic: "test", Properties: []byte("tag=a"), Data: body("test", 0, i, 100)})
			}
			mustClose(t, s) // SIGTERM: a clean stop

			path := filepath.Join(cfg.Dir, "index", "test", "0", segmentName(0))
			dd := make([]byte, 10*unitSize)
			switch how {
			case "random":
				rand.New(rand.NewSource(1)).Read(dd)
				dd[0] |= 0x80 // the first unit points below the log (phys < 0): used to answer 301 → 0
			case "other-units": // well-formed units of other messages
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				f.ReadAt(dd, 20*unitSize)
				f.Close()
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(dd, 1000*unitSize); err != nil {
				t.Fatal(err)
			}
			f.Close()

			lb := &logBuf{}
			cfg.Logger = newTestLogger(lb)
			s = mustOpen(t, cfg)
			defer func() { mustClose(t, s) }()
			r, err := s.Read("test", 0, 1000, 1<<20, nil)
			if err != nil {
				t.Fatalf("read at 1000: %v\n%s", err, lb.String())
			}
			if r.Status != ReadFound {
				t.Fatalf("read at 1000: %v next %d (a 301 must never send a consumer backwards)\n%s", r.Status, r.NextOffset, lb.String())
			}
			r.Release()
			if !containsAll(lb.String(), "failed verification", "rebuilt them from the commit log", "topic=test", "offset=1000") {
				t.Fatalf("damage not logged: %s", lb.String())
			}
			repairs := s.Stats().IndexRepairs
			if repairs == 0 {
				t.Fatal("no repair counted")
			}
			check := func(f *protocol.TagFilter) {
				t.Helper()
				recs := readAll(t, s, "test", 0, 990, f)
				if len(recs) != n-990 {
					t.Fatalf("read %d records from 990, want %d", len(recs), n-990)
				}
				for i, rec := range recs {
					q := int64(990 + i)
					if rec.QueueOffset != q || rec.MsgID != res[q].MsgID || string(rec.Data) != string(body("test", 0, int(q), 100)) {
						t.Fatalf("record %d: offset %d msgId %d", q, rec.QueueOffset, rec.MsgID)
					}
				}
			}
			check(nil)
			check(protocol.ParseTagFilter("a"))
			// Each unit read on its own (the consumer that asks for 1009).
			for q := int64(1000); q < 1010; q++ {
				r, err := s.Read("test", 0, q, 1, nil)
				if err != nil || r.Status != ReadFound || r.Count != 1 {
					t.Fatalf("read at %d: %v %v", q, err, r)
				}
				rec, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
				if err != nil || rec.QueueOffset != q {
					t.Fatalf("read at %d: got %d %v", q, rec.QueueOffset, err)
				}
				r.Release()
			}
			if got := s.Stats().IndexRepairs; got != repairs {
				t.Fatalf("the rebuilt units were not kept: %d repairs, then %d", repairs, got)
			}
			// The rebuilt units are in the file: a clean reopen reads them.
			mustClose(t, s)
			lb2 := &logBuf{}
			cfg.Logger = newTestLogger(lb2)
			s = mustOpen(t, cfg)
			check(nil)
			if s.Stats().IndexRepairs != 0 || strings.Contains(lb2.String(), "failed verification") {
				t.Fatalf("units damaged again after reopen: %s", lb2.String())
			}
		})
	}
}

// A record damaged in the commit log (its unit is right) is still refused
// with ErrCorrupt, not "repaired" or skipped; a unit whose record is gone
// from the log altogether (log damage too) is skipped, logged as such.
func TestReadIndexRepairLimits(t *testing.T) {
	lb := &logBuf{}
	cfg := testConfig(t, "")
	cfg.Logger = newTestLogger(lb)
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	var res []AppendResult
	for i := 0; i < 10; i++ {
		res = append(res, mustAppend(t, s, &Message{Topic: "x", Data: body("x", 0, i, 60)}))
	}
	waitReadable(t, s, "x", 0, 10)
	path, _ := s.activeSegment()
	// Record 4 loses its identity (its header's queue offset) and its unit.
	corruptFile(t, path, res[4].PhysicalOffset+protocol.OffQueueOffset, 8, 0x11)
	p := s.partition("x", 0, false)
	if err := s.writeRepairedUnits(p, 4, make([]byte, unitSize), []bool{true}); err != nil { // zero it where it lives
		t.Fatal(err)
	}
	recs := readAll(t, s, "x", 0, 0, nil)
	if len(recs) != 9 || recs[4].QueueOffset != 5 {
		t.Fatalf("read %d records", len(recs))
	}
	if !containsAll(lb.String(), "holds no record", "from=4", "to=5") {
		t.Fatalf("skip not logged: %s", lb.String())
	}
	if _, err := s.Read("x", 0, 3, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryKeepsUnitsAfterDamagedUnit: crash recovery finds a
// partition's index end with a binary search that used to trust every unit
// it probed. One damaged unit (a stray write into the index file) on the
// search path made it cut every later unit; those records lie below the
// checkpoint's dispatched position, so they were not re-dispatched:
// acknowledged messages vanished from the partition, its max offset dropped,
// new puts reused queue offsets already in the log, and the report counted
// the cut units as re-indexed. A damaged unit is now judged by the next good
// one, and a damaged run that ends the kept units is rebuilt from the log.
func TestRecoveryKeepsUnitsAfterDamagedUnit(t *testing.T) {
	const n = 200 // 64 units per index file: files at units 0, 64, 128, 192
	for _, tc := range []struct {
		name string
		q    int64 // the damaged unit
		// damage returns the bytes written over unit q (units[i] is unit i).
		damage  func(units [][]byte) []byte
		rebuilt bool // recovery rebuilds it (it ends the kept units)
	}{
		// Unit 128 is the search's first probe (units [0, 256)): point it far away.
		{"first-probe-far-away", 128, func(u [][]byte) []byte {
			b := append([]byte(nil), u[128]...)
			copy(b, []byte{0, 0, 0x10, 0, 0, 0, 0, 0}) // phys = 1<<44
			return b
		}, false},
		// The last unit: implausible.
		{"last-far-away", n - 1, func(u [][]byte) []byte {
			b := append([]byte(nil), u[n-1]...)
			copy(b, []byte{0, 0, 0x10, 0, 0, 0, 0, 0})
			return b
		}, true},
		// The last unit: plausible, but it names the previous record.
		{"last-names-another-record", n - 1, func(u [][]byte) []byte { return u[n-2] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tornConfig(t)
			res := fillTorn(t, cfg, n)
			ixDir := filepath.Join(cfg.Dir, "index", "torn", "0")
			units := make([][]byte, n)
			for q := range units {
				f, err := os.Open(filepath.Join(ixDir, segmentName(int64(q)/64*64*unitSize)))
				if err != nil {
					t.Fatal(err)
				}
				units[q] = make([]byte, unitSize)
				if _, err := f.ReadAt(units[q], int64(q)%64*unitSize); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			f, err := os.OpenFile(filepath.Join(ixDir, segmentName(tc.q/64*64*unitSize)), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(tc.damage(units), tc.q%64*unitSize); err != nil {
				t.Fatal(err)
			}
			f.Close()
			var lb logBuf
			cfg.Logger = newTestLogger(&lb)
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			if got := s.MaxOffset("torn", 0); got != n {
				t.Errorf("MaxOffset after recovery = %d, want %d (units cut at the damaged one)\nlog:\n%s", got, n, lb.String())
			}
			for _, q := range []int64{150, n - 1} {
				r, err := s.Read("torn", 0, q, 1<<20, nil)
				if err != nil {
					t.Fatalf("Read %d: %v", q, err)
				}
				if r.Count == 0 {
					t.Errorf("Read at offset %d (acknowledged, in the log) = status %v, no records\nlog:\n%s", q, r.Status, lb.String())
				} else if id := int64(binary.BigEndian.Uint64(r.Bufs[0][protocol.OffMsgID:])); id != res[q].MsgID {
					t.Errorf("Read at offset %d: msgId %x, want %x", q, id, res[q].MsgID)
				}
				r.Release()
			}
			if r := mustAppend(t, s, &Message{Topic: "torn", Partition: 0, Data: []byte("new")}); r.QueueOffset != n {
				t.Errorf("a new put got queue offset %d, already used by a record in the log (want %d)", r.QueueOffset, n)
			}
			log := lb.String()
			if strings.Contains(log, "unitsCut") || strings.Contains(log, "unitsDamaged") {
				t.Errorf("recovery reports cut units; nothing should be cut:\n%s", log)
			}
			if got := strings.Contains(log, "recovery: index units failed verification; rebuilt them from the commit log"); got != tc.rebuilt {
				t.Errorf("recovery log says it rebuilt units: %v, want %v\nlog:\n%s", got, tc.rebuilt, log)
			}
		})
	}
}
