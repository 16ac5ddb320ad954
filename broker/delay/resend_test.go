package delay_test

import (
	"fmt"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// TestResendDeadLetterOnce: `retry <group> <dlqMsgId> -2` puts a dead letter
// back on its original topic once; a second resend, before and after a
// restart, is refused with 409 and appends nothing.
func TestResendDeadLetterOnce(t *testing.T) {
	dir := t.TempDir()
	b := runBroker(t, brokertest.Options{Dir: dir, Sync: true})
	c := b.Dial()
	id, _, _ := putProps(t, c, "other", 0, "k=v", "poison", 1)
	c.Send(fmt.Sprintf("retry g %d -1 2 failed\r\n", id))
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("retry: %d %s", r.Code, r.Body)
	}
	dl := waitRecords(t, c, "%DLQ%g", 0, 0)
	dlq := dl[0].MsgID
	c.Send(fmt.Sprintf("retry g %d -2 3\r\n", dlq))
	r := c.Reply()
	if r.Code != 200 {
		t.Fatalf("resend: %d %s", r.Code, r.Body)
	}
	newID, _, off, err := protocol.ParsePutResult(r.Body)
	if err != nil || off != 1 {
		t.Fatalf("resend reply %q: %v", r.Body, err)
	}
	rs := waitRecords(t, c, "other", 0, 1)
	if string(rs[0].Data) != "poison" || rs[0].MsgID != newID || protocol.Property(rs[0].Properties, "k") != "v" ||
		protocol.Property(rs[0].Properties, "origMsgId") != fmt.Sprint(id) || protocol.Property(rs[0].Properties, "retryTopic") != "" {
		t.Fatalf("resent copy %+v %q", rs[0], rs[0].Properties)
	}
	again := func(when string) {
		c.Send(fmt.Sprintf("retry g %d -2 4\r\n", dlq))
		if r := c.Reply(); r.Code != 409 {
			t.Fatalf("second resend %s: %d %s", when, r.Code, r.Body)
		}
	}
	again("before a restart")
	b.Stop()
	b = runBroker(t, brokertest.Options{Dir: dir, Sync: true})
	c = b.Dial()
	again("after a restart")
	if rs := get(t, c, "other", 0, 2, 0); len(rs) != 0 {
		t.Fatalf("a second copy: %+v", rs)
	}
	// Not a dead letter of the group: 404.
	c.Send(fmt.Sprintf("retry g %d -2 5\r\n", id))
	if r := c.Reply(); r.Code != 404 {
		t.Fatalf("resend of a plain message: %d %s", r.Code, r.Body)
	}
}
