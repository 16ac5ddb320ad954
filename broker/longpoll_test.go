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
