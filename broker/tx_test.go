package broker_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// txc is a raw-protocol client with transaction helpers.
type txc struct {
	*brokertest.Client
	t      *testing.T
	opaque int32
}

func newTxc(t *testing.T, addr string) *txc {
	return &txc{Client: brokertest.Dial(t, addr), t: t, opaque: 100}
}

func (c *txc) next() int32 { c.opaque++; return c.opaque }

// tx sends `transaction <key> <sid> <typ> [extra…] <opaque>` and returns the reply.
func (c *txc) tx(key, sid, typ string, extra ...string) protocol.Reply {
	c.t.Helper()
	op := c.next()
	line := strings.Join(append([]string{"transaction", key, sid, typ}, extra...), " ")
	c.Send(fmt.Sprintf("%s %d\r\n", line, op))
	r := c.Reply()
	if r.Opaque != op {
		c.t.Fatalf("%s: reply opaque %d, want %d", line, r.Opaque, op)
	}
	return r
}

func (c *txc) txOK(key, sid, typ string, extra ...string) string {
	c.t.Helper()
	r := c.tx(key, sid, typ, extra...)
	if r.Code != 200 {
		c.t.Fatalf("transaction %s %s: %d %q", key, typ, r.Code, r.Body)
	}
	return string(r.Body)
}

// txPut sends an 8-field put (checksum + txKey) and checks the -1 offset.
func (c *txc) txPut(topic string, part int, key, data string) {
	c.t.Helper()
	op := c.next()
	c.Send(fmt.Sprintf("put %s %d %d 0 %d %s %d\r\n%s", topic, part, len(data), protocol.MessageChecksum([]byte(data)), key, op, data))
	r := c.Reply()
	if r.Code != 200 || r.Opaque != op {
		c.t.Fatalf("tx put: %d %q", r.Code, r.Body)
	}
	if _, p, off, err := protocol.ParsePutResult(r.Body); err != nil || off != -1 || p != int32(part) {
		c.t.Fatalf("tx put result %q: want <id> %d -1", r.Body, part)
	}
}

// records returns the data of every visible record of topic/part.
func (c *txc) records(topic string, part int) []string {
	c.t.Helper()
	var out []string
	for off := int64(0); ; {
		op := c.next()
		c.Send(fmt.Sprintf("get %s g %d %d 1048576 %d\r\n", topic, part, off, op))
		r := c.Reply()
		if r.Kind == protocol.ReplyResult {
			if r.Code == 404 {
				return out
			}
			c.t.Fatalf("get: %d %q", r.Code, r.Body)
		}
		for _, rec := range brokertest.Records(c.t, r.Body) {
			out = append(out, string(rec.Data))
			off = rec.QueueOffset + 1
		}
	}
}

func wantRecords(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("records %q, want %q", got, want)
	}
}

// Local transaction: invisible until COMMIT_ONE_PHASE, then all together and
// contiguous per partition even with a plain put in between; 7- and 8-field
// transactional puts.
func TestTxLocalCommit(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	c := newTxc(t, b.Addr)
	other := b.Dial()
	const key, sid = "TX:10.0.0.5-1380000000000-1:1", "10.0.0.5-1380000000000-1"
	c.txOK(key, sid, "BEGIN", "30")
	c.txOK(key, sid, "BEGIN") // no-op on an existing transaction
	c.txPut("test", 0, key, "a1")
	other.Put("test", 0, "plain1", 7)
	c.txPut("test", 1, key, "b1")
	// 7-field form: field 5 is the txKey.
	op := c.next()
	c.Send(fmt.Sprintf("put test 0 2 0 %s %d\r\na2", key, op))
	if r := c.Reply(); r.Code != 200 || !bytes.HasSuffix(r.Body, []byte(" 0 -1")) {
		t.Fatalf("7-field tx put: %d %q", r.Code, r.Body)
	}
	c.txPut("test", 0, key, "a3")
	wantRecords(t, c.records("test", 0), "plain1")
	wantRecords(t, c.records("test", 1))

	if body := c.txOK(key, sid, "COMMIT_ONE_PHASE"); body != "" {
		t.Fatalf("commit body %q", body)
	}
	other.Put("test", 0, "plain2", 8)
	wantRecords(t, c.records("test", 0), "plain1", "a1", "a2", "a3", "plain2")
	wantRecords(t, c.records("test", 1), "b1")

	// Committed: a second commit does not know it; puts are refused.
	if r := c.tx(key, sid, "COMMIT_ONE_PHASE"); r.Code != 500 || !strings.HasPrefix(string(r.Body), "XAException:code=-4,msg=") {
		t.Fatalf("second commit: %d %q", r.Code, r.Body)
	}
	op = c.next()
	c.Send(fmt.Sprintf("put test 0 1 0 -1 %s %d\r\nx", key, op))
	if r := c.Reply(); r.Code != 500 || !strings.Contains(string(r.Body), "has not been started") {
		t.Fatalf("put after commit: %d %q", r.Code, r.Body)
	}
	// Partition -1 is refused inside a transaction (MetaQ).
	c.txOK("TX:s:2", "s", "BEGIN")
	op = c.next()
	c.Send(fmt.Sprintf("put test -1 1 0 -1 TX:s:2 %d\r\nx", op))
	if r := c.Reply(); r.Code != 500 || string(r.Body) != "Invalid partition for transaction command:-1" {
		t.Fatalf("put -1 in tx: %d %q", r.Code, r.Body)
	}
}

