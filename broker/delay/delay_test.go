package delay_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// testLadder keeps level waits short: level n waits n×200ms except level 3 (1s).
const testLadder = "messageDelayLevel=200ms 400ms 1s 800ms 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s\n"

func runBroker(t *testing.T, o brokertest.Options) *brokertest.Broker {
	t.Helper()
	o.ExtraINI += testLadder
	if o.Topics == nil {
		o.Topics = map[string]int{"test": 4, "other": 1}
	}
	return brokertest.RunBroker(t, o)
}

// putProps sends a put whose data starts with a properties line and
// returns msgId, partition and the offset field.
func putProps(t *testing.T, c *brokertest.Client, topic string, part int, props, body string, opaque int32) (int64, int32, int64) {
	t.Helper()
	data := props + "\n" + body
	c.Send(fmt.Sprintf("put %s %d %d 2 %d\r\n%s", topic, part, len(data), opaque, data))
	r := c.Reply()
	if r.Code != 200 {
		t.Fatalf("put %q: %d %s", props, r.Code, r.Body)
	}
	id, p, off, err := protocol.ParsePutResult(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return id, p, off
}

// get fetches from topic/partition at offset, waiting up to waitMs.
func get(t *testing.T, c *brokertest.Client, topic string, part int, off int64, waitMs int) []protocol.Record {
	t.Helper()
	c.Send(fmt.Sprintf("get %s g %d %d 65536 7 %d\r\n", topic, part, off, waitMs))
	r, err := c.TryReply(time.Duration(waitMs)*time.Millisecond + 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case r.Kind == protocol.ReplyValue:
		return brokertest.Records(t, r.Body)
	case r.Code == 404:
		return nil
	}
	t.Fatalf("get %s-%d@%d: %d %s", topic, part, off, r.Code, r.Body)
	return nil
}

// waitRecords long-polls until a record is at off (30s deadline: a
// bound on a hung broker, not a timing assertion).
func waitRecords(t *testing.T, c *brokertest.Client, topic string, part int, off int64) []protocol.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rs := get(t, c, topic, part, off, 1000); len(rs) > 0 {
			return rs
		}
	}
	t.Fatalf("nothing arrived in %s-%d at %d", topic, part, off)
	return nil
}

func TestDeliverAtInvisibleUntilDue(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "sync"}[sync], func(t *testing.T) {
			b := runBroker(t, brokertest.Options{Sync: sync})
			c := b.Dial()
			due := time.Now().Add(1500 * time.Millisecond).UnixMilli()
			props := "tag=t1&keys=k1%20k2&deliverAt=" + strconv.FormatInt(due, 10)
			id, part, off := putProps(t, c, "test", 2, props, "hello later", 1)
			if off != -1 || part != 2 {
				t.Fatalf("put reply: partition %d offset %d, want 2 -1", part, off)
			}
			// Not visible before due: whatever a get answered before the due
			// time must be empty. (A get sent just before due may be served
			// just after it; only the time its answer was in hand proves an
			// early delivery.)
			for {
				rs := get(t, c, "test", 2, 0, 0)
				answered := time.Now().UnixMilli()
				if len(rs) > 0 {
					if answered < due {
						t.Fatalf("visible at %d, before its due time %d", answered, due)
					}
					break
				}
				if time.Now().UnixMilli() >= due {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			rs := waitRecords(t, c, "test", 2, 0)
			r := rs[0]
			if string(r.Data) != "hello later" || r.QueueOffset != 0 || string(r.Topic) != "test" || r.Partition != 2 {
				t.Fatalf("delivered %+v", r)
			}
			if r.StoreTime < due {
				t.Fatalf("stored at %d, before its due time %d", r.StoreTime, due)
			}
			if protocol.Property(r.Properties, "tag") != "t1" || strings.Join(protocol.Keys(r.Properties), ",") != "k1,k2" ||
				protocol.Property(r.Properties, "deliverAt") != strconv.FormatInt(due, 10) ||
				protocol.Property(r.Properties, "origMsgId") != strconv.FormatInt(id, 10) {
				t.Fatalf("properties %q", r.Properties)
			}
			if protocol.Property(r.Properties, "realTopic") != "" {
				t.Fatalf("routing properties leaked: %q", r.Properties)
			}
			// The tag filter and key index see the delivered message.
			c.Send("query key test k2 10 9\r\n")
			if rep := c.Reply(); rep.Kind != protocol.ReplyValue {
				t.Fatalf("query key: %+v", rep)
			}
		})
	}
}

