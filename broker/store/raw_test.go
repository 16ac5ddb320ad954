package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// copyRaw ships everything visible on m from pos to r, as a slave follower
// does, and returns the new position.
func copyRaw(t *testing.T, m, r *Store, pos int64, max int) int64 {
	t.Helper()
	for {
		c, ok, err := m.ReadRaw(pos, max)
		if err != nil {
			t.Fatalf("ReadRaw %d: %v", pos, err)
		}
		if !ok {
			break
		}
		if err := r.AppendRaw(c.Pos, c.Buf); err != nil {
			t.Fatalf("AppendRaw %d (%d bytes): %v", c.Pos, len(c.Buf), err)
		}
		pos = c.Next
		c.Release()
	}
	if _, err := r.SyncRaw(); err != nil {
		t.Fatal(err)
	}
	return pos
}

// logBytes concatenates the bytes of s's segments below end.
func logBytes(t *testing.T, s *Store, end int64) []byte {
	t.Helper()
	var out []byte
	for _, g := range s.clog.segments() {
		if g.base >= end {
			break
		}
		out = append(out, g.data[:min(g.size, end-g.base)]...)
	}
	return out
}

// A replica built with ReadRaw/AppendRaw holds the master's bytes at the
// same offsets across segment rolls, and serves the same queue offsets,
// msgIds and key lookups; local appends on it are refused.
func TestRawReplicaIdentical(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			mc, rc := testConfig(t, ""), testConfig(t, "")
			if sync {
				mc.UnflushThreshold, rc.UnflushThreshold = 0, 0
			}
			m, r := mustOpen(t, mc), mustOpen(t, rc)
			defer mustClose(t, m)
			defer mustClose(t, r)
			r.SetReplica(true)
			if _, err := r.Append(&Message{Topic: "a", Data: []byte("x")}); !errors.Is(err, ErrReplica) {
				t.Fatalf("append on a replica: %v, want ErrReplica", err)
			}
			var acked []AppendResult
			pos := int64(0)
			for i := 0; i < 900; i++ { // ~ 5 segments of 64 KiB
				props := []byte(fmt.Sprintf("keys=k%d", i))
				acked = append(acked, mustAppend(t, m, &Message{Topic: fmt.Sprintf("t%d", i%3), Partition: int32(i % 2),
					Properties: props, Data: body("t", 0, i, 300+i%97)}))
				if i%100 == 99 {
					_ = m.WriteOut()
					pos = copyRaw(t, m, r, pos, 4096+i*10)
				}
			}
			_ = m.WriteOut()
			pos = copyRaw(t, m, r, pos, 1<<20)
			if pos != m.WritePos() || r.WritePos() != pos {
				t.Fatalf("copied to %d, master at %d, replica at %d", pos, m.WritePos(), r.WritePos())
			}
			if a, b := logBytes(t, m, pos), logBytes(t, r, pos); !bytes.Equal(a, b) {
				t.Fatalf("logs differ (%d vs %d bytes)", len(a), len(b))
			}
			if len(r.clog.segments()) < 4 {
				t.Fatalf("only %d segments: the test did not roll", len(r.clog.segments()))
			}
			last := acked[len(acked)-1]
			waitReadable(t, r, "t2", 1, m.MaxOffset("t2", 1))
			for _, a := range []AppendResult{acked[0], acked[417], last} {
				res, err := r.ReadByID(a.MsgID)
				if err != nil {
					t.Fatalf("ReadByID %x on the replica: %v", a.MsgID, err)
				}
				res.Release()
			}
			for tp := 0; tp < 3; tp++ {
				for p := int32(0); p < 2; p++ {
					topic := fmt.Sprintf("t%d", tp)
					if a, b := m.MaxOffset(topic, p), r.MaxOffset(topic, p); a != b {
						t.Fatalf("%s/%d: max offset %d on the master, %d on the replica", topic, p, a, b)
					}
				}
			}
			// Catch-up from the middle, and the replica's errors.
			if err := r.AppendRaw(pos-1, []byte("junk")); !errors.Is(err, ErrRawPosition) {
				t.Fatalf("AppendRaw at a wrong position: %v", err)
			}
			if err := r.AppendRaw(pos, []byte("junk-junk-junk")); !errors.Is(err, ErrRawBad) {
				t.Fatalf("AppendRaw of junk: %v", err)
			}
			if _, _, err := m.ReadRaw(m.VisiblePos()+1, 100); !errors.Is(err, ErrRawPosition) {
				t.Fatalf("ReadRaw past the end: %v", err)
			}
		})
	}
}

