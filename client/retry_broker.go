package client

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/metaqgo/metaq/protocol"
)

// BrokerRetry is the default RetryPolicy of clustering consumers: a message
// whose handler failed is given back to the broker (`retry`), which stores
// it into the group's retry topic %RETRY%<group> through its delay levels —
// 10s, 30s, 1m, 2m … 2h for reconsume 0, 1, 2 … (RocketMQ's ladder) — and,
// once it has come back MaxReconsumeTimes times, into %DLQ%<group>. Every
// consumer of the group also consumes %RETRY%<group>, so the message comes
// back to a handler of its original topic with ReconsumeTimes counting
// the returns. The partition moves on at once; the offset is committed
// only once the broker has the message again.
//
// Ordered consumers (Concurrency 0) retry in place instead, blocking their
// partition (as RocketMQ's orderly consumers): every OrderedBackoff, at most
// OrderedAttempts times, then the message goes to the dead-letter queue.
//
// When the broker cannot take the message back (unreachable, an old
// broker), it is retried in place with a growing delay: never skipped.
// Broadcast consumers retry in place (there is no group-wide retry topic).
type BrokerRetry struct {
	MaxReconsumeTimes int           // default 16 (MaxReconsumeTimes)
	OrderedAttempts   int           // ordered mode: in-place attempts before the DLQ; default MaxReconsumeTimes
	OrderedBackoff    time.Duration // ordered mode: wait between attempts; default 1s
	// Levels is the broker's messageDelayLevel, used to turn RetryLater(d)
	// into a delay level; default RocketMQ's ladder.
	Levels []time.Duration

	c *Consumer // bound by NewConsumer; nil: in place
}

// defaultLevels is the broker's default messageDelayLevel.
var defaultLevels = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	3 * time.Minute, 4 * time.Minute, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute, 8 * time.Minute,
	9 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// RetryLater, returned by a handler, asks for the message again after at
// least d (rounded up to the broker's next delay level; in place for
// ordered consumers).
func RetryLater(d time.Duration) error { return &retryLaterError{d: d} }

type retryLaterError struct{ d time.Duration }

func (e *retryLaterError) Error() string { return fmt.Sprintf("metaq client: retry later (%v)", e.d) }

func (b *BrokerRetry) maxTimes() int {
	if b.MaxReconsumeTimes > 0 {
		return b.MaxReconsumeTimes
	}
	return MaxReconsumeTimes
}

// levelFor is the smallest delay level waiting at least d.
func (b *BrokerRetry) levelFor(d time.Duration) int {
	levels := b.Levels
	if len(levels) == 0 {
		levels = defaultLevels
	}
	for i, l := range levels {
		if l >= d {
			return i + 1
		}
	}
	return len(levels)
}

// OnFailure implements RetryPolicy.
func (b *BrokerRetry) OnFailure(ctx context.Context, m *Message, attempt int, err error) RetryDecision {
	var later *retryLaterError
	isLater := errors.As(err, &later)
	c := b.c
	if c == nil {
		if isLater {
			return RetryDecision{Delay: later.d}
		}
		return RetryDecision{Delay: backoffDelay(100*time.Millisecond, 30*time.Second, attempt)}
	}
	if c.opts.Concurrency == 0 { // ordered: in place, then the DLQ
		limit := b.OrderedAttempts
		if limit <= 0 {
			limit = b.maxTimes()
		}
		if attempt <= limit {
			d := b.OrderedBackoff
			if d <= 0 {
				d = time.Second
			}
			if isLater {
				d = later.d
			}
			return RetryDecision{Delay: d}
		}
		if c.giveBack(ctx, m, -1, err) {
			return RetryDecision{Done: true}
		}
		return RetryDecision{Delay: backoffDelay(time.Second, 30*time.Second, attempt-limit)}
	}
	level := 0 // the broker's ladder: 3 + reconsumeTimes
	if isLater {
		level = b.levelFor(later.d)
	}
	if m.ReconsumeTimes >= b.maxTimes() {
		level = -1
	}
	if c.giveBack(ctx, m, level, err) {
		return RetryDecision{Done: true}
	}
	return RetryDecision{Delay: backoffDelay(time.Second, 30*time.Second, attempt)}
}

