package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// shortLadder makes every delay level short (level n waits n×50ms).
func shortLadder(o *brokertest.Options) {
	var b strings.Builder
	b.WriteString("messageDelayLevel=")
	for i := 1; i <= 18; i++ {
		fmt.Fprintf(&b, "%dms ", i*50)
	}
	b.WriteString("\n")
	o.ExtraINI += b.String()
}

// dlq reads every message of the group's dead-letter queue on broker b.
func dlq(t *testing.T, b *brokertest.Broker, group string) []Message {
	t.Helper()
	adm, err := NewAdmin(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	var out []Message
	var off int64
	for {
		res, err := adm.Fetch(context.Background(), b.Addr, DLQTopic(group), 0, off, 1<<20)
		if err != nil || len(res.Messages) == 0 {
			return out
		}
		out = append(out, res.Messages...)
		off = res.NextOffset
	}
}

func TestBrokerRetryLadderThenDLQ(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 2})
	b := cl.start(1, shortLadder)
	p := cl.producer()
	sendN(t, p, "pay", "m", 3)
	var mu sync.Mutex
	seen := map[string][]int{} // body → reconsume times seen
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		seen[string(m.Body)] = append(seen[string(m.Body)], m.ReconsumeTimes)
		mu.Unlock()
		if m.Topic != "pay" {
			t.Errorf("handler saw topic %q", m.Topic)
		}
		return errors.New("always fails")
	}
	cl.consumer("g", "pay", "*", h, func(c *Config) {
		c.Consumer.Concurrency = 2
		c.Consumer.RetryPolicy = &BrokerRetry{MaxReconsumeTimes: 3}
	})
	zktest.Eventually(t, 60*time.Second, func() bool { return len(dlq(t, b, "g")) == 3 }, "3 dead letters")
	mu.Lock()
	for body, times := range seen {
		if fmt.Sprint(times) != "[0 1 2 3]" {
			t.Errorf("%s: reconsume times %v, want [0 1 2 3]", body, times)
		}
	}
	mu.Unlock()
	var bodies []string
	for _, m := range dlq(t, b, "g") {
		bodies = append(bodies, string(m.Body))
		if m.Properties[PropRetryTopic] != "pay" || !strings.Contains(m.Properties[PropReason], "always fails") || m.ReconsumeTimes != 4 {
			t.Errorf("dead letter %v %+v", m, m.Properties)
		}
	}
	sort.Strings(bodies)
	if fmt.Sprint(bodies) != "[m-0 m-1 m-2]" {
		t.Fatalf("dead letters %v", bodies)
	}
	// The original partitions were committed past every message.
	zktest.Eventually(t, 10*time.Second, func() bool {
		var n int64
		for _, o := range cl.committed("g", "pay") {
			n += o.Offset
		}
		return n == 3
	}, "offsets committed past the given-back messages")
}

func TestBrokerRetrySucceedsLater(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1})
	cl.start(1, shortLadder)
	p := cl.producer()
	sendN(t, p, "pay", "m", 5)
	c := newCollector()
	h := func(ctx context.Context, m *Message) error {
		if m.ReconsumeTimes == 0 && m.Offset%2 == 0 {
			return RetryLater(100 * time.Millisecond)
		}
		c.add(m)
		return nil
	}
	cl.consumer("g", "pay", "*", h, func(c *Config) { c.Consumer.Concurrency = 4 })
	zktest.Eventually(t, 60*time.Second, func() bool { return c.count() >= 5 }, "5 handled")
	retried := 0
	for _, m := range c.snapshot() {
		if m.ReconsumeTimes == 1 {
			retried++
			if m.Topic != "pay" || m.Properties[PropOrigMsgID] == "" {
				t.Errorf("retried message %v %+v", m, m.Properties)
			}
		}
	}
	if retried != 3 {
		t.Fatalf("%d messages came back through the retry topic, want 3", retried)
	}
}

