package tx

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// openManager opens a store in a temporary directory and a table on it with
// cfg (Store and Logger filled in); both are closed when the test ends.
func openManager(t *testing.T, cfg Config) (*store.Store, *Manager) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(store.Config{Dir: t.TempDir(), SegmentSize: 1 << 20, IndexFileSize: 1 << 12, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = st, log
	m, err := Open(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	return st, m
}

// A BEGIN without puts holds no bytes, so MaxHeldBytes does not bound it:
// the open transactions are counted, per connection and broker-wide, and a
// BEGIN beyond either cap is refused with ErrBusy. Finishing a transaction
// (rollback, prepare, timeout) makes room again; prepared ones do not
// count.
func TestOpenTransactionsBounded(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		_, m := openManager(t, Config{})
		s := m.NewSession(nil)
		defer s.Close()
		ok := 0
		for i := 0; i < 2*DefaultMaxOpenPerConn; i++ {
			if _, err := m.Command(s, "TX:s:"+strconv.Itoa(i), "BEGIN", 0, ""); err == nil {
				ok++
			} else if !errors.Is(err, ErrBusy) {
				t.Fatalf("BEGIN %d: %v, want ErrBusy", i, err)
			}
		}
		if ok != DefaultMaxOpenPerConn {
			t.Fatalf("%d local BEGINs accepted on one connection, want %d", ok, DefaultMaxOpenPerConn)
		}
		for i := 0; i < 2*DefaultMaxOpen; i++ {
			if _, err := m.Command(nil, fmt.Sprintf("XID:1:0a:%08x:q", i), "BEGIN", 0, ""); err == nil {
				ok++
			} else if !errors.Is(err, ErrBusy) {
				t.Fatalf("XA BEGIN %d: %v, want ErrBusy", i, err)
			}
		}
		if st := m.Stats(); ok != DefaultMaxOpen || st.Open != DefaultMaxOpen {
			t.Fatalf("%d BEGINs accepted, %d open, want %d", ok, st.Open, DefaultMaxOpen)
		}
	})
	t.Run("release", func(t *testing.T) {
		_, m := openManager(t, Config{MaxOpen: 5, MaxOpenPerConn: 3})
		a, b := m.NewSession(nil), m.NewSession(nil)
		defer a.Close()
		defer b.Close()
		begin := func(s *Session, key string) error {
			_, err := m.Command(s, key, "BEGIN", 0, "")
			return err
		}
		for _, k := range []string{"TX:a:1", "TX:a:2", "XID:1:0a:01:q"} { // XA ones begun on a count for a too
			if err := begin(a, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := begin(a, "TX:a:3"); !errors.Is(err, ErrBusy) {
			t.Fatalf("4th BEGIN on a connection capped at 3: %v", err)
		}
		if err := begin(a, "TX:a:1"); err != nil { // an existing one: a no-op, not refused
			t.Fatal(err)
		}
		if err := begin(b, "TX:b:1"); err != nil {
			t.Fatal(err)
		}
		if err := begin(nil, "XID:1:0a:02:q"); err != nil {
			t.Fatal(err)
		}
		if err := begin(b, "TX:b:2"); !errors.Is(err, ErrBusy) {
			t.Fatalf("6th BEGIN on a broker capped at 5: %v", err)
		}
		// A rollback makes room on its connection and the broker.
		if _, err := m.Command(a, "TX:a:2", "ROLLBACK", 0, ""); err != nil {
			t.Fatal(err)
		}
		if err := begin(a, "TX:a:3"); err != nil {
			t.Fatal(err)
		}
		// A prepared transaction is no longer counted.
		msg := store.Message{Topic: "t", Data: []byte("m")}
		if _, err := m.Put(a, []byte("XID:1:0a:01:q"), &msg); err != nil {
			t.Fatal(err)
		}
		if r, err := m.Command(a, "XID:1:0a:01:q", "PREPARE", 0, ""); err != nil || r.Body != "0" {
			t.Fatalf("prepare: %+v %v", r, err)
		}
		if err := begin(a, "TX:a:4"); err != nil {
			t.Fatal(err)
		}
		// A closed connection's local transactions are rolled back: room again.
		b.Close()
		if err := begin(nil, "XID:1:0a:03:q"); err != nil {
			t.Fatal(err)
		}
		if st := m.Stats(); st.Open != 5 || st.Prepared != 1 {
			t.Fatalf("stats %+v, want 5 open, 1 prepared", st)
		}
	})
}

// A PREPARE whose append fails answers XAER_RMERR and leaves the
// transaction open; take stopped its timeout timer for the append, and the
// failure must re-arm it, or the transaction and its held bytes stay until
// someone rolls it back by hand (every transactional put eventually 503).
// Here the run does not fit a segment. A put whose properties would not fit
// a prepared record (the rt=&rp=&xid= prefix added) is refused at once
// (400) instead of failing its PREPARE.
func TestFailedPrepareStillTimesOut(t *testing.T) {
	_, m := openManager(t, Config{MaxTimeout: 500 * time.Millisecond})
	long := []byte("k=" + strings.Repeat("v", 65530))
	if _, err := m.Command(nil, "XID:1:0a:02:q", "BEGIN", 0, ""); err != nil {
		t.Fatal(err)
	}
	var br *BadRequest
	if _, err := m.Put(nil, []byte("XID:1:0a:02:q"), &store.Message{Topic: "t", Data: []byte("m"), Properties: long}); !errors.As(err, &br) {
		t.Fatalf("XA put with %d bytes of properties: %v, want a BadRequest", len(long), err)
	}
	s := m.NewSession(nil)
	defer s.Close()
	if _, err := m.Command(s, "TX:s:1", "BEGIN", 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(s, []byte("TX:s:1"), &store.Message{Topic: "t", Data: []byte("m"), Properties: long}); err != nil {
		t.Fatalf("local put (no prepared record) with %d bytes of properties: %v", len(long), err)
	}
	for _, k := range []string{"TX:s:1", "XID:1:0a:02:q"} {
		if _, err := m.Command(s, k, "ROLLBACK", 0, ""); err != nil {
			t.Fatal(err)
		}
	}

	const key = "XID:1:0a:01:q"
	if _, err := m.Command(nil, key, "BEGIN", 0, ""); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // 1.2 MB: more than a 1 MiB segment holds
		if _, err := m.Put(nil, []byte(key), &store.Message{Topic: "t", Data: make([]byte, 600<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	var xe *XAError
	if _, err := m.Command(nil, key, "PREPARE", 0, ""); !errors.As(err, &xe) || xe.Code != XAErrRMErr {
		t.Fatalf("prepare of a run larger than a segment: %v, want XAER_RMERR", err)
	}
	if s := m.Stats(); s.Open != 1 || s.HeldBytes == 0 {
		t.Fatalf("after the failed prepare: %+v, want the transaction open", s)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := m.Stats()
		if s.Open == 0 && s.HeldBytes == 0 && s.TimedOut == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10× MaxTimeout after the failed prepare: %d open, %d held bytes, %d timed out (want 0, 0, 1)", s.Open, s.HeldBytes, s.TimedOut)
		}
	}
}

// The txends of one batch are appended as one run, and one record the
// store refuses fails a run whole. A committed delayed half message whose
// properties fit its half record but not its %SCHEDULE% record (realTopic=
// and realPartition= added) is refused at the put (400); one already
// stored (here: put while the table did not schedule, as before the check
// or without a delay service) fails its own txend only, not the others of
// its batch.
func TestBadCommitFailsOnlyItsOwnTxEnd(t *testing.T) {
	var scheduling atomic.Bool
	_, m := openManager(t, Config{Schedule: func(msg *store.Message) (store.Message, bool, error) {
		if !scheduling.Load() {
			return store.Message{}, false, nil
		}
		out, _ := delay.ScheduleMessage(msg, delay.Plan{Partition: 1}, nil)
		return out, true, nil
	}})
	s := m.NewSession(nil)
	defer s.Close()
	put := func(props string) (int64, error) {
		msg := store.Message{Topic: "t", Data: []byte("m"), Properties: []byte(props)}
		res, f, err := m.PutHalf(s, "g", &msg)
		if err == nil && f != nil {
			err = f.Wait()
		}
		return res.MsgID, err
	}
	// Its own properties (without tx=half) fit the half record's rt=t&rp=0&pg=g& prefix
	// (15 bytes), not the 28 bytes of &realTopic=t&realPartition=0.
	own := "pgroup=g&delay=1&k="
	own += strings.Repeat("v", protocol.MaxPropertiesLen-15-len(own))
	bigProps := "tx=half&" + own

	scheduling.Store(true)
	var br *BadRequest
	if _, err := put(bigProps); !errors.As(err, &br) {
		t.Fatalf("half put whose %%SCHEDULE%% record would be too long: %v, want a BadRequest", err)
	}
	if _, err := m.Command(s, "TX:s:1", "BEGIN", 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(s, []byte("TX:s:1"), &store.Message{Topic: "t", Data: []byte("m"), Properties: []byte(own)}); !errors.As(err, &br) {
		t.Fatalf("local put whose %%SCHEDULE%% record would be too long: %v, want a BadRequest", err)
	}

	scheduling.Store(false)
	big, err := put(bigProps)
	if err != nil {
		t.Fatal(err)
	}
	good, err := put("tx=half&pgroup=g&delay=1")
	if err != nil {
		t.Fatal(err)
	}
	scheduling.Store(true)
	reqs := []EndReq{{ID: big, Action: Commit}, {ID: good, Action: Commit}}
	m.EndBatch(s, reqs)
	if reqs[0].Err == nil || reqs[1].Err != nil {
		t.Fatalf("txend commit of the one too long for %%SCHEDULE%%: %v (want an error); of the other one in the same batch: %v (want none)",
			reqs[0].Err, reqs[1].Err)
	}
	if st := m.Stats(); st.PendingHalf != 1 || st.Committed != 1 {
		t.Fatalf("stats %+v: want the failed one pending, the other committed", st)
	}
}

// Close stops the timeouts of every open transaction, local ones (which
// belong to their connection's session) as well as XA ones: none fires on
// the closed table.
func TestCloseStopsLocalTimeouts(t *testing.T) {
	var events atomic.Int64
	_, m := openManager(t, Config{MaxTimeout: 100 * time.Millisecond, OnEvent: func(*Event) { events.Add(1) }})
	s := m.NewSession(nil)
	for _, k := range []string{"TX:s:1", "XID:1:0a:01:q"} {
		if _, err := m.Command(s, k, "BEGIN", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	time.Sleep(400 * time.Millisecond) // 4× MaxTimeout
	if st := m.Stats(); st.TimedOut != 0 || events.Load() != 0 {
		t.Fatalf("after Close: %d transactions timed out, %d events", st.TimedOut, events.Load())
	}
	s.Close()
}