// WaitVisible wakes a streamer when new bytes become visible.
func TestRawWaitVisible(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	ch := s.WaitVisible(s.VisiblePos())
	select {
	case <-ch:
		t.Fatal("woken before anything was appended")
	default:
	}
	mustAppend(t, s, &Message{Topic: "a", Data: []byte("x")})
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("not woken")
	}
}

// A truncate marker cuts the log at a record boundary at the next Open
// (logging what was cut) and the indexes follow; a reset marker restarts an
// empty log at the given segment base.
func TestRawTruncateAndReset(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	var lb logBuf
	cfg.Logger = newTestLogger(&lb)
	s := mustOpen(t, cfg)
	var acked []AppendResult
	for i := 0; i < 400; i++ {
		acked = append(acked, mustAppend(t, s, &Message{Topic: "a", Data: body("a", 0, i, 500)}))
	}
	cut := acked[250].PhysicalOffset
	if err := ScheduleReset(dir, ResetTruncate, cut); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	if s.WritePos() != cut || s.MaxOffset("a", 0) != 250 {
		t.Fatalf("after truncation: write position %d (want %d), max offset %d (want 250)", s.WritePos(), cut, s.MaxOffset("a", 0))
	}
	if !strings.Contains(lb.String(), "messagesCut=150") {
		t.Fatalf("truncation not logged with its message count:\n%s", lb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, resetMarker)); !os.IsNotExist(err) {
		t.Fatalf("marker still there: %v", err)
	}
	a := mustAppend(t, s, &Message{Topic: "a", Data: []byte("after")})
	if a.QueueOffset != 250 || a.PhysicalOffset != cut {
		t.Fatalf("append after truncation at q=%d phys=%d", a.QueueOffset, a.PhysicalOffset)
	}
	base := 5 * cfg.SegmentSize
	if err := ScheduleReset(dir, ResetWipe, base); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.WritePos() != base || s.MinPos() != base || s.MaxOffset("a", 0) != 0 {
		t.Fatalf("after reset: write %d min %d max offset %d", s.WritePos(), s.MinPos(), s.MaxOffset("a", 0))
	}
	// A damaged marker is ignored.
	if err := os.WriteFile(filepath.Join(dir, resetMarker), []byte("truncate 12 34\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := PendingReset(dir); ok {
		t.Fatal("damaged marker accepted")
	}
}

// AppendRaw checks a whole run before it appends any of it: a run with one
// damaged record appends nothing; the intact run then appends every record,
// here to more partitions than a run tracks by a scan (rawRunScan), each
// partition's next queue offset following its records.
func TestRawRunAtomicAndManyPartitions(t *testing.T) {
	m, r := mustOpen(t, testConfig(t, "")), mustOpen(t, testConfig(t, ""))
	defer mustClose(t, m)
	defer mustClose(t, r)
	r.SetReplica(true)
	const parts = 3 * rawRunScan
	var acked []AppendResult
	for i := 0; i < 2*parts; i++ {
		acked = append(acked, mustAppend(t, m, &Message{Topic: "p", Partition: int32(i % parts), Data: body("p", 0, i, 50)}))
	}
	_ = m.WriteOut()
	c, ok, err := m.ReadRaw(0, 1<<20)
	if err != nil || !ok || c.Next != m.WritePos() {
		t.Fatalf("ReadRaw: ok %v, err %v, next %d of %d", ok, err, c.Next, m.WritePos())
	}
	defer c.Release()
	bad := bytes.Clone(c.Buf)
	mid := acked[len(acked)/2]
	bad[mid.PhysicalOffset+int64(mid.Size)-1] ^= 0xff // the last data byte: the CRC fails
	if err := r.AppendRaw(0, bad); !errors.Is(err, ErrRawBad) {
		t.Fatalf("AppendRaw of a damaged run: %v, want ErrRawBad", err)
	}
	if r.WritePos() != 0 || r.MaxOffset("p", 0) != 0 {
		t.Fatalf("a refused run left write position %d, max offset %d", r.WritePos(), r.MaxOffset("p", 0))
	}
	if err := r.AppendRaw(0, c.Buf); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SyncRaw(); err != nil {
		t.Fatal(err)
	}
	if r.WritePos() != m.WritePos() {
		t.Fatalf("replica at %d, master at %d", r.WritePos(), m.WritePos())
	}
	for p := int32(0); p < parts; p++ {
		if got := r.MaxOffset("p", p); got != 2 {
			t.Fatalf("partition %d: max offset %d on the replica, want 2", p, got)
		}
	}
	waitReadable(t, r, "p", parts-1, 2)
	if a, b := logBytes(t, m, m.WritePos()), logBytes(t, r, m.WritePos()); !bytes.Equal(a, b) {
		t.Fatal("logs differ")
	}
}

// A master may fill a segment to its last byte (a record of exactly the
// room left: no BLANK follows), and its next record then starts the next
// segment. A replica whose write position is exactly at its segment's end
// rolls for that record as the master did (it used to refuse it as "does
// not fit the 0 left in the segment", and the slave's link failed on every
// reconnect: seen in a kill -9 failover round).
func TestRawReplicaSegmentFilledExactly(t *testing.T) {
	mc, rc := testConfig(t, ""), testConfig(t, "")
	m, r := mustOpen(t, mc), mustOpen(t, rc)
	defer mustClose(t, m)
	defer mustClose(t, r)
	r.SetReplica(true)
	seg := mc.SegmentSize
	for i := 0; seg-m.WritePos() > 2000; i++ {
		mustAppend(t, m, &Message{Topic: "t", Data: body("t", 0, i, 200)})
	}
	rem := int(seg - m.WritePos())
	data := rem - protocol.RecordSize(len("t"), 0, 0)
	mustAppend(t, m, &Message{Topic: "t", Data: bytes.Repeat([]byte("e"), data)})
	if m.WritePos() != seg {
		t.Fatalf("the master's write position is %d, want the segment's end %d", m.WritePos(), seg)
	}
	_ = m.WriteOut()
	pos := copyRaw(t, m, r, 0, 1<<20)
	if pos != seg || r.WritePos() != seg {
		t.Fatalf("copied to %d, replica at %d, want %d", pos, r.WritePos(), seg)
	}
	next := mustAppend(t, m, &Message{Topic: "t", Data: []byte("next segment")})
	if next.PhysicalOffset != seg {
		t.Fatalf("the next record is at %d, want %d", next.PhysicalOffset, seg)
	}
	_ = m.WriteOut()
	pos = copyRaw(t, m, r, pos, 1<<20)
	if pos != m.WritePos() || r.WritePos() != pos {
		t.Fatalf("copied to %d, master at %d, replica at %d", pos, m.WritePos(), r.WritePos())
	}
	if a, b := logBytes(t, m, pos), logBytes(t, r, pos); !bytes.Equal(a, b) {
		t.Fatalf("logs differ (%d vs %d bytes)", len(a), len(b))
	}
	waitReadable(t, r, "t", 0, m.MaxOffset("t", 0))
	res, err := r.ReadByID(next.MsgID)
	if err != nil {
		t.Fatalf("ReadByID of the next segment's record on the replica: %v", err)
	}
	res.Release()
}