func TestPastDeliverAtDeliversAtOnce(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	putProps(t, c, "test", 0, "deliverAt=1000", "old", 1)
	rs := waitRecords(t, c, "test", 0, 0)
	if string(rs[0].Data) != "old" {
		t.Fatalf("%+v", rs[0])
	}
}

func TestDelayLevel(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	id, _, off := putProps(t, c, "other", 0, "delay=3&tag=x", "level three", 1)
	if off != -1 {
		t.Fatalf("offset %d", off)
	}
	// The %SCHEDULE% record (query id) tells when it was stored.
	c.Send(fmt.Sprintf("query id %d 2\r\n", id))
	q := c.Reply()
	if q.Kind != protocol.ReplyValue {
		t.Fatalf("query id: %+v", q)
	}
	sched := brokertest.Records(t, q.Body)[0]
	if string(sched.Topic) != "%SCHEDULE%" || sched.Partition != 3 {
		t.Fatalf("scheduled as %s-%d", sched.Topic, sched.Partition)
	}
	rs := waitRecords(t, c, "other", 0, 0)
	if rs[0].StoreTime < sched.StoreTime+1000 {
		t.Fatalf("delivered at %d, stored at %d: level 3 waits 1s", rs[0].StoreTime, sched.StoreTime)
	}
	if string(rs[0].Data) != "level three" || protocol.Property(rs[0].Properties, "delay") != "" {
		t.Fatalf("%+v %q", rs[0], rs[0].Properties)
	}
}

func TestLevelsAreFIFOAndClamped(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	for i := 0; i < 50; i++ {
		putProps(t, c, "other", 0, "delay="+strconv.Itoa(1+i%2), "m"+strconv.Itoa(i), int32(i))
	}
	putProps(t, c, "other", 0, "delay=99", "clamped", 99) // level 18 (1s in the test ladder)
	seen := map[string]bool{}
	var off int64
	for len(seen) < 51 {
		for _, r := range waitRecords(t, c, "other", 0, off) {
			seen[string(r.Data)] = true
			off = r.QueueOffset + 1
		}
	}
}

func TestBadDelayAndSystemTopics(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	for _, props := range []string{"delay=x", "delay=-1", "deliverAt=soon", "deliverAt=" + strconv.FormatInt(time.Now().Add(400*24*time.Hour).UnixMilli(), 10)} {
		data := props + "\nbody"
		c.Send(fmt.Sprintf("put test 0 %d 2 5\r\n%s", len(data), data))
		if r := c.Reply(); r.Code != 400 {
			t.Fatalf("%s: %d %s", props, r.Code, r.Body)
		}
	}
	for _, topic := range []string{"%SCHEDULE%", "%RETRY%g", "%DLQ%g", "%OTHER%"} {
		c.Send(fmt.Sprintf("put %s 0 1 0 6\r\nx", topic))
		if r := c.Reply(); r.Code != 403 {
			t.Fatalf("put to %s: %d %s", topic, r.Code, r.Body)
		}
	}
	// delay=0 is not delayed.
	_, _, off := putProps(t, c, "test", 0, "delay=0", "now", 7)
	if off != 0 {
		t.Fatalf("delay=0 went to offset %d", off)
	}
	// Routing properties a client sets are not trusted.
	putProps(t, c, "test", 1, "delay=1&realTopic=other&realPartition=0", "mine", 8)
	rs := waitRecords(t, c, "test", 1, 0)
	if string(rs[0].Data) != "mine" {
		t.Fatalf("%+v", rs[0])
	}
}
