package tx

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// A power loss in the middle of a two-phase commit keeps a prefix of its
// run (the commit op and the first survivors; here made by appending that
// prefix by hand, then closing and reopening the store and the table as a
// restart does). Recovery completes the run: every message of the
// transaction is visible exactly once, the transaction is no longer
// prepared, a retried COMMIT appends nothing (XAER_NOTA), and later
// restarts change nothing.
func TestTornTwoPhaseCommitCompleted(t *testing.T) {
	for _, survived := range []int{0, 2, 5} {
		t.Run(strconv.Itoa(survived), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			open := func() (*store.Store, *Manager) { return openTorn(t, dir) }
			const key = "XID:1:0a:01:q"
			st, m := open()
			s := m.NewSession(nil)
			if _, err := m.Command(s, key, "BEGIN", 0, ""); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				msg := store.Message{Topic: "t", Partition: int32(i % 2), Data: []byte("m" + strconv.Itoa(i)), BornTime: int64(1000 + i)}
				if _, err := m.Put(s, []byte(key), &msg); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := m.Command(s, key, "PREPARE", 0, ""); err != nil {
				t.Fatal(err)
			}
			// The torn commit: what a power loss would leave of its run.
			m.mu.Lock()
			tx := m.xa[key]
			m.mu.Unlock()
			msgs, err := m.loadPrepared(tx)
			if err != nil {
				t.Fatal(err)
			}
			run := commitRun(key, tx.halfFrom, tx.halfN, 0, msgs)[:1+survived]
			if _, err := st.AppendBatch(run, make([]store.AppendResult, len(run))); err != nil {
				t.Fatal(err)
			}
			closeTorn(t, st, m)

			for restart := 0; restart < 2; restart++ {
				st, m = open()
				if p := m.Prepared(""); len(p) != 0 {
					t.Fatalf("restart %d: still prepared %v", restart, p)
				}
				// Appended at recovery: readable once the store indexed them.
				got := visibleTorn(t, st, restart, 5)
				if want := "[m0 m2 m4 m1 m3]"; strconvList(got) != want {
					t.Fatalf("restart %d: visible %v, want %s once each", restart, got, want)
				}
				_, err := m.Command(m.NewSession(nil), key, "COMMIT_TWO_PHASE", 0, "")
				var xe *XAError
				if !errors.As(err, &xe) || xe.Code != XAErrNotA {
					t.Fatalf("retried commit: %v", err)
				}
				closeTorn(t, st, m)
			}
		})
	}
}

