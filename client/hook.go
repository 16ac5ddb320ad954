package client

import (
	"context"
	"sync"
	"time"
)

// Hook observes a Producer's sends and a Consumer's handler calls: the
// interception points for tracing (the built-in %TRACE% writer of
// Config.Trace is one; an OpenTelemetry span hook is another, see
// docs/client.md). Set it with Config.Hooks; embed NopHook to implement
// only some methods.
//
// Hooks run on the sending or handling goroutine (AfterSend of SendAsync on
// a connection goroutine): keep them short and never block. The event is
// owned by the client: a hook must not keep it (or its Message) after the
// After call returns; copy what it needs.
type Hook interface {
	// BeforeSend runs once per Send/SendAsync/SendToPartition, and once per
	// message of SendBatch/SendBatchAsync and of SendAsync under Linger,
	// after the message was validated and before its properties are
	// encoded: a hook may add properties (a trace context) to e.Message.
	BeforeSend(e *SendEvent)
	// AfterSend runs once the send succeeded or failed for good (after the
	// last attempt).
	AfterSend(e *SendEvent)
	// BeforeConsume runs before each handler call of a message (every
	// in-place attempt); the handler gets e.Ctx, which the hook may replace
	// with a derived context (a span's).
	BeforeConsume(e *ConsumeEvent)
	// AfterConsume runs after the handler returned (or panicked) and, when
	// it failed, after the retry policy decided (e.Retry).
	AfterConsume(e *ConsumeEvent)
}

// NopHook implements Hook with methods that do nothing.
type NopHook struct{}

func (NopHook) BeforeSend(*SendEvent)       {}
func (NopHook) AfterSend(*SendEvent)        {}
func (NopHook) BeforeConsume(*ConsumeEvent) {}
func (NopHook) AfterConsume(*ConsumeEvent)  {}

// SendEvent is one send as hooks see it. The same *SendEvent is passed to
// BeforeSend and AfterSend.
type SendEvent struct {
	// Ctx is the send's context (SendAsync: the context given to it, which
	// may have ended by AfterSend).
	Ctx     context.Context
	Message *Message
	Start   time.Time // when the send began (BeforeSend)

	// Filled in for AfterSend.
	Result   SendResult    // valid when Err is nil
	Err      error         // the final error
	Attempts int           // attempts made (1 + retries on other partitions)
	Broker   string        // address of the broker of the last attempt ("" when none was tried)
	Cost     time.Duration // from Start to the final answer

	// Span is the hook's: set it in BeforeSend, read it in AfterSend (with
	// several hooks, only one may use it).
	Span any
}

// ConsumeEvent is one handler call as hooks see it. The same *ConsumeEvent
// is passed to BeforeConsume and AfterConsume.
type ConsumeEvent struct {
	// Ctx is what the handler gets; BeforeConsume may replace it.
	Ctx        context.Context
	Group      string
	ConsumerID string
	Message    *Message
	// Attempt is 1 for the first handler call of this delivery, n for the
	// n-th in-place redelivery (a message that came back through the retry
	// topic starts at 1 again; see Message.ReconsumeTimes). For a
	// PushConsumer it is the broker's delivery attempt (Message.Attempt).
	Attempt int
	Broker  string // address the message was fetched from
	Start   time.Time

	// Filled in for AfterConsume.
	Err   error         // the handler's error (a *HandlerPanic for a panic); nil = consumed
	Cost  time.Duration // the handler's run time
	Retry RetryDecision // the retry policy's decision when Err != nil
	// GivenBack is set when the retry policy gave the message back to the
	// broker (retry topic, or the dead-letter queue when DeadLetter).
	GivenBack, DeadLetter bool
	// Released is set for a PushConsumer's failed call: the message was
	// released to the broker, which delivers it again after Retry.Delay
	// (Message.Attempt counts the deliveries).
	Released bool

	Span any // the hook's, as SendEvent.Span
}

// hookList is a client's hooks; nil when there are none, so that the hot
// paths test one pointer.
type hookList []Hook

func (c *Config) hookList() hookList {
	var hs hookList
	for _, h := range c.Hooks {
		if h != nil {
			hs = append(hs, h)
		}
	}
	return hs
}

func (hs hookList) beforeSend(e *SendEvent) {
	for _, h := range hs {
		h.BeforeSend(e)
	}
}

func (hs hookList) afterSend(e *SendEvent) {
	for _, h := range hs {
		h.AfterSend(e)
	}
}

func (hs hookList) beforeConsume(e *ConsumeEvent) {
	for _, h := range hs {
		h.BeforeConsume(e)
	}
}

func (hs hookList) afterConsume(e *ConsumeEvent) {
	for _, h := range hs {
		h.AfterConsume(e)
	}
}

