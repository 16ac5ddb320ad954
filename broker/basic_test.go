package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// The telnet session from the README: put, then get it back.
func TestTelnetSession(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	c.Send("put test 0 5 0 1\r\nhello")
	r := c.Reply()
	if r.Kind != protocol.ReplyResult || r.Code != 200 || r.Opaque != 1 {
		t.Fatalf("put reply %+v %q", r, r.Body)
	}
	fields := strings.Fields(string(r.Body))
	if len(fields) != 3 || fields[1] != "0" || fields[2] != "0" {
		t.Fatalf("put body %q, want <msgId> 0 0", r.Body)
	}
	c.Send("get test g 0 0 1048576 2\r\n")
	r = c.Reply()
	if r.Kind != protocol.ReplyValue || r.Opaque != 2 {
		t.Fatalf("get reply %+v", r)
	}
	recs := brokertest.Records(t, r.Body)
	if len(recs) != 1 || string(recs[0].Data) != "hello" || string(recs[0].Topic) != "test" || recs[0].QueueOffset != 0 {
		t.Fatalf("records %+v", recs)
	}
	if fmt.Sprint(recs[0].MsgID) != fields[0] {
		t.Fatalf("msgId %d != put reply %s", recs[0].MsgID, fields[0])
	}
}