// Ordered consumers retry in place, blocking their partition, then
// dead-letter the message and move on.
func TestOrderedRetryInPlaceThenDLQ(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1})
	b := cl.start(1)
	p := cl.producer()
	sendN(t, p, "pay", "m", 3)
	var mu sync.Mutex
	var order []string
	attempts := 0
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		if string(m.Body) == "m-1" {
			attempts++
			if m.Attempt != attempts { // retried in place: the handler can tell
				t.Errorf("attempt %d of m-1 has Message.Attempt %d", attempts, m.Attempt)
			}
			return errors.New("poison")
		}
		order = append(order, string(m.Body))
		return nil
	}
	cl.consumer("g", "pay", "*", h, func(c *Config) {
		c.Consumer.RetryPolicy = &BrokerRetry{OrderedAttempts: 2, OrderedBackoff: 20 * time.Millisecond}
	})
	zktest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 }, "m-0 and m-2 handled")
	mu.Lock()
	if fmt.Sprint(order) != "[m-0 m-2]" || attempts != 3 {
		t.Fatalf("order %v, %d attempts of m-1 (want 3: 1 + 2 in place)", order, attempts)
	}
	mu.Unlock()
	d := dlq(t, b, "g")
	if len(d) != 1 || string(d[0].Body) != "m-1" || d[0].Properties[PropReason] != "poison" {
		t.Fatalf("dead letters %v", d)
	}
}

// A retried message passes the subscription's SQL expression again:
// `reconsumeTimes = 0 OR k = 'keep'` lets every first delivery through, and
// of the retries only the one with k=keep. Retries come back in the order
// they were given back (one level, one partition, one handler at a time), so
// when the kept one is handled the others were already filtered out.
func TestBrokerRetryAppliesSQL(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1})
	cl.start(1, shortLadder)
	p := cl.producer()
	ctx := context.Background()
	for i, k := range []string{"drop", "drop", "drop", "keep"} {
		if _, err := p.Send(ctx, &Message{Topic: "pay", Body: []byte(fmt.Sprintf("%s-%d", k, i)), Properties: map[string]string{"k": k}}); err != nil {
			t.Fatal(err)
		}
	}
	c := newCollector()
	h := func(ctx context.Context, m *Message) error {
		c.add(m)
		if m.ReconsumeTimes == 0 {
			return RetryLater(100 * time.Millisecond)
		}
		return nil
	}
	cl.consumer("g", "pay", SQL("reconsumeTimes = 0 OR k = 'keep'"), h, func(c *Config) { c.Consumer.Concurrency = 1 })
	zktest.Eventually(t, 60*time.Second, func() bool {
		for _, m := range c.snapshot() {
			if m.ReconsumeTimes == 1 {
				return true
			}
		}
		return false
	}, "the kept message handled again")
	for _, m := range c.snapshot() {
		if m.ReconsumeTimes > 0 && string(m.Body) != "keep-3" {
			t.Errorf("retried %s (reconsumeTimes %d) passed `k = 'keep'`", m.Body, m.ReconsumeTimes)
		}
	}
}

// A reason is cut to the broker's bound on its escaped form, between runes.
func TestCutReason(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int // bytes kept
	}{
		{"", 0},
		{strings.Repeat("a", maxReason), maxReason},
		{strings.Repeat("a", maxReason+1), maxReason},
		{strings.Repeat(" ", 200), maxReason / 3}, // %20 each
		{strings.Repeat("é", 100), 2 * (maxReason / 6)},
		{"a" + strings.Repeat("é", 100), 1 + 2*((maxReason-1)/6)},
	} {
		got := cutReason(c.in)
		if len(got) != c.want || !strings.HasPrefix(c.in, got) || !utf8.ValidString(got) {
			t.Errorf("cutReason(%d bytes) kept %d bytes (valid %v), want %d", len(c.in), len(got), utf8.ValidString(got), c.want)
		}
		if n := len(protocol.AppendEscaped(nil, got)); n > maxReason {
			t.Errorf("cutReason(%d bytes) escapes to %d bytes, more than %d", len(c.in), n, maxReason)
		}
	}
}
