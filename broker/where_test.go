package broker_test

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// whereMsg is one message of the mixed stream and what the oracle knows
// about it.
type whereMsg struct {
	tag    string
	amount int // -1: no amount property
	region string
}

func mixedStream(n int) []whereMsg {
	tags := []string{"paid", "refunded", "created", ""}
	regions := []string{"eu", "us", "eu west", "O'Hara"}
	out := make([]whereMsg, n)
	for i := range out {
		m := whereMsg{tag: tags[i%len(tags)], amount: (i * 37) % 300, region: regions[(i/3)%len(regions)]}
		if i%5 == 0 {
			m.amount = -1
		}
		out[i] = m
	}
	return out
}

func (m whereMsg) props() string {
	v := url.Values{}
	if m.tag != "" {
		v.Set("tag", m.tag)
	}
	if m.amount >= 0 {
		v.Set("amount", strconv.Itoa(m.amount))
	}
	v.Set("region", m.region)
	return v.Encode()
}

// drainWhere reads partition 0 from offset 0 to end with a get carrying
// where (raw, already escaped) and tags, following 301s, and returns the
// offsets delivered.
func drainWhere(t *testing.T, c *brokertest.Client, tags, where string, end int64, maxSize int) []int64 {
	t.Helper()
	var got []int64
	off := int64(0)
	for op := int32(1000); off < end; op++ {
		c.Send(fmt.Sprintf("get test g 0 %d %d %d 0 %s %s\r\n", off, maxSize, op, tags, where))
		r := c.Reply()
		switch {
		case r.Kind == protocol.ReplyValue:
			for _, rec := range brokertest.Records(t, r.Body) {
				got = append(got, rec.QueueOffset)
				off = rec.QueueOffset + 1
			}
		case r.Code == protocol.StatusMoved:
			next, err := strconv.ParseInt(string(r.Body), 10, 64)
			if err != nil || next <= off {
				t.Fatalf("301 %q at offset %d", r.Body, off)
			}
			off = next
		case r.Code == protocol.StatusNotFound:
			return got
		default:
			t.Fatalf("get at %d: %d %q", off, r.Code, r.Body)
		}
	}
	return got
}

// An expression selects exactly the messages the oracle selects out of a
// mixed stream, across many gets (small maxSize), with 301 "continue from"
// replies over runs of misses, alone and combined with a tag filter.
func TestWhereSelectsExactly(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	stream := mixedStream(400)
	for i, m := range stream {
		data := m.props() + "\nbody-" + strconv.Itoa(i)
		c.Send(fmt.Sprintf("put test 0 %d 2 %d\r\n%s", len(data), i, data))
		expect(t, c.Reply(), protocol.ReplyResult, 200, int32(i), "")
	}
	cases := []struct {
		tags, expr string
		want       func(whereMsg) bool
	}{
		{"*", "TAGS IN ('paid','refunded') AND amount > 100",
			func(m whereMsg) bool { return (m.tag == "paid" || m.tag == "refunded") && m.amount > 100 }},
		{"*", "amount BETWEEN 10 AND 20 OR region = 'eu west'",
			func(m whereMsg) bool { return m.amount >= 10 && m.amount <= 20 || m.region == "eu west" }},
		{"*", "amount IS NULL", func(m whereMsg) bool { return m.amount < 0 }},
		{"*", "tag IS NULL AND region <> 'us'", func(m whereMsg) bool { return m.tag == "" && m.region != "us" }},
		{"*", "NOT (amount < 150)", func(m whereMsg) bool { return m.amount >= 150 }},
		{"*", "region = 'O''Hara' AND amount = 0", func(m whereMsg) bool { return m.region == "O'Hara" && m.amount == 0 }},
		{"*", "amount > 1000", func(whereMsg) bool { return false }},
		{"paid", "amount < 50", func(m whereMsg) bool { return m.tag == "paid" && m.amount >= 0 && m.amount < 50 }},
		{"paid||created", "region IN ('eu','us')", func(m whereMsg) bool {
			return (m.tag == "paid" || m.tag == "created") && (m.region == "eu" || m.region == "us")
		}},
	}
	for _, tc := range cases {
		var want []int64
		for i, m := range stream {
			if tc.want(m) {
				want = append(want, int64(i))
			}
		}
		esc := string(protocol.AppendEscaped(nil, tc.expr))
		for _, maxSize := range []int{1, 300, 1 << 20} {
			got := drainWhere(t, c, tc.tags, esc, int64(len(stream)), maxSize)
			if !slices.Equal(got, want) {
				t.Errorf("%q (tags %s, maxSize %d):\n got  %v\n want %v", tc.expr, tc.tags, maxSize, got, want)
			}
		}
	}
	// What a person types in telnet: + for spaces, quotes and operators raw.
	got := drainWhere(t, c, "*", "tag+=+'refunded'+AND+amount+>=+250", int64(len(stream)), 1<<20)
	var want []int64
	for i, m := range stream {
		if m.tag == "refunded" && m.amount >= 250 {
			want = append(want, int64(i))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("telnet form: got %v, want %v", got, want)
	}
}

// A bad expression is refused with its position, the connection stays
// usable, and many distinct expressions on one connection keep working
// (the per-connection cache is bounded, not a leak).
func TestWhereBadExpressionAndCache(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	c.Put("test", 0, "x", 1)
	for _, tc := range []struct{ expr, msg string }{
		{"tag = 'paid' AND", "syntax error at position 17"},
		{"amount > 'x'", "syntax error at position 10: 'x' cannot be ordered"},
		{"tag = 'paid", "syntax error at position 7: unterminated string"},
	} {
		c.Send("get test g 0 0 1024 7 0 * " + string(protocol.AppendEscaped(nil, tc.expr)) + "\r\n")
		expect(t, c.Reply(), protocol.ReplyResult, 400, 7, tc.msg)
	}
	c.Send("version 8\r\n")
	expect(t, c.Reply(), protocol.ReplyResult, 200, 8, "")
	for i := 0; i < 200; i++ {
		expr := fmt.Sprintf("n IS NULL AND %s = %d", strings.Repeat("p", 1+i%50), i)
		c.Send(fmt.Sprintf("get test g 0 0 1024 %d 0 * %s\r\n", i, protocol.AppendEscaped(nil, expr)))
		expect(t, c.Reply(), protocol.ReplyResult, 301, int32(i), "1")
	}
}

// A parked (long-polling) get with an expression answers with the first
// matching message published while it waits.
func TestWhereLongPoll(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	p := b.Dial()
	c.Send("get test g 0 0 65536 9 60000 * amount+>+5\r\n")
	for _, data := range []string{"amount=9\nyes"} {
		msg := data
		p.Send(fmt.Sprintf("put test 0 %d 2 1\r\n%s", len(msg), msg))
		expect(t, p.Reply(), protocol.ReplyResult, 200, 1, "")
	}
	r := c.Reply()
	if r.Kind != protocol.ReplyValue || r.Opaque != 9 {
		t.Fatalf("parked get: %+v %q", r, r.Body)
	}
	if recs := brokertest.Records(t, r.Body); len(recs) != 1 || string(recs[0].Data) != "yes" {
		t.Fatalf("records %+v", recs)
	}
}