// Local rollback leaves no trace; a closed connection rolls back its local
// transactions; a transaction that outlives maxTxTimeoutInSeconds is rolled
// back.
func TestTxLocalRollbackCloseTimeout(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{ExtraINI: "maxTxTimeoutInSeconds=1\n"})
	c := newTxc(t, b.Addr)
	c.txOK("TX:s:1", "s", "BEGIN")
	c.txPut("test", 0, "TX:s:1", "r1")
	c.txOK("TX:s:1", "s", "ROLLBACK")
	wantRecords(t, c.records("test", 0))

	c2 := newTxc(t, b.Addr)
	c2.txOK("TX:s2:1", "s2", "BEGIN")
	c2.txPut("test", 0, "TX:s2:1", "gone")
	if st := b.Server.TxStats(); st.Open != 1 || st.HeldBytes == 0 {
		t.Fatalf("stats before close: %+v", st)
	}
	c2.Close()
	waitUntil(t, "the closed connection's transaction rolled back", func() bool {
		st := b.Server.TxStats()
		return st.Open == 0 && st.HeldBytes == 0
	})

	c.txOK("TX:s:3", "s", "BEGIN") // no timeout given: maxTxTimeoutInSeconds applies
	c.txPut("test", 0, "TX:s:3", "late")
	waitUntil(t, "the transaction timed out", func() bool { return b.Server.TxStats().TimedOut == 1 })
	if r := c.tx("TX:s:3", "s", "COMMIT_ONE_PHASE"); r.Code != 500 || !strings.Contains(string(r.Body), "code=-4") {
		t.Fatalf("commit after timeout: %d %q", r.Code, r.Body)
	}
	wantRecords(t, c.records("test", 0))
}

const xid = "XID:1:0a0b:01:XAMessageProducer-host1"

