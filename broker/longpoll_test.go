package broker_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// Parked gets are answered by the goroutine that makes their record
// readable, the producer's reader among them (longpoll.go). A consumer that
// stops reading must not stall that producer: once its socket is full, the
// rest of a reply (cut in the middle) and every later one go to the
// consumer's writer, in order. Here 300 parked gets (one per partition) of
// ~15 KiB records (over
// 4 MB, more than a loopback socket holds) are answered while the consumer
// reads nothing; every put is acknowledged, then the consumer gets every
// record intact.
func TestParkedGetsOfAConsumerThatDoesNotRead(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"big": 300}})
	cons, prod := b.Dial(), b.Dial()
	const n = 300
	var gets strings.Builder
	for i := range n {
		fmt.Fprintf(&gets, "get big g %d 0 65536 %d 60000\r\n", i, i+1)
	}
	cons.Send(gets.String())
	deadline := time.Now().Add(60 * time.Second)
	for b.Server.Counters().LongPollWaiters < n { // every get is parked
		if time.Now().After(deadline) {
			t.Fatalf("only %d gets parked", b.Server.Counters().LongPollWaiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
	body := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 15<<10) }
	for i := range n {
		prod.SendBytes(protocol.AppendPut(nil, "big", int32(i), 0, protocol.ChecksumNone, "", int32(i), body(i)))
		if r := prod.Reply(); r.Code != 200 { // the producer is never held up by the consumer
			t.Fatalf("put %d: %+v", i, r)
		}
	}
	seen := make(map[int32]bool)
	for range n {
		r := cons.Reply()
		if r.Kind != protocol.ReplyValue {
			t.Fatalf("get %d answered %d %q", r.Opaque, r.Code, r.Body)
		}
		recs := brokertest.Records(t, r.Body)
		if len(recs) == 0 || !bytes.Equal(recs[0].Data, body(int(r.Opaque-1))) || recs[0].Partition != r.Opaque-1 {
			t.Fatalf("get %d: wrong or damaged record", r.Opaque)
		}
		seen[r.Opaque] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct gets answered, want %d", len(seen), n)
	}
}

// The gets parked on one connection are bounded (maxParkedGetsPerConnection,
// longpoll.go): beyond it a get that finds nothing is answered 503 at once
// instead of holding a parkedGet, a timer and a store waiter for as long as
// the client likes. The parked ones still wait, and are answered by a put.
func TestParkedGetsPerConnectionAreBounded(t *testing.T) {
	const limit, n = 64, 100
	b := brokertest.RunBroker(t, brokertest.Options{ExtraINI: fmt.Sprintf("maxParkedGetsPerConnection=%d\n", limit)})
	c := b.Dial()
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "get test g 0 0 1024 %d 600000\r\n", i)
	}
	c.Send(sb.String())
	for range n - limit {
		r, err := c.TryReply(20 * time.Second)
		if err != nil {
			t.Fatalf("%d gets parked and no refusal: %v", b.Server.Counters().LongPollWaiters, err)
		}
		if r.Code != 503 || r.Opaque < limit || !strings.Contains(string(r.Body), "maxParkedGetsPerConnection") {
			t.Fatalf("get %d beyond the bound: %d %q, want 503 with the reason", r.Opaque, r.Code, r.Body)
		}
	}
	if w := b.Server.Counters().LongPollWaiters; w != limit {
		t.Fatalf("%d gets parked on the connection, want %d", w, limit)
	}
	b.Dial().Put("test", 0, "hello", 1)
	for range limit {
		if r, err := c.TryReply(20 * time.Second); err != nil || r.Kind != protocol.ReplyValue {
			t.Fatalf("parked get after the put: %+v %v", r, err)
		}
	}
	// Answered, they make room: the next get parks again.
	c.Send("get test g 0 1 1024 500 600000\r\n")
	deadline := time.Now().Add(20 * time.Second)
	for b.Server.Counters().LongPollWaiters != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d gets parked after the others were answered, want 1", b.Server.Counters().LongPollWaiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// maxWaitMs is at most 2^31-1: the broker turns it into a time.Duration,
// which overflowed for larger values (a get answered 404 at once, or after
// an arbitrary time). A larger one is a 400; the largest one waits.
func TestHugeMaxWaitDoesNotOverflow(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	c.Send("get test g 0 0 1024 7 9223372036854775807\r\nget test g 0 0 1024 8 2147483647\r\n")
	if r := c.Reply(); r.Code != 400 || r.Opaque != 7 {
		t.Fatalf("get with maxWaitMs=2^63-1: %d %q, want 400", r.Code, r.Body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.Server.Counters().LongPollWaiters != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the get with maxWaitMs=2^31-1 did not park")
		}
		if r, err := c.TryReply(time.Millisecond); err == nil {
			t.Fatalf("get with maxWaitMs=2^31-1 on an empty partition answered at once: %d %q", r.Code, r.Body)
		}
	}
	b.Dial().Put("test", 0, "hello", 1)
	if r, err := c.TryReply(20 * time.Second); err != nil || r.Kind != protocol.ReplyValue || r.Opaque != 8 {
		t.Fatalf("parked get after the put: %+v %v", r, err)
	}
}

// A long-polling get may name any partition of any topic the broker takes
// ([topic=*]), written or not. Parking it created that partition in the
// store for good, so a client polling fresh names grew the broker with what
// it sent. Such a get now waits without a partition (store/wait.go): after
// the gets expire nothing is left, and a get parked on a never-written
// partition is still answered by the first put there, from another
// connection.
func TestLongPollOnUnwrittenTopicsDoesNotGrowTheStore(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"*": 4}})
	c := b.Dial()
	const n = 1000
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "get nosuch-%d g %d 0 1024 %d 1\r\n", i, i%4, i)
	}
	c.Send(sb.String())
	for range n {
		if r := c.Reply(); r.Code != 404 {
			t.Fatalf("get %d: %d %q, want 404 at the deadline", r.Opaque, r.Code, r.Body)
		}
	}
	if parts, pending := broker.StorePartitions(b.Server, "nosuch-"); parts != 0 || pending != 0 {
		t.Fatalf("after %d expired long polls on unwritten topics the store holds %d of their partitions and %d pending waits",
			n, parts, pending)
	}

	// Two gets parked on a partition that does not exist yet, one cancelled
	// by its deadline, one woken by the first put.
	c.Send("get fresh g 2 0 1024 7 60000\r\nget fresh g 2 0 1024 8 1\r\n")
	if r := c.Reply(); r.Code != 404 || r.Opaque != 8 {
		t.Fatalf("short get: %+v, want 404 for opaque 8", r)
	}
	if _, pending := broker.StorePartitions(b.Server, ""); pending != 1 {
		t.Fatalf("%d partitions waited for, want 1 (fresh/2)", pending)
	}
	b.Dial().Put("fresh", 2, "hello", 9)
	r := c.Reply()
	if r.Kind != protocol.ReplyValue || r.Opaque != 7 {
		t.Fatalf("parked get: %+v, want the record", r)
	}
	if recs := brokertest.Records(t, r.Body); len(recs) != 1 || string(recs[0].Data) != "hello" {
		t.Fatalf("parked get: %d records", len(recs))
	}
	if _, pending := broker.StorePartitions(b.Server, ""); pending != 0 {
		t.Fatalf("%d partitions still waited for", pending)
	}
}
