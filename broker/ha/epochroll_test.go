package ha_test

import (
	"context"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// A promoted node's epoch begins at its write position before the promotion
// (epoch.go, Promote), not at its epoch record: when the record does not fit
// in the rest of the active segment the log rolls first, the history leaves
// the former master's at the BLANK, and the record lands at the next
// segment's base. A former master that wrote a record into that gap is told
// its epoch ends at the BLANK and cuts the record.
func TestDemoteTruncatesDivergenceAtSegmentRoll(t *testing.T) {
	// The former master's log ends at the next segment's base.
	testDivergenceAtSegmentRoll(t, 0)
}

// The same, with the former master's log ending inside the new master's
// BLANK: it is told to cut at the BLANK too (not streamed from a position
// inside it, which is no record boundary of the new master's log).
func TestDemoteTruncatesDivergenceInsideBlank(t *testing.T) {
	testDivergenceAtSegmentRoll(t, 8)
}

// testDivergenceAtSegmentRoll: a master a and its slave b; a's active
// segment has the size of one small record plus gap bytes left when b has
// caught up (too few for b's epoch record); b stops, a writes one small
// record (never replicated) and stops; b is promoted, takes a put; a
// rejoins as b's slave and must end with b's log.
func testDivergenceAtSegmentRoll(t *testing.T, gap int64) {
	const seg = 1 << 20
	aDir := t.TempDir()
	a := brokertest.RunBroker(t, brokertest.Options{Dir: aDir, SegSize: seg})
	b := brokertest.RunBroker(t, brokertest.Options{SegSize: seg, ExtraINI: slaveINI(0, a.Addr, "")})
	waitFor(t, "b linked", func() bool {
		rs := a.HA.Replicas()
		return len(rs) == 1 && rs[0].Connected
	})
	app := func(data string) int64 {
		t.Helper()
		before := a.Store.WritePos()
		if _, err := a.Store.Append(&store.Message{Topic: "test", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
		return a.Store.WritePos() - before
	}
	small := app("x") // the size of the divergent record
	rem := func() int64 { return seg - a.Store.WritePos()%seg }
	want := small + gap // left in the segment once the filler is written
	for {
		need := rem() - want
		if need >= small && need < 400<<10 {
			break
		}
		app(strings.Repeat("f", 100<<10))
	}
	need := rem() - want
	if got := app(strings.Repeat("g", int(need-small+1))); got != need {
		t.Fatalf("filler of %d bytes, want %d", got, need)
	}
	if rem() != want {
		t.Fatalf("setup: %d left in the segment, want %d", rem(), want)
	}
	waitFor(t, "b caught up", func() bool { return b.Store.FlushedPos() == a.Store.WritePos() })
	y := a.Store.WritePos()
	b.Stop()
	// a writes one record into the rest of the segment (never replicated).
	app("x")
	aStore := a.Store.Dir()
	if a.Store.WritePos() != y+small || (y+small+gap)%seg != 0 {
		t.Fatalf("setup: a ends at %d", a.Store.WritePos())
	}
	a.Stop()
	if gap > 0 {
		// a's machine crashed: its log ends right after that record, inside
		// what becomes b's BLANK (what its services wrote at its stop, at
		// the next segment's base, is lost).
		if err := store.ScheduleReset(aStore, store.ResetTruncate, y+small); err != nil {
			t.Fatal(err)
		}
	}

	// b comes back as a slave of nobody and is promoted (the election's path).
	b2 := brokertest.RunBroker(t, brokertest.Options{Dir: b.Dir, SegSize: seg, ExtraINI: slaveINI(0, "127.0.0.1:1", "")})
	if err := b2.HA.Promote(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	c, ok, err := b2.Store.ReadRaw(y, 1<<20)
	if err != nil || !ok {
		t.Fatalf("reading b2 at %d: %v %v", y, ok, err)
	}
	_, magic, _ := protocol.PeekRecord(c.Buf)
	c.Release()
	if magic != protocol.BlankMagic {
		t.Fatalf("setup: the epoch record fitted at %d (no roll)", y)
	}
	cb := b2.Dial()
	cb.Put("test", 1, "new master", 1)
	cb.Close()

	ao := brokertest.Options{Dir: aDir, SegSize: seg, ExtraINI: slaveINI(1, b2.Addr, "")}
	a2, restarts := restartOnRequest(t, ao, func(s *brokertest.Broker) bool {
		return s.Store.FlushedPos() == b2.Store.VisiblePos()
	})
	if restarts != 1 {
		t.Errorf("a restarted %d times, want 1 (one truncation)", restarts)
	}
	end := b2.Store.VisiblePos()
	if x, z := rangeSum(t, b2.Dir, y, y+small), rangeSum(t, a2.Dir, y, y+small); x != z {
		t.Fatalf("after %d restarts a's log differs from the new master's over [%d, %d): the record a wrote after the "+
			"divergence point %d was not cut", restarts, y, y+small, y)
	}
	if x, z := rangeSum(t, b2.Dir, 0, end), rangeSum(t, a2.Dir, 0, end); x != z {
		t.Fatal("logs differ")
	}
}