// beforeSend starts s's hook event.
func (p *Producer) beforeSend(ctx context.Context, s *sendState) {
	if s.ev == nil {
		s.ev = new(SendEvent) // kept with the pooled state (reset)
	}
	*s.ev = SendEvent{Ctx: ctx, Message: s.msg, Start: time.Now()}
	p.hooks.beforeSend(s.ev)
}

// sendEnded tells the hooks and the trace writer a send's outcome; addr is
// the broker's address when the send did not go through a route table.
func (p *Producer) sendEnded(s *sendState, res SendResult, err error, addr string) {
	if p.hooks == nil && p.trace == nil {
		return
	}
	if addr == "" && s.tbl != nil && s.idx >= 0 && s.idx < len(s.tbl.conns) {
		addr = s.tbl.conns[s.idx].addr
	}
	attempts := min(s.attempt+1, p.opts.SendRetries+1)
	if p.trace != nil {
		p.traceSend(s, res, err, addr, attempts) // trace.go
	}
	if p.hooks != nil {
		e := s.ev
		e.Result, e.Err, e.Attempts, e.Broker = res, err, attempts, addr
		e.Cost = time.Since(e.Start)
		p.hooks.afterSend(e)
	}
}

var consumeEvents = sync.Pool{New: func() any { return new(ConsumeEvent) }}

// beforeConsume starts a handler call's hook event (pooled; afterConsume
// returns it).
func (w *partWorker) beforeConsume(m *Message, attempt int) *ConsumeEvent {
	c := w.c
	e := consumeEvents.Get().(*ConsumeEvent)
	*e = ConsumeEvent{Ctx: w.ctx, Group: c.group, ConsumerID: c.id, Message: m, Attempt: attempt,
		Broker: c.addrOf(w.key), Start: time.Now()}
	c.hooks.beforeConsume(e)
	if e.Ctx == nil {
		e.Ctx = w.ctx
	}
	return e
}

// beforeConsume starts a PushConsumer handler call's hook event (pooled;
// afterConsume returns it).
func (c *PushConsumer) beforeConsume(it pushItem) *ConsumeEvent {
	e := consumeEvents.Get().(*ConsumeEvent)
	*e = ConsumeEvent{Ctx: c.ctx, Group: c.group, ConsumerID: c.id, Message: it.msg, Attempt: max(it.msg.Attempt, 1),
		Broker: it.conn.addr, Start: time.Now()}
	c.hooks.beforeConsume(e)
	if e.Ctx == nil {
		e.Ctx = c.ctx
	}
	return e
}

// afterConsume ends it: err is the handler's, delay the release's (when
// err is not nil).
func (c *PushConsumer) afterConsume(e *ConsumeEvent, err error, delay time.Duration) {
	e.Err, e.Cost = err, time.Since(e.Start)
	if err != nil {
		e.Released, e.Retry = true, RetryDecision{Delay: delay}
	}
	c.hooks.afterConsume(e)
	*e = ConsumeEvent{}
	consumeEvents.Put(e)
}

func (w *partWorker) afterConsume(e *ConsumeEvent) {
	w.c.hooks.afterConsume(e)
	*e = ConsumeEvent{}
	consumeEvents.Put(e)
}

// batchBeforeSend starts the hook events of a batch's messages (one
// allocation for all of them).
func (p *Producer) batchBeforeSend(ctx context.Context, msgs []*Message) []SendEvent {
	evs := make([]SendEvent, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		evs[i] = SendEvent{Ctx: ctx, Message: m, Start: now}
		p.hooks.beforeSend(&evs[i])
	}
	return evs
}

// batchAfterSend ends the hook events [base, base+n) of a batch (evs) or
// of a lingered batch (pevs) with their frame's outcome: res[i] is message
// base+i's result when err is nil.
func (p *Producer) batchAfterSend(evs []SendEvent, pevs []*SendEvent, base, n int, res []SendResult, err error, attempts int, addr string) {
	for i := 0; i < n; i++ {
		var e *SendEvent
		if evs != nil {
			e = &evs[base+i]
		} else {
			e = pevs[base+i]
		}
		e.Result, e.Err, e.Attempts, e.Broker = SendResult{}, err, attempts, addr
		if err == nil && i < len(res) {
			e.Result = res[i]
		}
		e.Cost = time.Since(e.Start)
		p.hooks.afterSend(e)
	}
}

// frameAttempt is the broker address and the attempts made of a batch
// frame that got its final answer.
func (p *Producer) frameAttempt(f *batchFrame) (addr string, attempts int) {
	if f.tbl != nil && f.idx >= 0 && f.idx < len(f.tbl.conns) {
		addr = f.tbl.conns[f.idx].addr
	}
	return addr, min(f.attempt+1, p.opts.SendRetries+1)
}
