package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A group started FromLatest reads its retry topic from the beginning: the
// broker creates %RETRY%<group> (and registers it in ZooKeeper) when it
// writes the first retried message into it, so a consumer that started the
// partition at its latest offset then would skip exactly the messages it
// gave back, whose original offsets were already committed — lost.
// RocketMQ starts retry queues at offset 0 whatever the group's
// ConsumeFromWhere for the same reason.
func TestBrokerRetryFromLatestKeepsGivenBack(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1})
	cl.start(1, shortLadder)
	var mu sync.Mutex
	var times []int
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, m.ReconsumeTimes)
		if m.ReconsumeTimes == 0 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	cl.consumer("g", "pay", "*", h, func(c *Config) {
		c.Consumer.Concurrency = 2
		c.Consumer.From = FromLatest
	})
	// The consumer owns pay's partition (its latest offset resolved) before
	// the message is sent.
	zktest.Eventually(t, 30*time.Second, func() bool { return len(cl.committed("g", "pay")) == 1 }, "pay's start offset committed")
	sendN(t, cl.producer(), "pay", "m", 1)
	zktest.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(times) == 2
	}, "the given-back message handled again (handled with reconsume times %v)", &times)
}

// The reason a message is given back with is cut at a rune boundary and
// within the broker's 512 escaped bytes (docs/delay.md), so a long
// non-ASCII error text reads back as valid UTF-8, a prefix of the error.
func TestBrokerRetryReasonCutAtRune(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1})
	b := cl.start(1, shortLadder)
	sendN(t, cl.producer(), "pay", "m", 1)
	cause := "x" + strings.Repeat("处理失败", 60) // 721 bytes, 2,161 escaped
	cl.consumer("g", "pay", "*", func(context.Context, *Message) error { return errors.New(cause) }, func(c *Config) {
		c.Consumer.Concurrency = 1
		c.Consumer.RetryPolicy = &BrokerRetry{MaxReconsumeTimes: 1}
	})
	zktest.Eventually(t, 60*time.Second, func() bool { return len(dlq(t, b, "g")) == 1 }, "the dead letter")
	r := dlq(t, b, "g")[0].Properties[PropReason]
	if !utf8.ValidString(r) || !strings.HasPrefix(cause, r) || len(r) < 100 {
		t.Fatalf("reason %q (%d bytes): want a valid UTF-8 prefix of the error", r, len(r))
	}
}