// XA: begin, put, END (no reply), PREPARE votes 0, RECOVER lists it,
// COMMIT_TWO_PHASE makes the messages visible once; the error replies.
func TestTxXATwoPhase(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	c := newTxc(t, b.Addr)
	const sid = "sess-1"
	c.txOK(xid, sid, "BEGIN", "60", "XAMessageProducer-host1")
	c.txPut("test", 2, xid, "x1")
	c.txPut("test", 2, xid, "x2")
	c.txPut("test", 3, xid, "y1")
	// END gets no reply (MetaQ): the next reply is the version's.
	c.Send(fmt.Sprintf("transaction %s %s END XAMessageProducer-host1 %d\r\nversion 55\r\n", xid, sid, c.next()))
	if r := c.Reply(); r.Opaque != 55 {
		t.Fatalf("END answered: %+v %q", r, r.Body)
	}
	if r := c.tx(xid, sid, "COMMIT_TWO_PHASE", "XAMessageProducer-host1"); r.Code != 500 || !strings.HasPrefix(string(r.Body), "XAException:code=-6,msg=") {
		t.Fatalf("two-phase commit before prepare: %d %q", r.Code, r.Body)
	}
	if vote := c.txOK(xid, sid, "PREPARE", "XAMessageProducer-host1"); vote != "0" {
		t.Fatalf("vote %q", vote)
	}
	if got := c.txOK("null", sid, "RECOVER", "XAMessageProducer-host1"); got != xid {
		t.Fatalf("RECOVER %q", got)
	}
	if got := c.txOK("null", sid, "RECOVER", "other-qualifier"); got != "" {
		t.Fatalf("RECOVER other qualifier %q", got)
	}
	wantRecords(t, c.records("test", 2))
	// Another connection (the transaction manager after a crash) commits it.
	c2 := newTxc(t, b.Addr)
	c2.txOK(xid, "sess-2", "COMMIT_TWO_PHASE", "XAMessageProducer-host1")
	wantRecords(t, c.records("test", 2), "x1", "x2")
	wantRecords(t, c.records("test", 3), "y1")
	if got := c.txOK("null", sid, "RECOVER"); got != "" {
		t.Fatalf("RECOVER after commit %q", got)
	}
	if r := c.tx(xid, sid, "COMMIT_TWO_PHASE"); r.Code != 500 || !strings.Contains(string(r.Body), "code=-4") {
		t.Fatalf("second two-phase commit: %d %q", r.Code, r.Body)
	}

	// Nothing done: PREPARE votes XA_RDONLY (3) and finishes it.
	const empty = "XID:1:ff:02:q"
	c.txOK(empty, sid, "BEGIN", "q")
	if vote := c.txOK(empty, sid, "PREPARE", "q"); vote != "3" {
		t.Fatalf("empty vote %q", vote)
	}
	// A local transaction cannot be prepared.
	c.txOK("TX:sess-1:9", sid, "BEGIN")
	if r := c.tx("TX:sess-1:9", sid, "PREPARE"); r.Code != 500 || !strings.HasPrefix(string(r.Body), "XAException:code=-3,msg=") {
		t.Fatalf("local prepare: %d %q", r.Code, r.Body)
	}
	// Prepared then rolled back: no trace.
	const rb = "XID:1:aa:03:q"
	c.txOK(rb, sid, "BEGIN", "q")
	c.txPut("test", 1, rb, "never")
	c.txOK(rb, sid, "PREPARE", "q")
	c.txOK(rb, sid, "ROLLBACK", "q")
	wantRecords(t, c.records("test", 1))
	if r := c.tx("XID:1:zz:03:q", sid, "BEGIN"); r.Code != 400 {
		t.Fatalf("bad xid: %d %q", r.Code, r.Body)
	}
	if r := c.tx(xid, sid, "BOGUS"); r.Code != 500 || string(r.Body) != "Unknow transaction command type:BOGUS" {
		t.Fatalf("bad type: %d %q", r.Code, r.Body)
	}
	if st := b.Server.TxStats(); st.Prepared != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A prepared XA transaction survives a graceful restart; RECOVER lists it
// and COMMIT_TWO_PHASE makes its messages visible exactly once.
func TestTxXAPreparedSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true})
	c := newTxc(t, b.Addr)
	c.txOK(xid, "s", "BEGIN", "XAMessageProducer-host1")
	c.txPut("test", 0, xid, "p1")
	c.txPut("test", 0, xid, "p2")
	c.txOK(xid, "s", "PREPARE", "XAMessageProducer-host1")
	c.Close()
	b.Stop()

	b = brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true})
	c = newTxc(t, b.Addr)
	if got := c.txOK("null", "s", "RECOVER", "XAMessageProducer-host1"); got != xid {
		t.Fatalf("RECOVER after restart %q", got)
	}
	wantRecords(t, c.records("test", 0))
	c.txOK(xid, "s", "COMMIT_TWO_PHASE", "XAMessageProducer-host1")
	wantRecords(t, c.records("test", 0), "p1", "p2")
	c.Close()
	b.Stop()

	b = brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true})
	c = newTxc(t, b.Addr)
	if got := c.txOK("null", "s", "RECOVER"); got != "" {
		t.Fatalf("RECOVER after the commit and a restart %q", got)
	}
	wantRecords(t, c.records("test", 0), "p1", "p2")
}

// System topics refuse client puts but can be read.
func TestTxSystemTopicsRefusePuts(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"*": 1}})
	c := b.Dial()
	c.Send("put %TX_HALF% 0 1 0 1\r\nx")
	if r := c.Reply(); r.Code != 403 {
		t.Fatalf("put to %%TX_HALF%%: %d %q", r.Code, r.Body)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
