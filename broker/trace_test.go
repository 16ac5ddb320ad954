package broker_test

import (
	"fmt"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// TestTraceMark: after `trace on` a connection's puts and mputs are stored plain (no properties)
// with SysFlagTraced; before it, after `trace off` and on other connections they are not; a bad
// mode is 400 and the connection goes on.
func TestTraceMark(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 1}})
	c := b.Dial()
	defer c.Close()
	sysFlag := func(id int64) uint16 {
		t.Helper()
		c.Send(fmt.Sprintf("query id %d 99\r\n", id))
		r := c.Reply()
		recs := brokertest.Records(t, r.Body)
		if r.Code != 200 || len(recs) != 1 || len(recs[0].Properties) != 0 {
			t.Fatalf("query id %d: %+v %+v", id, r, recs)
		}
		return recs[0].SysFlag
	}
	plain, _, _ := c.Put("q", 0, "before", 1)
	c.Send("trace maybe 2\r\n")
	if r := c.Reply(); r.Code != 400 || r.Opaque != 2 {
		t.Fatalf("trace maybe: %+v %q", r, r.Body)
	}
	c.Send("trace on 3\r\n")
	if r := c.Reply(); r.Code != 200 || r.Opaque != 3 || len(r.Body) != 0 {
		t.Fatalf("trace on: %+v %q", r, r.Body)
	}
	traced, _, _ := c.Put("q", 0, "traced", 4)
	c.SendBytes(mputFrame("q", 0, []string{"b1", "b2"}, 5))
	r := c.Reply()
	if r.Code != 200 {
		t.Fatalf("mput: %+v %q", r, r.Body)
	}
	_, _, ids, err := protocol.ParseBatchPutResult(r.Body, nil)
	if err != nil || len(ids) != 2 {
		t.Fatalf("mput result %q: %v", r.Body, err)
	}
	c2 := b.Dial()
	defer c2.Close()
	other, _, _ := c2.Put("q", 0, "other connection", 6)
	c.Send("trace off 7\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("trace off: %+v", r)
	}
	after, _, _ := c.Put("q", 0, "after", 8)
	for _, id := range []int64{traced, ids[0], ids[1]} {
		if f := sysFlag(id); f&protocol.SysFlagTraced == 0 {
			t.Fatalf("record %d: sysFlag %#x, want the traced bit", id, f)
		}
	}
	for _, id := range []int64{plain, other, after} {
		if f := sysFlag(id); f&protocol.SysFlagTraced != 0 {
			t.Fatalf("record %d: sysFlag %#x, want no traced bit", id, f)
		}
	}
}
