package delay_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

func retry(t *testing.T, c *brokertest.Client, group string, id int64, level int, reason string) (int, string) {
	t.Helper()
	line := fmt.Sprintf("retry %s %d %d 11", group, id, level)
	if reason != "" {
		line += " " + reason
	}
	c.Send(line + "\r\n")
	r := c.Reply()
	return r.Code, string(r.Body)
}

func TestRetryLadderThenDLQ(t *testing.T) {
	b := runBroker(t, brokertest.Options{ExtraINI: "maxReconsumeTimes=3\n"})
	c := b.Dial()
	origID, _, _ := c.Put("test", 1, "payload", 1)
	id := origID
	var retryOff int64
	for round := 1; round <= 3; round++ {
		level := 1
		if round == 2 {
			level = 0 // the broker's ladder: 3 + reconsumeTimes, clamped
		}
		if code, body := retry(t, c, "g1", id, level, "boom%20"+strconv.Itoa(round)); code != 200 {
			t.Fatalf("round %d: retry: %d %s", round, code, body)
		}
		rs := waitRecords(t, c, "%RETRY%g1", 0, retryOff)
		r := rs[0]
		retryOff = r.QueueOffset + 1
		if int(r.ReconsumeTimes) != round || string(r.Data) != "payload" ||
			protocol.Property(r.Properties, "retryTopic") != "test" ||
			protocol.Property(r.Properties, "origMsgId") != strconv.FormatInt(origID, 10) ||
			r.SysFlag&protocol.SysFlagRetry == 0 {
			t.Fatalf("round %d: retried record %+v %q", round, r, r.Properties)
		}
		id = r.MsgID
	}
	// The fourth give-back (reconsumeTimes 3 = maxReconsumeTimes) dead-letters it.
	if code, body := retry(t, c, "g1", id, 0, ""); code != 200 {
		t.Fatalf("retry: %d %s", code, body)
	}
	rs := waitRecords(t, c, "%DLQ%g1", 0, 0)
	r := rs[0]
	if string(r.Data) != "payload" || protocol.Property(r.Properties, "retryTopic") != "test" ||
		protocol.Property(r.Properties, "reason") != "maxReconsumeTimes" || r.ReconsumeTimes != 4 ||
		r.SysFlag&protocol.SysFlagDeadLetter == 0 {
		t.Fatalf("dead letter %+v %q", r, r.Properties)
	}
	// delayLevel -1: straight to the DLQ with the consumer's reason.
	id2, _, _ := c.Put("test", 0, "bad", 2)
	if code, body := retry(t, c, "g1", id2, -1, "poison%20pill"); code != 200 {
		t.Fatalf("retry -1: %d %s", code, body)
	}
	rs = waitRecords(t, c, "%DLQ%g1", 0, 1)
	if string(rs[0].Data) != "bad" || protocol.Property(rs[0].Properties, "reason") != "poison pill" {
		t.Fatalf("%+v %q", rs[0], rs[0].Properties)
	}
}

func TestRetryBadInput(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	if code, _ := retry(t, c, "g", 12345678, 1, ""); code != 404 {
		t.Fatalf("unknown msgId: %d", code)
	}
	for _, line := range []string{"retry g 1 1\r\n", "retry g x 1 1\r\n", "retry g 1 -3 1\r\n", "retry bad/name 1 1 1\r\n", "retry g 1 1 1 a b\r\n"} {
		c.Send(line)
		if r := c.Reply(); r.Code != 400 {
			t.Fatalf("%q: %d %s", line, r.Code, r.Body)
		}
	}
	// A delayed message not yet delivered cannot be given back.
	id, _, _ := putProps(t, c, "test", 0, "delay=18", "x", 3)
	if code, _ := retry(t, c, "g", id, 1, ""); code != 404 {
		t.Fatalf("retry of a %%SCHEDULE%% record: %d", code)
	}
}

// TestRetryReasonCannotReroute: a reason holding '&' or '=' could add
// realTopic/realPartition to the retried record and route the message into
// any topic (here the transaction log): it is answered 400 and nothing is
// stored; the same text URL-escaped is kept and reads back as sent.
func TestRetryReasonCannotReroute(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	id, _, _ := c.Put("test", 0, "m", 1)
	code, body := retry(t, c, "g", id, 1, "x&realTopic=%25TX_OP%25&realPartition=0")
	if code != 400 || !strings.Contains(body, "reason") {
		t.Fatalf("retry with '&' and '=' in the reason: %d %s", code, body)
	}
	if code, body := retry(t, c, "g", id, 1, "x%26realTopic%3D%2525TX_OP%2525%26realPartition%3D0"); code != 200 {
		t.Fatalf("retry with an escaped reason: %d %s", code, body)
	}
	rs := waitRecords(t, c, "%RETRY%g", 0, 0)
	if len(rs) != 1 || protocol.Property(rs[0].Properties, "reason") != "x&realTopic=%25TX_OP%25&realPartition=0" {
		t.Fatalf("retried records %+v", rs)
	}
	if rs := get(t, c, "%TX_OP%", 0, 0, 0); len(rs) != 0 {
		t.Fatalf("delivered into %%TX_OP%%: %+v", rs)
	}
}
