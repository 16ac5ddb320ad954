package store

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

func TestAppendAssignsOffsetsIDsAndTimes(t *testing.T) {
	cfg := testConfig(t, "")
	var clock atomic.Int64
	clock.Store(1_000_000)
	cfg.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	s := mustOpen(t, cfg)
	defer mustClose(t, s)

	var last int64
	for i := 0; i < 30; i++ {
		if i == 10 {
			clock.Store(500_000) // clock goes backwards: storeTime must not
		}
		if i == 20 {
			clock.Store(2_000_000)
		}
		m := &Message{Topic: "orders", Partition: int32(i % 2), Flag: 5, SysFlag: 3, ReconsumeTimes: 2,
			Properties: []byte("tag=x"), Data: body("orders", int32(i%2), i, 40)}
		if i == 7 {
			m.BornTime = 42
		}
		r := mustAppend(t, s, m)
		if r.QueueOffset != int64(i/2) {
			t.Fatalf("msg %d: queue offset %d", i, r.QueueOffset)
		}
		if r.MsgID != 7<<48|r.PhysicalOffset {
			t.Fatalf("msg %d: msgId %x phys %d", i, r.MsgID, r.PhysicalOffset)
		}
		if r.StoreTime < last {
			t.Fatalf("storeTime went backwards: %d < %d", r.StoreTime, last)
		}
		last = r.StoreTime
		res, err := s.ReadByID(r.MsgID)
		if err != nil {
			t.Fatalf("ReadByID: %v", err)
		}
		rec, n, err := protocol.DecodeRecord(res.Bufs[0], 0)
		if err != nil || n != r.Size {
			t.Fatalf("decode: %v %d", err, n)
		}
		born := r.StoreTime
		if i == 7 {
			born = 42
		}
		if rec.Flag != 5 || rec.SysFlag != 3 || rec.ReconsumeTimes != 2 || rec.BornTime != born ||
			rec.StoreTime != r.StoreTime || string(rec.Properties) != "tag=x" || rec.QueueOffset != r.QueueOffset ||
			!bytes.Equal(rec.Data, m.Data) || string(rec.Topic) != "orders" || rec.Partition != m.Partition {
			t.Fatalf("record %d mismatch: %+v", i, rec)
		}
		res.Release()
	}
	if s.MaxOffset("orders", 0) != 15 || s.MaxOffset("orders", 1) != 15 || s.MaxOffset("nope", 0) != 0 {
		t.Fatal("max offsets")
	}
}

func TestAppendValidation(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.MaxMessageSize = 1000
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	cases := []struct {
		m    Message
		want error
	}{
		{Message{Topic: ""}, ErrBadTopic},
		{Message{Topic: strings.Repeat("x", 256)}, ErrBadTopic},
		{Message{Topic: ".."}, ErrBadTopic},
		{Message{Topic: "a/b"}, ErrBadTopic},
		{Message{Topic: "ok", Partition: -1}, ErrBadPartition},
		{Message{Topic: "ok", Data: make([]byte, 1001)}, ErrMessageTooLarge},
		{Message{Topic: "ok", Properties: make([]byte, 70000)}, ErrMessageTooLarge},
	}
	for _, c := range cases {
		if _, err := s.Append(&c.m); !errors.Is(err, c.want) {
			t.Errorf("%q/%d: got %v want %v", c.m.Topic, c.m.Partition, err, c.want)
		}
	}
	// A record larger than a segment.
	cfg2 := testConfig(t, "")
	cfg2.SegmentSize = 4096
	s2 := mustOpen(t, cfg2)
	defer mustClose(t, s2)
	if _, err := s2.Append(&Message{Topic: "ok", Data: make([]byte, 4096)}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("got %v", err)
	}
	// Exactly one segment is fine.
	if _, err := s2.Append(&Message{Topic: "ok", Data: make([]byte, 4096-protocol.RecordSize(2, 0, 0))}); err != nil {
		t.Fatal(err)
	}
}