// giveBack sends `retry` for m to the broker holding it.
func (c *Consumer) giveBack(ctx context.Context, m *Message, level int, cause error) bool {
	addr := ""
	for k, a := range *c.addrs.Load() {
		if k.p.BrokerID == m.Partition.BrokerID && a != "" {
			addr = a
			break
		}
	}
	if addr == "" {
		c.log.Warn("metaq client: no address for the broker of a failed message; retrying in place", "msgId", m.MsgID, "broker", m.Partition.BrokerID)
		return false
	}
	conn := c.pool.get(addr)
	if conn == nil {
		return false
	}
	reason := ""
	if cause != nil {
		reason = cutReason(cause.Error())
	}
	cl, err := conn.do(ctx, kindOther, c.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendRetry(dst, c.group, m.MsgID, level, op, reason)
	})
	if err == nil {
		defer putCall(cl)
		if cl.code != protocol.StatusSuccess {
			err = brokerErr(conn.addr, cl.code, cl.body)
		}
	}
	if err != nil {
		c.log.Warn("metaq client: giving a failed message back to the broker failed; retrying in place", "msgId", m.MsgID, "err", err)
		return false
	}
	m.givenBack = givenBackRetry
	if level < 0 {
		m.givenBack = givenBackDLQ
		c.log.Warn("metaq client: message sent to the dead-letter queue", "topic", m.Topic, "msgId", m.MsgID,
			"reconsumeTimes", m.ReconsumeTimes, "dlq", DLQTopic(c.group), "err", cause)
	}
	return true
}

// maxReason is the broker's bound on a reason, in escaped bytes
// (docs/delay.md, "Retry and dead letters").
const maxReason = 512

// cutReason keeps the longest prefix of whole runes of s whose escaped form
// fits maxReason: the broker would cut it at that length, possibly inside a
// multi-byte rune, and the reason would read back as invalid UTF-8.
func cutReason(s string) string {
	n := 0
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:]) // an invalid byte is one
		n += escapedLen(s[i : i+size])
		if n > maxReason {
			return s[:i]
		}
		i += size
	}
	return s
}

// bindRetry gives a BrokerRetry policy its consumer (a copy per consumer).
// Broadcast consumers keep it unbound: they retry in place.
func (c *Consumer) bindRetry() {
	br, ok := c.opts.RetryPolicy.(*BrokerRetry)
	if !ok || c.opts.Broadcast {
		return
	}
	cp := *br
	cp.c = c
	c.opts.RetryPolicy = &cp
}

// retrySubscription is the subscription of %RETRY%<group> a clustering
// consumer with BrokerRetry adds at Start: each retried message goes to the
// handler of the topic it was first consumed from (Message.Topic is set
// back to that topic; MsgID is the retried record's), filtered by that
// subscription's tags or SQL expression (which sees reconsumeTimes). nil when there is nothing to add.
func (c *Consumer) retrySubscriptionLocked() *subscription {
	br, ok := c.opts.RetryPolicy.(*BrokerRetry)
	rt := RetryTopic(c.group)
	if !ok || br.c == nil || c.subs[rt] != nil {
		return nil
	}
	handler := func(ctx context.Context, m *Message) error {
		orig := m.Properties[PropRetryTopic]
		s := c.subs[orig] // subs do not change after Start
		if s == nil || orig == rt {
			c.log.Warn("metaq client: retried message of a topic this consumer does not subscribe; dropped", "topic", orig, "msgId", m.MsgID)
			return nil
		}
		if !s.filter.All() && !s.filter.MatchTag(m.Tag) {
			return nil
		}
		// The subscription's SQL expression too (a fresh matcher: handlers of
		// several brokers' retry partitions run concurrently).
		if s.where != nil && !(&whereMatcher{expr: s.where}).match(m) {
			return nil
		}
		m.Topic = orig
		return s.handler(ctx, m)
	}
	return &subscription{topic: rt, filter: protocol.ParseTagFilter("*"), handler: handler}
}
