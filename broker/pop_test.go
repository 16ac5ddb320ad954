package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

type popped struct {
	attempt int
	rec     protocol.Record
	handle  string
}

// popCmd sends a pop and returns its deliveries (nil on 404).
func popCmd(t *testing.T, c *brokertest.Client, topic, group string, max int, invMs, waitMs int64) []popped {
	t.Helper()
	c.Send(fmt.Sprintf("pop %s %s %d %d %d 7\r\n", topic, group, max, invMs, waitMs))
	r, err := c.TryReply(time.Duration(waitMs)*time.Millisecond + 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != protocol.ReplyValue {
		if r.Code == 404 {
			return nil
		}
		t.Fatalf("pop: %d %s", r.Code, r.Body)
	}
	var out []popped
	err = protocol.PopValue(r.Body, func(attempt int, rec []byte) error {
		m, _, err := protocol.DecodeRecord(rec, 0)
		if err != nil {
			return err
		}
		m.Data = append([]byte(nil), m.Data...)
		out = append(out, popped{attempt: attempt, rec: m, handle: fmt.Sprintf("%s:%d:%d:%d", topic, m.Partition, m.QueueOffset, attempt)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func finish(t *testing.T, c *brokertest.Client, verb, group, arg string, hs []string) protocol.Reply {
	t.Helper()
	data := strings.Join(hs, " ")
	if arg != "" {
		arg += " "
	}
	c.Send(fmt.Sprintf("%s %s %s%d 9\r\n%s", verb, group, arg, len(data), data))
	return c.Reply()
}

// Two members of one group share one partition: every message is
// delivered to exactly one of them while both acknowledge.
func TestPopTwoMembersShareOnePartition(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	p := b.Dial()
	const n = 500
	for i := 0; i < n; i++ {
		p.Put("test", 0, fmt.Sprintf("m%d", i), int32(i))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for m := 0; m < 2; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.Dial()
			defer c.Close()
			for {
				mu.Lock()
				done := len(seen) >= n
				mu.Unlock()
				if done {
					return
				}
				ds := popCmd(t, c, "test", "g", 16, 60000, 200)
				var hs []string
				mu.Lock()
				for _, d := range ds {
					seen[string(d.rec.Data)]++
					hs = append(hs, d.handle)
				}
				mu.Unlock()
				if len(hs) > 0 {
					if r := finish(t, c, "ack", "g", "", hs); r.Code != 200 || string(r.Body) != fmt.Sprint(len(hs)) {
						t.Errorf("ack: %d %s", r.Code, r.Body)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for k, v := range seen {
		if v != 1 {
			t.Fatalf("%s delivered %d times", k, v)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d delivered", len(seen), n)
	}
	if ds := popCmd(t, b.Dial(), "test", "g", 16, 60000, 0); len(ds) != 0 {
		t.Fatalf("after all acks: %d more", len(ds))
	}
}

// A member that stops acknowledging: its messages go to the other member
// once the invisibility time ends, with attempt 2; after maxDeliveries a
// message goes to %DLQ%<group>.
func TestPopRedeliveryAndDLQ(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}, ExtraINI: "maxDeliveries=3\n"})
	p := b.Dial()
	for i := 0; i < 5; i++ {
		p.Put("test", 0, fmt.Sprintf("m%d", i), int32(i))
	}
	slow, other := b.Dial(), b.Dial()
	got := popCmd(t, slow, "test", "g", 5, 300, 1000)
	if len(got) != 5 {
		t.Fatalf("slow member got %d", len(got))
	}
	// the other member waits (long poll) and gets them once 300 ms passed
	var again []popped
	for len(again) < 5 {
		again = append(again, popCmd(t, other, "test", "g", 5, 300, 30000)...)
	}
	for _, d := range again {
		if d.attempt != 2 {
			t.Fatalf("redelivered with attempt %d", d.attempt)
		}
	}
	// the slow member's late acks are refused: not current deliveries
	if r := finish(t, slow, "ack", "g", "", []string{got[0].handle}); r.Code != 404 {
		t.Fatalf("stale ack: %d %s", r.Code, r.Body)
	}
	// nobody acks: a third delivery, then the DLQ
	var third []popped
	for len(third) < 5 {
		third = append(third, popCmd(t, other, "test", "g", 5, 300, 30000)...)
	}
	for _, d := range third {
		if d.attempt != 3 {
			t.Fatalf("third delivery with attempt %d", d.attempt)
		}
	}
	var dead []protocol.Record
	deadline := time.Now().Add(60 * time.Second)
	for len(dead) < 5 && time.Now().Before(deadline) {
		p.Send("get %DLQ%g g 0 0 65536 5 1000\r\n")
		if r := p.Reply(); r.Kind == protocol.ReplyValue {
			dead = brokertest.Records(t, r.Body)
		}
	}
	if len(dead) != 5 {
		t.Fatalf("%d dead letters", len(dead))
	}
	if ds := popCmd(t, other, "test", "g", 5, 300, 500); len(ds) != 0 {
		t.Fatalf("delivered after the DLQ: %d", len(ds))
	}
}

// release, extend and reject over TCP, one handle inline.
func TestPopReleaseExtendReject(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	c.Put("test", 0, "a", 1)
	c.Put("test", 0, "b", 2)
	ds := popCmd(t, c, "test", "g", 2, 60000, 1000)
	if len(ds) != 2 {
		t.Fatalf("%d", len(ds))
	}
	c.Send("extend g 60000 " + ds[0].handle + " 3\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("extend: %d %s", r.Code, r.Body)
	}
	c.Send("release g 0 " + ds[0].handle + " 4\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("release: %d %s", r.Code, r.Body)
	}
	c.Send("reject g " + ds[1].handle + " 5\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("reject: %d %s", r.Code, r.Body)
	}
	again := popCmd(t, c, "test", "g", 2, 60000, 1000)
	if len(again) != 1 || string(again[0].rec.Data) != "a" || again[0].attempt != 2 {
		t.Fatalf("after release: %+v", again)
	}
	c.Send("get %DLQ%g g 0 0 65536 5 30000\r\n")
	if r := c.Reply(); r.Kind != protocol.ReplyValue || string(brokertest.Records(t, r.Body)[0].Data) != "b" {
		t.Fatalf("rejected message not in the DLQ: %d %s", r.Code, r.Body)
	}
}

// Bad input gets 400 and the connection keeps working.
func TestPopBadInput(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	for _, line := range []string{
		"pop test g 0 1000 0 1",           // max < 1
		"pop test g 5000 1000 0 1",        // max > 1024
		"pop test g 1 10 0 1",             // invisibility < 100 ms
		"pop test g 1 1000 -1 1",          // negative wait
		"pop test bad/group 1 1000 0 1",   // bad name
		"pop test g 1 1000 0",             // missing opaque
		"pop test g 1 1000 0 1 * a%20%3D", // bad where
		"ack g nohandle 1",
		"ack g test:0:x:1 1",
		"ack g test:0:1:0 1",
		"ack g",
		"release g x test:0:0:1 1",
		"extend g 10 test:0:0:1 1",
		"reject g test:0:0:1:5 1",
	} {
		c.Send(line + "\r\n")
		if r := c.Reply(); r.Code != 400 {
			t.Errorf("%q: %d %s", line, r.Code, r.Body)
		}
	}
	// a data block with a bad handle: 400, nothing applied, framing kept
	if r := finish(t, c, "ack", "g", "", []string{"test:0:0:1", "junk"}); r.Code != 400 {
		t.Errorf("bad handle list: %d %s", r.Code, r.Body)
	}
	// unknown topic: 404
	c.Send("pop nosuch g 1 1000 0 1\r\n")
	if r := c.Reply(); r.Code != 404 {
		t.Errorf("unknown topic: %d %s", r.Code, r.Body)
	}
	c.Send("version 3\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("connection broken after bad input: %d", r.Code)
	}
}

// A slave does not run the delivery service (it must not write to its log).
func TestPopRefusedOnSlave(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}, ExtraINI: "[slave]\nslaveId=0\n"})
	c := b.Dial()
	c.Send("pop test g 1 1000 0 1\r\n")
	if r := c.Reply(); r.Code != 503 {
		t.Fatalf("pop on a slave: %d %s", r.Code, r.Body)
	}
	if _, err := b.Pop().Receive(context.Background(), "g", "test", nil, 1, time.Second); err == nil {
		t.Fatal("Receive on a slave succeeded")
	}
}

// An ack some of whose handles are not current is answered 404 naming how
// many were stale and which (the current ones are applied).
func TestPopAckReportsEveryStaleHandle(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	for i := 0; i < 3; i++ {
		c.Put("test", 0, fmt.Sprintf("m%d", i), int32(i))
	}
	ds := popCmd(t, c, "test", "g", 3, 60000, 1000)
	if len(ds) != 3 {
		t.Fatalf("%d delivered", len(ds))
	}
	if r := finish(t, c, "ack", "g", "", []string{ds[0].handle, ds[1].handle}); r.Code != 200 {
		t.Fatalf("ack: %d %s", r.Code, r.Body)
	}
	r := finish(t, c, "ack", "g", "", []string{ds[0].handle, ds[2].handle, ds[1].handle, "test:0:99:1", "other:0:0:1"})
	body := string(r.Body)
	if r.Code != 404 || !strings.HasPrefix(body, "1 of 5 applied; 4 not current") {
		t.Fatalf("mixed ack: %d %s", r.Code, body)
	}
	for _, h := range []string{ds[0].handle, ds[1].handle, "test:0:99:1", "other:0:0:1"} {
		if !strings.Contains(body, " "+h) {
			t.Errorf("stale handle %s not named: %s", h, body)
		}
	}
	if strings.Contains(body, ds[2].handle) {
		t.Errorf("the applied handle is named stale: %s", body)
	}
	if ds := popCmd(t, c, "test", "g", 3, 60000, 0); len(ds) != 0 {
		t.Fatalf("delivered after all acks: %+v", ds)
	}
}

// Replies come back in request order when a pop parks behind other
// commands of the same write and is answered at once: here an ack, a pop
// that finds nothing and parks, then a release (in the same write) that
// makes a message ready and wakes the pop while the reader still works
// through the write. The pop's reply once overtook the ack's, which was
// still in the reader's queue.
func TestPopParkedReplyKeepsOrder(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}, ExtraINI: "maxDeliveries=10000\n"})
	c := b.Dial()
	c.Put("test", 0, "m", 1)
	ds := popCmd(t, c, "test", "g", 1, 60000, 1000)
	if len(ds) != 1 {
		t.Fatalf("%d delivered", len(ds))
	}
	h := ds[0].handle
	tail := strings.Repeat("version 4\r\n", 200)
	for i := 0; i < 50; i++ {
		c.Send("ack g test:0:999:1 1\r\npop test g 1 60000 5000 2\r\nrelease g 0 " + h + " 3\r\n" + tail)
		var order []int32
		for len(order) < 203 {
			r, err := c.TryReply(30 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, r.Opaque)
			if r.Opaque == 2 {
				if r.Kind != protocol.ReplyValue {
					t.Fatalf("pop: %d %s", r.Code, r.Body)
				}
				_ = protocol.PopValue(r.Body, func(attempt int, rec []byte) error {
					m, _, err := protocol.DecodeRecord(rec, 0)
					h = fmt.Sprintf("test:0:%d:%d", m.QueueOffset, attempt)
					return err
				})
			}
		}
		if order[0] != 1 {
			t.Fatalf("round %d: the pop's reply came before the ack's (opaques %v…)", i, order[:4])
		}
	}
}

// Each parked pop is a goroutine with its own timer: one connection parks at
// most 512 (maxParkedPops), and a pipelined pop beyond that which finds
// nothing is answered 503 at once, so a client pipelining pops with a long
// maxWait does not grow the broker's goroutines with what it sends.
func TestParkedPopsPerConnectionCapped(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	defer c.Close()
	before := runtime.NumGoroutine()
	const n = 5000
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "pop test g 1 1000 600000 %d\r\n", i)
	}
	c.Send(sb.String())
	busy := 0
	for busy < n-512 {
		r, err := c.TryReply(10 * time.Second)
		if err != nil {
			t.Fatalf("%d pipelined pops: %d answered 503, then %v", n, busy, err)
		}
		if r.Code != 503 || !strings.Contains(string(r.Body), "pops already wait on this connection") {
			t.Fatalf("reply %d: %d %q, want 503 (too many parked pops)", busy, r.Code, r.Body)
		}
		busy++
	}
	if grown := runtime.NumGoroutine() - before; grown >= 1000 {
		t.Fatalf("%d pipelined pops (%d bytes sent) left %d more goroutines in the broker", n, sb.Len(), grown)
	}
	// the parked ones are still answered, at their wait's end (or a message)
	c.Send("put test 0 1 0 -1\r\nm")
	kinds := map[string]int{}
	for i := 0; i < 2; i++ { // the put's reply and a parked pop's delivery, in either order
		r, err := c.TryReply(10 * time.Second)
		if err != nil {
			t.Fatalf("after a put: %v (got %v)", err, kinds)
		}
		switch {
		case r.Opaque == -1 && r.Code == 200:
			kinds["put"]++
		case r.Kind == protocol.ReplyValue:
			kinds["pop"]++
		default:
			t.Fatalf("after a put: %+v %q", r, r.Body)
		}
	}
	if kinds["put"] != 1 || kinds["pop"] != 1 {
		t.Fatalf("after a put: %v, want its reply and one parked pop's delivery", kinds)
	}
}