// checkSegments verifies the on-disk invariant of every segment: records
// from offset 0, then a BLANK to the end (full segments) or zeros (active).
func checkSegments(t *testing.T, s *Store) (records int) {
	t.Helper()
	if _, err := s.clog.writeStaged(s.clog.written.Load()); err != nil { // everything staged into the files
		t.Fatal(err)
	}
	segs := s.clog.segs.Load().segs
	for i, g := range segs {
		off := int64(0)
		for off < g.size {
			size, magic, ok := protocol.PeekRecord(g.data[off:])
			if !ok {
				t.Fatalf("segment %d: %d bytes left at %d (< 8)", i, g.size-off, off)
			}
			if magic == protocol.BlankMagic {
				if off+int64(size) != g.size {
					t.Fatalf("segment %d: blank at %d of size %d does not end the segment (%d)", i, off, size, g.size)
				}
				if i == len(segs)-1 {
					t.Fatalf("active segment ends with a blank")
				}
				break
			}
			if magic == 0 && size == 0 {
				if i != len(segs)-1 {
					t.Fatalf("segment %d: zeros at %d in a full segment", i, off)
				}
				break
			}
			if _, n, err := protocol.DecodeRecord(g.data[off:], 0); err != nil {
				t.Fatalf("segment %d: record at %d: %v", i, off, err)
			} else {
				off += int64(n)
				records++
			}
			if rem := g.size - off; rem > 0 && rem < protocol.BlankMinSize {
				t.Fatalf("segment %d: %d bytes left after a record", i, rem)
			}
		}
	}
	return records
}

func TestRollAtSegmentEndOddSizes(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.IndexFileSize = 256
	s := mustOpen(t, cfg)
	over := protocol.RecordSize(1, 0, 0) // topic "r"
	rng := rand.New(rand.NewSource(1))
	var sent [][]byte
	add := func(n int) {
		d := body("r", 0, len(sent), n)[:n]
		mustAppend(t, s, &Message{Topic: "r", Data: d})
		sent = append(sent, d)
	}
	for i := 0; i < 300; i++ {
		add(rng.Intn(900))
	}
	// Leave exactly 0..9 bytes at the end of a segment on purpose.
	for rem := 0; rem < 10; rem++ {
		_, off := s.activeSegment()
		left := int(cfg.SegmentSize - off)
		if left < over+rem+over {
			add(0)
			_, off = s.activeSegment()
			left = int(cfg.SegmentSize - off)
		}
		segBefore, _ := s.activeSegment()
		add(left - rem - over) // leaves rem bytes
		segAfter, offAfter := s.activeSegment()
		switch {
		case rem == 0 && (segAfter != segBefore || offAfter != cfg.SegmentSize):
			t.Fatalf("exact fit: expected a full segment, got %s@%d", segAfter, offAfter)
		case rem > 0 && rem < protocol.BlankMinSize && segAfter == segBefore:
			t.Fatalf("rem %d: record should have rolled", rem)
		case rem >= protocol.BlankMinSize && (segAfter != segBefore || cfg.SegmentSize-offAfter != int64(rem)):
			t.Fatalf("rem %d: should fit with %d left, got %d", rem, rem, cfg.SegmentSize-offAfter)
		}
		add(rng.Intn(50))
	}
	if n := checkSegments(t, s); n != len(sent) {
		t.Fatalf("segments hold %d records, sent %d", n, len(sent))
	}
	if st := s.Stats(); st.SegmentRolls < 20 {
		t.Fatalf("only %d rolls", st.SegmentRolls)
	}
	waitReadable(t, s, "r", 0, int64(len(sent)))
	recs := readAll(t, s, "r", 0, 0, nil)
	if len(recs) != len(sent) {
		t.Fatalf("read %d of %d", len(recs), len(sent))
	}
	for i, r := range recs {
		if !bytes.Equal(r.Data, sent[i]) || r.QueueOffset != int64(i) {
			t.Fatalf("record %d differs", i)
		}
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	if got := len(readAll(t, s, "r", 0, 0, nil)); got != len(sent) {
		t.Fatalf("after reopen read %d of %d", got, len(sent))
	}
	checkSegments(t, s)
}

func TestNextSegmentPreallocated(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	next := filepath.Join(cfg.Dir, "commitlog", segmentName(4096))
	waitFor(t, "next segment preallocated", func() bool {
		fi, err := os.Stat(next)
		return err == nil && fi.Size() == 4096
	})
	for i := 0; i < 40; i++ {
		mustAppend(t, s, &Message{Topic: "p", Data: make([]byte, 200)})
	}
	// After the roll into 4096 the one after is prepared ahead of time.
	waitFor(t, "following segment preallocated", func() bool {
		_, err := os.Stat(filepath.Join(cfg.Dir, "commitlog", segmentName(3*4096)))
		return err == nil
	})
}

func TestAppendAsyncZeroAllocs(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	m := &Message{Topic: "alloc", Data: make([]byte, 100), Properties: []byte("tag=a")}
	s.AppendAsync(m) // create the partition
	allocs := testing.AllocsPerRun(2000, func() {
		if _, _, err := s.AppendAsync(m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendAsync allocates %.2f times per call", allocs)
	}
}

func TestGroupCommitSharesFsync(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	const writers, each = 32, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := s.Append(&Message{Topic: "g", Partition: int32(w % 4), Data: body("g", 0, i, 50)})
				if err != nil {
					t.Error(err)
					return
				}
				if s.clog.flushed.Load() < r.PhysicalOffset+int64(r.Size) {
					t.Error("Append returned before its record was flushed")
					return
				}
			}
		}(w)
	}
	wg.Wait()
	st := s.Stats()
	if st.PutMessages != writers*each {
		t.Fatalf("put %d", st.PutMessages)
	}
	if st.GroupCommits >= st.PutMessages {
		t.Fatalf("no group commit: %d rounds for %d messages", st.GroupCommits, st.PutMessages)
	}
	t.Logf("%d messages in %d rounds (%d fsyncs)", st.PutMessages, st.GroupCommits, st.Fsyncs)
}

