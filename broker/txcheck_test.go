package broker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// halfPut sends a half message of group grp and returns its id.
func (c *txc) halfPut(topic string, part int, grp, data string) int64 {
	c.t.Helper()
	body := "tx=half&pgroup=" + grp + "&tag=t1\n" + data
	op := c.next()
	c.Send(fmt.Sprintf("put %s %d %d %d %d\r\n%s", topic, part, len(body), protocol.FlagHasProperties, op, body))
	r := c.Reply()
	if r.Code != 200 || r.Opaque != op {
		c.t.Fatalf("half put: %d %q", r.Code, r.Body)
	}
	id, p, off, err := protocol.ParsePutResult(r.Body)
	if err != nil || off != -1 || p != int32(part) {
		c.t.Fatalf("half put result %q: want <id> %d -1", r.Body, part)
	}
	return id
}

func (c *txc) txend(id int64, action string) protocol.Reply {
	c.t.Helper()
	op := c.next()
	c.Send(fmt.Sprintf("txend %d %s %d\r\n", id, action, op))
	r := c.Reply()
	if r.Opaque != op {
		c.t.Fatalf("txend reply %+v", r)
	}
	return r
}

// readCheck waits for the broker's `check <id> <opaque>` request.
func (c *txc) readCheck() int64 {
	c.t.Helper()
	r, err := c.TryReply(30 * time.Second)
	if err != nil {
		c.t.Fatalf("waiting for a check: %v", err)
	}
	if r.Kind != protocol.ReplyCheck {
		c.t.Fatalf("got %+v %q, want a check", r, r.Body)
	}
	id, err := protocol.ParseInt(r.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// A half message is invisible; txend commit makes it visible once (tx
// dropped from its properties); txend rollback leaves no trace; a second
// txend is 404.
func TestTxHalfCommitRollback(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	c := newTxc(t, b.Addr)
	id := c.halfPut("test", 0, "orders", "h1")
	id2 := c.halfPut("test", 0, "orders", "h2")
	wantRecords(t, c.records("test", 0))
	if st := b.Server.TxStats(); st.PendingHalf != 2 {
		t.Fatalf("stats %+v", st)
	}
	if r := c.txend(id, "commit"); r.Code != 200 {
		t.Fatalf("txend commit: %d %q", r.Code, r.Body)
	}
	if r := c.txend(id2, "rollback"); r.Code != 200 {
		t.Fatalf("txend rollback: %d %q", r.Code, r.Body)
	}
	if r := c.txend(id, "commit"); r.Code != 404 {
		t.Fatalf("second txend: %d %q", r.Code, r.Body)
	}
	op := c.next()
	c.Send(fmt.Sprintf("get test g 0 0 65536 %d\r\n", op))
	r := c.Reply()
	recs := brokertest.Records(t, r.Body)
	if len(recs) != 1 || string(recs[0].Data) != "h1" || string(recs[0].Properties) != "pgroup=orders&tag=t1" {
		t.Fatalf("committed records %+v", recs)
	}
	if st := b.Server.TxStats(); st.PendingHalf != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Bad input.
	body := "tx=half\nx"
	c.Send(fmt.Sprintf("put test 0 %d 2 77\r\n%s", len(body), body))
	if r := c.Reply(); r.Code != 400 || !strings.Contains(string(r.Body), "pgroup") {
		t.Fatalf("half without group: %d %q", r.Code, r.Body)
	}
	c.Send("txend 12 maybe 78\r\n")
	if r := c.Reply(); r.Code != 400 {
		t.Fatalf("bad action: %d %q", r.Code, r.Body)
	}
}

// The producer that sent a half message goes away; the broker's check
// reaches another live producer of the group, whose commit makes the
// message visible once. A pending half message survives a restart and is
// checked again after it.
func TestTxCheckReachesAnotherProducer(t *testing.T) {
	dir := t.TempDir()
	opts := brokertest.Options{Dir: dir, Sync: true, ExtraINI: "transactionCheckInterval=100\ntransactionCheckMax=1000\n"}
	b := brokertest.RunBroker(t, opts)
	p1 := newTxc(t, b.Addr)
	id := p1.halfPut("test", 1, "orders", "checked")
	p1.Close() // the sender dies before txend

	other := newTxc(t, b.Addr) // a producer of another group never gets it
	other.txOK("TX:o:1", "o", "BEGIN")
	other.Send("producer payments 5\r\n")
	if r := other.Reply(); r.Code != 200 {
		t.Fatalf("producer: %+v", r)
	}
	p2 := newTxc(t, b.Addr)
	p2.Send("producer orders 6\r\n")
	if r := p2.Reply(); r.Code != 200 || r.Opaque != 6 {
		t.Fatalf("producer: %+v", r)
	}
	if got := p2.readCheck(); got != id {
		t.Fatalf("check for %d, want %d", got, id)
	}
	if r := p2.txend(id, "unknown"); r.Code != 200 {
		t.Fatalf("txend unknown: %d %q", r.Code, r.Body)
	}
	b.Stop() // pending across a restart
	b = brokertest.RunBroker(t, opts)
	p3 := newTxc(t, b.Addr)
	p3.Send("producer orders 7\r\n")
	if r := p3.Reply(); r.Code != 200 {
		t.Fatalf("producer: %+v", r)
	}
	if got := p3.readCheck(); got != id {
		t.Fatalf("check after restart for %d, want %d", got, id)
	}
	if r := p3.txend(id, "commit"); r.Code != 200 {
		t.Fatalf("txend commit: %d %q", r.Code, r.Body)
	}
	wantRecords(t, p3.records("test", 1), "checked")
	if st := b.Server.TxStats(); st.PendingHalf != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Unknown answers up to transactionCheckMax: the half message is rolled
// back, logged, and never visible.
func TestTxCheckMaxRollsBack(t *testing.T) {
	logs := &syncLog{}
	b := brokertest.RunBroker(t, brokertest.Options{Logger: logs.logger(),
		ExtraINI: "transactionCheckInterval=50\ntransactionCheckMax=3\n"})
	p := newTxc(t, b.Addr)
	id := p.halfPut("test", 2, "orders", "doomed")
	for i := 0; i < 3; i++ {
		if got := p.readCheck(); got != id {
			t.Fatalf("check %d for %d", i, got)
		}
		if r := p.txend(id, "unknown"); r.Code != 200 {
			t.Fatalf("txend unknown: %d %q", r.Code, r.Body)
		}
	}
	waitUntil(t, "the half message was rolled back", func() bool { return b.Server.TxStats().CheckRollbacks == 1 })
	if st := b.Server.TxStats(); st.PendingHalf != 0 || st.ChecksSent != 3 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(logs.String(), "half message rolled back") || !strings.Contains(logs.String(), fmt.Sprint(id)) {
		t.Fatalf("log:\n%s", logs.String())
	}
	if r := p.txend(id, "commit"); r.Code != 404 {
		t.Fatalf("late commit: %d %q", r.Code, r.Body)
	}
	wantRecords(t, p.records("test", 2))
}

// syncLog collects a broker's log lines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *syncLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Reply reads the next reply, skipping the broker's check requests.
func (c *txc) Reply() protocol.Reply {
	c.t.Helper()
	for {
		r := c.Client.Reply()
		if r.Kind != protocol.ReplyCheck {
			return r
		}
	}
}

// Check counts are in the log: checks before a restart count toward
// transactionCheckMax after it.
func TestTxCheckCountSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := brokertest.Options{Dir: dir, Sync: true, ExtraINI: "transactionCheckInterval=100\ntransactionCheckMax=3\n"}
	b := brokertest.RunBroker(t, opts)
	p := newTxc(t, b.Addr)
	id := p.halfPut("test", 3, "orders", "counted")
	for i := 0; i < 2; i++ {
		if got := p.readCheck(); got != id {
			t.Fatalf("check for %d", got)
		}
	}
	b.Stop()
	b = brokertest.RunBroker(t, opts)
	p = newTxc(t, b.Addr)
	p.Send("producer orders 5\r\n")
	if r := p.Reply(); r.Code != 200 || r.Opaque != 5 {
		t.Fatalf("producer: %+v", r)
	}
	// At most one more check (the third), then the rollback.
	waitUntil(t, "the half message was rolled back", func() bool { return b.Server.TxStats().CheckRollbacks == 1 })
	if st := b.Server.TxStats(); st.ChecksSent > 1 {
		t.Fatalf("%d checks after the restart, want at most 1: %+v", st.ChecksSent, st)
	}
	wantRecords(t, p.records("test", 3))
}

// Txends pipelined in one write are appended together when the broker has
// read them all (one run, one op record), and each gets its own reply in
// its place: a second txend of the same message and one of an unknown id
// are 404 among the others' 200s, a put in between is answered in order,
// unknown leaves the message pending, and the action is case-insensitive.
func TestTxEndsPipelined(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			c := newTxc(t, b.Addr)
			var ids []int64
			for i := 1; i <= 4; i++ {
				ids = append(ids, c.halfPut("test", 0, "orders", fmt.Sprintf("h%d", i)))
			}
			var w strings.Builder
			fmt.Fprintf(&w, "txend %d commit 1\r\n", ids[0])
			fmt.Fprintf(&w, "txend %d commit 2\r\n", ids[0])
			fmt.Fprintf(&w, "txend 424242 commit 3\r\n")
			fmt.Fprintf(&w, "put test 0 5 0 4\r\nplain")
			fmt.Fprintf(&w, "txend %d rollback 5\r\n", ids[1])
			fmt.Fprintf(&w, "txend %d unknown 6\r\n", ids[2])
			fmt.Fprintf(&w, "txend %d COMMIT 7\r\n", ids[3])
			c.Send(w.String())
			for i, want := range []int{200, 404, 404, 200, 200, 200, 200} {
				r := c.Reply()
				if r.Opaque != int32(i+1) || r.Code != want {
					t.Fatalf("reply %d: %d %q (opaque %d), want %d", i+1, r.Code, r.Body, r.Opaque, want)
				}
			}
			// The put was appended as it was read, the commits when the
			// batch ended (h1 before it if the broker's read cut the write
			// in two there).
			if got := strings.Join(c.records("test", 0), ","); got != "plain,h1,h4" && got != "h1,plain,h4" {
				t.Fatalf("records %s", got)
			}
			if st := b.Server.TxStats(); st.PendingHalf != 1 {
				t.Fatalf("stats %+v, want the unknown one pending", st)
			}
			if r := c.txend(ids[2], "commit"); r.Code != 200 {
				t.Fatalf("txend commit after unknown: %d %q", r.Code, r.Body)
			}
			if got := c.records("test", 0); len(got) != 4 || got[3] != "h3" {
				t.Fatalf("records %q", got)
			}
		})
	}
}
