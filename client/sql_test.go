package client

import (
	"context"
	"errors"
	"github.com/metaqgo/metaq/protocol"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol/filter"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A bad expression is refused at Subscribe, with its position.
func TestSubscribeSQL(t *testing.T) {
	c, err := NewConsumer(Config{ZKConnect: "127.0.0.1:1", ZKConnectionTimeout: 300 * time.Millisecond, Logger: testLogger()}, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := func(context.Context, *Message) error { return nil }
	err = c.Subscribe("t1", SQL("TAGS = 'paid' AND amount >"), h)
	var se *filter.SyntaxError
	if !errors.As(err, &se) || se.Pos != 27 || !strings.Contains(err.Error(), "syntax error at position 27") {
		t.Fatalf("bad expression: %v", err)
	}
	if err := c.Subscribe("t1", SQL("a = '"+strings.Repeat("%", 2000)+"'"), h); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("over-long expression: %v", err)
	}
	if err := c.Subscribe("t1", SQL("TAGS = 'paid' AND amount > 100"), h); err != nil {
		t.Fatal(err)
	}
	s := c.subs["t1"]
	if s.getTags != "" || !s.filter.All() || s.where.String() != "TAGS = 'paid' AND amount > 100" {
		t.Fatalf("subscription %+v", s)
	}
}

type sqlMsg struct {
	tag    string
	amount int
}

// A group consumer with a SQL subscription receives exactly the messages
// the expression selects out of a mixed stream; Admin.FetchWith with Where
// too.
func TestSQLSubscription(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	p := cl.producer()
	ctx := ctxT(t, 60*time.Second)
	tags := []string{"paid", "refunded", "created"}
	var want []string
	for i := 0; i < 240; i++ {
		m := sqlMsg{tag: tags[i%3], amount: (i * 53) % 200}
		msg := &Message{Topic: "orders", Body: []byte("m-" + strconv.Itoa(i)), Tag: m.tag,
			Properties: map[string]string{"amount": strconv.Itoa(m.amount), "note": "a b&c=d"}}
		if i%7 == 0 {
			delete(msg.Properties, "amount")
		}
		if _, err := p.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if (m.tag == "paid" || m.tag == "refunded") && m.amount > 100 && i%7 != 0 {
			want = append(want, string(msg.Body))
		}
	}
	// One matching marker per partition, last: once both arrived, every
	// earlier message has been seen (delivery is in order per partition).
	parts, err := p.Partitions(ctx, "orders")
	if err != nil || len(parts) != 2 {
		t.Fatalf("partitions %v %v", parts, err)
	}
	for _, pt := range parts {
		if _, err := p.SendToPartition(ctx, &Message{Topic: "orders", Body: []byte("marker"), Tag: "paid",
			Properties: map[string]string{"amount": "1000"}}, pt); err != nil {
			t.Fatal(err)
		}
	}
	col := newCollector()
	cl.consumer("sql-group", "orders", SQL("TAGS IN ('paid','refunded') AND amount > 100 AND note = 'a b&c=d' OR amount = 1000"), col.handler)
	zktest.Eventually(t, 20*time.Second, func() bool {
		n := 0
		for _, m := range col.snapshot() {
			if string(m.Body) == "marker" {
				n++
			}
		}
		return n == 2
	}, "both markers delivered")
	var got []string
	for _, m := range col.snapshot() {
		if string(m.Body) != "marker" {
			got = append(got, string(m.Body))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d messages, want %d:\n got  %v\n want %v", len(got), len(want), got, want)
	}

	a, err := NewAdmin(cl.config())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addr := cl.brokers[1].Addr
	n := 0
	for _, pt := range parts {
		off := int64(0)
		for {
			res, err := a.FetchWith(ctx, addr, FetchRequest{Topic: "orders", Partition: pt.Partition, Offset: off, Where: "amount = 1000"})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range res.Messages {
				if string(m.Body) != "marker" {
					t.Fatalf("fetched %q", m.Body)
				}
				n++
			}
			if !res.Moved && len(res.Messages) == 0 {
				break
			}
			off = res.NextOffset
		}
	}
	if n != 2 {
		t.Fatalf("fetched %d markers, want 2", n)
	}
	if _, err := a.FetchWith(ctx, addr, FetchRequest{Topic: "orders", Where: "amount >"}); err == nil || !strings.Contains(err.Error(), "position 9") {
		t.Fatalf("bad expression fetched: %v", err)
	}
}

// The client checks fetched records again before decoding them (a MetaQ
// broker ignores the expression); the offset moves past filtered ones.
func TestWhereMatcherFilter(t *testing.T) {
	var d decoder
	wm, err := d.whereMatcher("TAGS = 'paid' AND amount > 100 AND reconsumeTimes = 0")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := d.whereMatcher("TAGS = 'paid' AND amount > 100 AND reconsumeTimes = 0"); again != wm {
		t.Fatal("expression compiled again")
	}
	block := func(recs ...protocol.Record) []byte {
		var b []byte
		for i := range recs {
			r := &recs[i]
			r.Topic = []byte("t")
			buf := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
			protocol.EncodeRecord(buf, r)
			b = append(b, buf...)
		}
		return b
	}
	msgs, next, err := d.decodeBlockWhere(block(
		protocol.Record{QueueOffset: 0, Properties: []byte("tag=paid&amount=150")},
		protocol.Record{QueueOffset: 1, Properties: []byte("tag=paid&amount=50")},
		protocol.Record{QueueOffset: 2, Properties: []byte("tag=other&amount=150")},
		protocol.Record{QueueOffset: 3, Properties: []byte("tag=paid&amount=101"), ReconsumeTimes: 1},
	), wm)
	if err != nil || len(msgs) != 1 || msgs[0].Offset != 0 || msgs[0].Properties["amount"] != "150" || next != 4 {
		t.Fatalf("filtered %+v next %d: %v", msgs, next, err)
	}
	msgs, next, err = d.decodeBlockWhere(block(protocol.Record{QueueOffset: 1, Properties: []byte("tag=x")}), wm)
	if err != nil || len(msgs) != 0 || next != 2 {
		t.Fatalf("all filtered %+v next %d: %v", msgs, next, err)
	}
	if _, err := d.whereMatcher("amount >"); err == nil {
		t.Fatal("bad expression accepted")
	}
}
