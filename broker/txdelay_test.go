package broker_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A committed transactional message keeps its delay: a half message with
// deliverAt an hour ahead, and a local transaction's put with a deliverAt
// an hour ahead, are both waiting in the timer after their commit, not in
// their topic; a half message with deliverAt 300ms ahead arrives after its
// commit with the deliverAt property. A bad delay property is refused at
// the put (400).
func TestTxDelayedCommit(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	c := newTxc(t, b.Addr)
	later := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	half := func(props, data string) int64 {
		t.Helper()
		body := "tx=half&pgroup=orders&" + props + "\n" + data
		op := c.next()
		c.Send(fmt.Sprintf("put test 0 %d %d %d\r\n%s", len(body), protocol.FlagHasProperties, op, body))
		r := c.Reply()
		if r.Code != 200 {
			t.Fatalf("half put %q: %d %q", props, r.Code, r.Body)
		}
		id, _, _, err := protocol.ParsePutResult(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := half("deliverAt="+later, "half-later")
	if r := c.txend(id, "commit"); r.Code != 200 {
		t.Fatalf("txend: %d %q", r.Code, r.Body)
	}
	const key, sid = "TX:s:1", "s"
	c.txOK(key, sid, "BEGIN")
	body := "deliverAt=" + later + "\nlocal-later"
	op := c.next()
	c.Send(fmt.Sprintf("put test 0 %d %d %d %s %d\r\n%s", len(body), protocol.FlagHasProperties,
		protocol.MessageChecksum([]byte(body)), key, op, body))
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("tx put: %d %q", r.Code, r.Body)
	}
	c.txOK(key, sid, "COMMIT_ONE_PHASE")
	zktest.Eventually(t, 30*time.Second, func() bool { return b.Delay.Stats().TimerPending == 2 }, "both committed messages in the timer")
	wantRecords(t, c.records("test", 0))

	soon := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixMilli(), 10)
	id = half("deliverAt="+soon, "half-soon")
	if r := c.txend(id, "commit"); r.Code != 200 {
		t.Fatalf("txend: %d %q", r.Code, r.Body)
	}
	zktest.Eventually(t, 30*time.Second, func() bool { return len(c.records("test", 0)) == 1 }, "the short one delivered")
	op = c.next()
	c.Send(fmt.Sprintf("get test g 0 0 65536 %d\r\n", op))
	recs := brokertest.Records(t, c.Reply().Body)
	if len(recs) != 1 || string(recs[0].Data) != "half-soon" || protocol.Property(recs[0].Properties, "deliverAt") == "" ||
		recs[0].SysFlag&protocol.SysFlagTxCommit == 0 {
		t.Fatalf("delivered %+v %q", recs, recs[0].Properties)
	}

	// Refused at the put, not at the commit.
	bad := "tx=half&pgroup=orders&deliverAt=soon\nx"
	op = c.next()
	c.Send(fmt.Sprintf("put test 0 %d %d %d\r\n%s", len(bad), protocol.FlagHasProperties, op, bad))
	if r := c.Reply(); r.Code != 400 {
		t.Fatalf("bad deliverAt on a half put: %d %q", r.Code, r.Body)
	}
}