func TestAppendAsyncSharedFlush(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	release := make(chan struct{})
	var block atomic.Bool
	cfg.hooks = &faultHooks{onFdatasync: func(string) error {
		if block.Load() {
			<-release
		}
		return nil
	}}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	block.Store(true)
	r1, f1, err := s.AppendAsync(&Message{Topic: "v", Data: []byte("one")})
	if err != nil || f1 == nil {
		t.Fatal(err)
	}
	// The flusher is now stuck in fdatasync for round 1; these two share round 2.
	waitFor(t, "round 1 taken by the flusher", func() bool {
		s.clog.mu.Lock()
		defer s.clog.mu.Unlock()
		return s.clog.pending == nil
	})
	_, f2, _ := s.AppendAsync(&Message{Topic: "v", Data: []byte("two")})
	_, f3, _ := s.AppendAsync(&Message{Topic: "v", Data: []byte("three")})
	if f2 != f3 || f2 == f1 {
		t.Fatal("appends of one round must share one *Flush")
	}
	// Not durable yet: nothing is visible (sync mode).
	select {
	case <-f1.Done():
		t.Fatal("round 1 done before fsync")
	default:
	}
	if s.MaxOffset("v", 0) != 3 {
		t.Fatal("max offset is assigned at append time")
	}
	r, err := s.Read("v", 0, 0, 1000, nil)
	if err != nil || r.Status != ReadNoMessage {
		t.Fatalf("read before durable: %v %v", err, r.Status)
	}
	r.Release()
	if _, err := s.ReadByID(r1.MsgID); err != ErrNotFound {
		t.Fatalf("ReadByID before durable: %v", err)
	}
	block.Store(false)
	close(release)
	if err := f1.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := f3.Wait(); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, s, "v", 0, 3)
	if got := len(readAll(t, s, "v", 0, 0, nil)); got != 3 {
		t.Fatalf("read %d", got)
	}
}

func TestAsyncFlushThresholdAndInterval(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 10
	cfg.UnflushInterval = time.Hour
	s := mustOpen(t, cfg)
	for i := 0; i < 9; i++ {
		_, f, err := s.AppendAsync(&Message{Topic: "a", Data: []byte("x")})
		if err != nil || f != nil {
			t.Fatalf("async append: %v %v", f, err)
		}
	}
	// Visible at once in async mode, before any fsync.
	waitReadable(t, s, "a", 0, 9)
	if s.clog.flushed.Load() != 0 {
		t.Fatal("flushed before the threshold")
	}
	s.AppendAsync(&Message{Topic: "a", Data: []byte("x")})
	waitFor(t, "threshold flush", func() bool { return s.clog.flushed.Load() == s.clog.written.Load() })
	mustClose(t, s)

	cfg = testConfig(t, "")
	cfg.UnflushThreshold = 1 << 30
	cfg.UnflushInterval = 20 * time.Millisecond
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	s.AppendAsync(&Message{Topic: "a", Data: []byte("x")})
	waitFor(t, "interval flush", func() bool { return s.clog.flushed.Load() == s.clog.written.Load() })
}

