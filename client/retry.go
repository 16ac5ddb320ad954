package client

import (
	"context"
	"time"
)

// MaxReconsumeTimes is MetaQ/RocketMQ's bound on redeliveries through the
// retry topic before a message goes to the dead-letter queue.
const MaxReconsumeTimes = 16

// RetryTopic and DLQTopic name a group's retry topic (%RETRY%<group>) and
// dead-letter topic (%DLQ%<group>), where broker-side redelivery will put
// failed messages once delayed messages land.
func RetryTopic(group string) string { return "%RETRY%" + group }
func DLQTopic(group string) string   { return "%DLQ%" + group }

// RetryPolicy decides what happens to a message whose handler returned an
// error (or panicked). It is called on the goroutine that handled the message
// with attempt = 1 for the first failure, 2 for the second, …; ctx is
// cancelled when the partition is released or the consumer closes.
//
// The default (BackoffRetry) redelivers in place after a growing delay. The
// broker-side retry topic will plug in here: a policy that sends the message
// to RetryTopic(group) with a DelayLevel (and, once ReconsumeTimes reaches
// MaxReconsumeTimes, to DLQTopic(group)) through a Producer and returns
// RetryDecision{Done: true}, so that the partition moves on.
type RetryPolicy interface {
	OnFailure(ctx context.Context, m *Message, attempt int, err error) RetryDecision
}

// RetryDecision is a RetryPolicy's answer.
type RetryDecision struct {
	// Delay before the message is handed to the handler again (in place: in
	// ordered mode its partition waits meanwhile).
	Delay time.Duration
	// Done: the policy took care of the message (sent it elsewhere, or gave
	// up on it); it counts as consumed and its offset may be committed.
	Done bool
}

// RetryPolicyFunc adapts a function to RetryPolicy.
type RetryPolicyFunc func(ctx context.Context, m *Message, attempt int, err error) RetryDecision

func (f RetryPolicyFunc) OnFailure(ctx context.Context, m *Message, attempt int, err error) RetryDecision {
	return f(ctx, m, attempt, err)
}

// BackoffRetry redelivers a failed message in place after Initial, 2×Initial,
// 4×Initial … capped at Max. With MaxAttempts > 0 it gives up after that many
// failures (the message is then skipped: logged and committed past).
type BackoffRetry struct {
	Initial     time.Duration // default 100ms
	Max         time.Duration // default 30s
	MaxAttempts int           // 0 = forever
}

// DefaultRetryPolicy redelivers forever after 100ms, 200ms, … capped at 30s.
func DefaultRetryPolicy() RetryPolicy {
	return &BackoffRetry{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
}

func (b *BackoffRetry) OnFailure(_ context.Context, _ *Message, attempt int, _ error) RetryDecision {
	if b.MaxAttempts > 0 && attempt >= b.MaxAttempts {
		return RetryDecision{Done: true}
	}
	return RetryDecision{Delay: backoffDelay(b.Initial, b.Max, attempt)}
}

func backoffDelay(initial, maxDelay time.Duration, attempt int) time.Duration {
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	d := initial
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