// openTorn opens the store in dir and the tx table on it, as a restart does.
func openTorn(t *testing.T, dir string) (*store.Store, *Manager) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(store.Config{Dir: dir, SegmentSize: 1 << 20, IndexFileSize: 1 << 12, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(Config{Store: st, Logger: log})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return st, m
}

func closeTorn(t *testing.T, st *store.Store, m *Manager) {
	t.Helper()
	m.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// visibleTorn waits until want messages of topic t (partitions 0 and 1) are
// readable (recovery appends them and the store indexes them in the
// background), then returns their bodies, partition 0 first.
func visibleTorn(t *testing.T, st *store.Store, restart int, want int64) []string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); st.MaxOffset("t", 0)+st.MaxOffset("t", 1) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("restart %d: %d+%d messages readable, want %d", restart, st.MaxOffset("t", 0), st.MaxOffset("t", 1), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	for part := int32(0); part < 2; part++ {
		for off := st.MinOffset("t", part); off < st.MaxOffset("t", part); off++ {
			res, err := st.Read("t", part, off, 1, nil)
			if err != nil || res.Status != store.ReadFound {
				t.Fatalf("read t-%d@%d: %v", part, off, err)
			}
			r, _, err := protocol.DecodeRecord(res.Bufs[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(r.Data))
			res.Release()
		}
	}
	return got
}

func strconvList(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}

// A crash in the middle of the append of a batch of txends keeps the hend
// op and a prefix of the run of real messages after it (made here by
// appending that prefix by hand, then restarting). Recovery appends the
// committed messages that did not survive: each committed half message is
// visible exactly once, none is pending (so none is checked back and
// committed again), the rolled back one stays invisible, and later restarts
// change nothing.
func TestTornHalfCommitCompleted(t *testing.T) {
	for _, survived := range []int{0, 2, 4} {
		t.Run(strconv.Itoa(survived), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			open := func() (*store.Store, *Manager) { return openTorn(t, dir) }
			st, m := open()
			s := m.NewSession(nil)
			var items []endItem
			for i := 0; i < 5; i++ {
				msg := store.Message{Topic: "t", Partition: int32(i % 2), Data: []byte("m" + strconv.Itoa(i)), BornTime: int64(1000 + i),
					Properties: []byte("tx=half&pgroup=g&tag=a")}
				res, f, err := m.PutHalf(s, "g", &msg)
				if err != nil || f.Wait() != nil {
					t.Fatal(err)
				}
				a := Commit
				if i == 3 {
					a = Rollback
				}
				items = append(items, endItem{h: &half{id: res.MsgID}, req: &EndReq{}, a: a})
			}
			// The torn batch: its op, then the first survivors of its run.
			var run []store.Message
			var runBytes, lastBytes int64
			for i := range items {
				if items[i].a != Commit {
					continue
				}
				if err := m.loadReal(&s.names, &items[i]); err != nil {
					t.Fatal(err)
				}
				run = append(run, items[i].msg)
				runBytes, lastBytes = runBytes+items[i].size, items[i].size
			}
			if string(run[0].Properties) != "pgroup=g&tag=a" || run[0].SysFlag&protocol.SysFlagTxCommit == 0 {
				t.Fatalf("real message %+v", run[0])
			}
			op := store.Message{Topic: OpTopic, Data: appendEndOp(nil, runBytes, lastBytes, items)}
			batch := append([]store.Message{op}, run[:survived]...)
			f, err := st.AppendBatch(batch, make([]store.AppendResult, len(batch)))
			if err != nil || f.Wait() != nil {
				t.Fatal(err)
			}
			for i := range items {
				items[i].rd.Release()
			}
			closeTorn(t, st, m)

			for restart := 0; restart < 2; restart++ {
				st, m = open()
				if n := m.Stats().PendingHalf; n != 0 {
					t.Fatalf("restart %d: %d half messages still pending", restart, n)
				}
				got := visibleTorn(t, st, restart, 4)
				if want := "[m0 m2 m4 m1]"; strconvList(got) != want {
					t.Fatalf("restart %d: visible %v, want %s once each", restart, got, want)
				}
				closeTorn(t, st, m)
			}
		})
	}
}

// The real message a commit builds from the body kept since the put is the
// one it builds from the half record read back from the log (what recovery
// compares a run against).
func TestKeptBodyMatchesRecord(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(store.Config{Dir: t.TempDir(), SegmentSize: 1 << 20, IndexFileSize: 1 << 12, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := Open(Config{Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.NewSession(nil)
	for i, msg := range []store.Message{
		{Topic: "t", Partition: 1, Flag: 5, Data: []byte("born at store time"), Properties: []byte("tx=half&pgroup=g&tag=a")},
		{Topic: "t", Partition: 0, BornTime: 1234, Data: []byte("own born time"), Properties: []byte("pgroup=g&tx=half")},
		{Topic: "t", Data: nil, Properties: []byte("tx=half&pgroup=g")},
	} {
		res, f, err := m.PutHalf(s, "g", &msg)
		if err != nil || f.Wait() != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		h := m.halves[res.MsgID]
		m.mu.Unlock()
		if h.body == nil && i < 2 {
			t.Fatalf("%d: body not kept", i)
		}
		kept := endItem{h: h, req: &EndReq{}, a: Commit}
		read := endItem{h: &half{id: res.MsgID}, req: &EndReq{}, a: Commit}
		if err := m.loadReal(&s.names, &kept); err != nil {
			t.Fatal(err)
		}
		if err := m.loadReal(&s.names, &read); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(kept.msg, read.msg) && !(len(kept.msg.Data) == 0 && len(read.msg.Data) == 0) || kept.size != read.size {
			t.Fatalf("%d: kept %+v (%d bytes), read back %+v (%d bytes)", i, kept.msg, kept.size, read.msg, read.size)
		}
		read.rd.Release()
	}
}

// Half bodies are kept only within their bounds: one larger than
// maxKeptBody, or any once maxKeptBytes are kept, is read back from the log
// at the commit. Every one is committed as it was put, and the budget is
// given back when the halves are finished.
func TestKeptBodyBudget(t *testing.T) {
	st, m := openTorn(t, filepath.Join(t.TempDir(), "data"))
	defer closeTorn(t, st, m)
	s := m.NewSession(nil)
	put := func(data string, spent int64) *half {
		t.Helper()
		m.mu.Lock()
		m.kept = spent
		m.mu.Unlock()
		msg := store.Message{Topic: "t", Data: []byte(data), BornTime: 1000, Properties: []byte("tx=half&pgroup=g&tag=a")}
		res, f, err := m.PutHalf(s, "g", &msg)
		if err != nil || f.Wait() != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.halves[res.MsgID]
	}
	big := string(make([]byte, maxKeptBody+1))
	spent := put("over budget", maxKeptBytes)
	large := put(big, 0)
	kept := put("kept", 0)
	if spent.body != nil || large.body != nil || kept.body == nil {
		t.Fatalf("kept bodies: over budget %v, larger than %d bytes %v, within bounds %v",
			spent.body != nil, maxKeptBody, large.body != nil, kept.body != nil)
	}
	reqs := []EndReq{{ID: spent.id, Action: Commit}, {ID: large.id, Action: Commit}, {ID: kept.id, Action: Commit}}
	m.EndBatch(s, reqs)
	for i := range reqs {
		if reqs[i].Err != nil || !reqs[i].Appended {
			t.Fatalf("commit %d: %v (appended %v)", i, reqs[i].Err, reqs[i].Appended)
		}
		if f := reqs[i].Flush; f != nil && f.Wait() != nil {
			t.Fatal(f.Wait())
		}
	}
	for deadline := time.Now().Add(30 * time.Second); st.MaxOffset("t", 0) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages readable, want 3", st.MaxOffset("t", 0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for off, want := range []string{"over budget", big, "kept"} {
		res, err := st.Read("t", 0, int64(off), 1, nil)
		if err != nil || res.Status != store.ReadFound {
			t.Fatalf("read t-0@%d: %v", off, err)
		}
		r, _, err := protocol.DecodeRecord(res.Bufs[0], 0)
		if err != nil || string(r.Data) != want || string(r.Properties) != "pgroup=g&tag=a" || r.BornTime != 1000 {
			t.Fatalf("t-0@%d: %v %q born %d, want %d bytes", off, err, r.Properties, r.BornTime, len(want))
		}
		res.Release()
	}
	m.mu.Lock()
	left := m.kept
	m.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d kept bytes still counted after the commits", left)
	}
}

// A commit op whose run is short and whose half records are gone (a
// damaged log, or retention cut them) cannot be completed: recovery says
// so and the table does not open, rather than dropping the transaction's
// missing messages in silence.
func TestTornCommitWithoutHalves(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(store.Config{Dir: dir, SegmentSize: 1 << 20, IndexFileSize: 1 << 12, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []store.Message{{Topic: "t", Data: []byte("m0")}, {Topic: "t", Data: []byte("m1")}}
	run := commitRun("XID:1:0a:01:q", 0, len(msgs), 0, msgs)[:1] // the op only; no %TX_HALF% record
	f, err := st.AppendBatch(run, make([]store.AppendResult, len(run)))
	if err != nil || f.Wait() != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := Open(Config{Store: st, Logger: log})
	if err == nil {
		m.Close()
		t.Fatal("opened a table whose commit run cannot be completed")
	}
	if !strings.Contains(err.Error(), "cut by a crash") || !strings.Contains(err.Error(), "XID:1:0a:01:q") {
		t.Fatalf("error %q does not say which commit could not be completed and why", err)
	}
	if n := st.MaxOffset("t", 0); n != 0 {
		t.Fatalf("%d messages appended by the failed recovery", n)
	}
}

// Retention deletes whole segments: the %TX_HALF% records of a transaction
// may be gone while the op that committed it (a later segment) is kept.
// Recovery checks only the newest op for a run a crash cut (any record after
// an op proves its run whole), and when the half records it would check
// against are gone it logs that and goes on: before, it re-checked every
// retained commit op, found no half records, took the run for torn, failed
// to complete it, and the broker did not start.
func TestRestartAfterRetentionCutPreparedHalves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		half  bool // a half message committed by txend (else an XA transaction)
		later bool // another op after the commit's
	}{{"xa-newest", false, false}, {"xa-older", false, true}, {"half-newest", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			open := func() (*store.Store, *Manager, error) {
				st, err := store.Open(store.Config{Dir: dir, SegmentSize: 64 << 10, IndexFileSize: 1 << 12, Logger: log, Retention: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				m, err := Open(Config{Store: st, Logger: log})
				if err != nil {
					st.Close()
					return nil, nil, err
				}
				return st, m, nil
			}
			wait := func(f *store.Flush, err error) {
				t.Helper()
				if err == nil && f != nil {
					err = f.Wait()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			st, m, err := open()
			if err != nil {
				t.Fatal(err)
			}
			const key = "XID:1:0a:01:q"
			s := m.NewSession(nil)
			var halfID int64
			if tc.half {
				res, f, err := m.PutHalf(s, "g", &store.Message{Topic: "t", Data: []byte("m")})
				wait(f, err)
				halfID = res.MsgID
			} else {
				if _, err := m.Command(nil, key, "BEGIN", 0, ""); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Put(nil, []byte(key), &store.Message{Topic: "t", Data: []byte("m")}); err != nil {
					t.Fatal(err)
				}
				r, err := m.Command(nil, key, "PREPARE", 0, "")
				wait(r.Flush, err)
			}
			// Fill past the first segment, then commit in a later one.
			for i := 0; i < 40; i++ {
				if _, err := st.Append(&store.Message{Topic: "f", Data: make([]byte, 4000)}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.half {
				reqs := []EndReq{{ID: halfID, Action: Commit}}
				m.EndBatch(s, reqs)
				wait(reqs[0].Flush, reqs[0].Err)
			} else {
				r, err := m.Command(nil, key, "COMMIT_TWO_PHASE", 0, "")
				wait(r.Flush, err)
			}
			if tc.later { // an XA transaction prepared and rolled back: two more ops
				const k2 = "XID:1:0a:02:q"
				if _, err := m.Command(nil, k2, "BEGIN", 0, ""); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Put(nil, []byte(k2), &store.Message{Topic: "t", Data: []byte("n")}); err != nil {
					t.Fatal(err)
				}
				r, err := m.Command(nil, k2, "PREPARE", 0, "")
				wait(r.Flush, err)
				r, err = m.Command(nil, k2, "ROLLBACK", 0, "")
				wait(r.Flush, err)
			}
			for deadline := time.Now().Add(10 * time.Second); st.MaxOffset("t", 0) < 1; {
				if time.Now().After(deadline) {
					t.Fatal("commit not indexed")
				}
				time.Sleep(10 * time.Millisecond)
			}
			s.Close()
			n, err := st.DeleteExpired(time.Now().Add(2 * time.Hour))
			if err != nil || n == 0 {
				t.Fatalf("retention deleted %d segments: %v", n, err)
			}
			if lo := st.MinOffset(HalfTopic, 0); lo < 1 {
				t.Fatalf("%s min offset %d: the half record was not cut", HalfTopic, lo)
			}
			closeTorn(t, st, m)
			for restart := 0; restart < 2; restart++ {
				st, m, err = open()
				if err != nil {
					t.Fatalf("restart %d after retention: %v", restart, err)
				}
				if got := st.MaxOffset("t", 0) - st.MinOffset("t", 0); got != 1 {
					t.Fatalf("restart %d: %d messages in t, want the committed one once", restart, got)
				}
				if s := m.Stats(); s.Prepared != 0 || s.PendingHalf != 0 {
					t.Fatalf("restart %d: %+v", restart, s)
				}
				closeTorn(t, st, m)
			}
		})
	}
}