func TestRollWaitsForSlowPreallocation(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4096
	cfg.UnflushThreshold = 0
	var slow atomic.Bool
	cfg.hooks = &faultHooks{onFallocate: func(string) error {
		if slow.Load() {
			time.Sleep(30 * time.Millisecond)
		}
		return nil
	}}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	slow.Store(true)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if _, err := s.Append(&Message{Topic: "slow", Partition: int32(w), Data: make([]byte, 300)}); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	// While appenders wait for a segment, the append lock is free: Stats
	// (which takes it) keeps answering.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		_ = s.Stats()
		select {
		case <-done:
			if n := checkSegments(t, s); n != 160 {
				t.Fatalf("%d records", n)
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// refusingGate fails every round it is given (like a demoted master's).
type refusingGate struct{ held atomic.Int32 }

func (g *refusingGate) Hold(end int64, release func(error)) {
	g.held.Add(1)
	release(errors.New("not replicated"))
}

// A round opened while the replication gate was installed is held by it
// even when the gate is removed (demotion) before the round's fsync ends:
// the flusher must not answer it as durable-and-replicated.
func TestRoundKeepsGateRemovedDuringFsync(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	release := make(chan struct{})
	var block atomic.Bool
	cfg.hooks = &faultHooks{onFdatasync: func(string) error {
		if block.Load() {
			<-release
		}
		return nil
	}}
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	g := &refusingGate{}
	s.SetReplicationGate(g)
	block.Store(true)
	_, f, err := s.AppendAsync(&Message{Topic: "v", Data: []byte("one")})
	if err != nil || f == nil {
		t.Fatal(err)
	}
	waitFor(t, "the round taken by the flusher", func() bool {
		s.clog.mu.Lock()
		defer s.clog.mu.Unlock()
		return s.clog.pending == nil
	})
	s.SetReplicationGate(nil) // demoted while the round syncs
	block.Store(false)
	close(release)
	if err := f.Wait(); err == nil {
		t.Fatal("a round opened under the gate completed without it after the gate was removed")
	}
	if g.held.Load() != 1 {
		t.Fatalf("gate held %d rounds, want 1", g.held.Load())
	}
}

// A flusher that waits for a round's expected members writes out what the
// members appended so far meanwhile (flush.go, gatherRound), instead of
// writing all of the round after the wait, just before its fdatasync.
func TestGatheringFlusherWritesOutStaged(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 0
	cfg.SegmentSize = 16 << 20 // no roll (a roll writes with the append lock held)
	var s *Store
	var gathering, written atomic.Int64
	cfg.hooks = &faultHooks{onLogWrite: func(string) error {
		written.Add(1)
		s.clog.mu.Lock()
		if s.clog.roundTarget > 0 {
			gathering.Add(1)
		}
		s.clog.mu.Unlock()
		return nil
	}}
	s = mustOpen(t, cfg)
	defer mustClose(t, s)
	run := func(n, size int) *Flush {
		msgs := make([]Message, n)
		for i := range msgs {
			msgs[i] = Message{Topic: "g", Data: body("g", 0, i, size)}
		}
		var r RunResult
		f, err := s.AppendRun(msgs, &r)
		if err != nil || f == nil {
			t.Fatalf("AppendRun: %v, %v", f, err)
		}
		return f
	}
	// Round 1: 2,000 messages, so the flusher expects 2,000 back.
	if err := run(2000, 20).Wait(); err != nil {
		t.Fatal(err)
	}
	w1 := written.Load()
	// Round 2: 1,000 messages (~130 KB staged): the flusher gathers (it
	// expects 1,000 more, which never come) and writes these out meanwhile.
	if err := run(1000, 100).Wait(); err != nil {
		t.Fatal(err)
	}
	if written.Load() == w1 || gathering.Load() == 0 {
		t.Fatalf("%d commit-log writes in round 2, %d while the flusher gathered; want at least one while gathering", written.Load()-w1, gathering.Load())
	}
	r, err := s.Read("g", 0, 2000, 1<<20, nil)
	if err != nil || r.Status != ReadFound {
		t.Fatalf("read: %v %v", r.Status, err)
	}
	defer r.Release()
	it := protocol.NewRecordIterator(bytes.Join(r.Bufs, nil))
	n := 0
	for ; it.Next(); n++ {
		if rec := it.Record(); rec.QueueOffset != int64(2000+n) || !bytes.Equal(rec.Data, body("g", 0, n, 100)) {
			t.Fatalf("record %d: offset %d %q", n, rec.QueueOffset, rec.Data)
		}
	}
	if n != 1000 {
		t.Fatalf("%d records read back, want 1000", n)
	}
}
