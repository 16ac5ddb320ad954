package client

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// Message trace (docs/trace.md): with Config.Trace a Producer or Consumer
// installs a hook that turns every send, handler call and retry decision
// into a trace.Event and hands it to a traceWriter. The writer batches the
// events per broker — each event goes to the broker holding the message, so
// a message's whole trace lives beside it — and puts each batch as one
// record of %TRACE%, keyed by the messages' ids and keys. Nobody waits for
// it: the queue is bounded, and an event that finds it full is dropped and
// counted (TraceStats).

// TraceOptions tune the trace writer of Config.Trace.
type TraceOptions struct {
	// Group names a producer in its trace events (consumers use their
	// group).
	Group string
	// QueueSize bounds the events waiting to be written (default 16384);
	// when it is full, new events are dropped and counted.
	QueueSize int
	// BatchBytes: a batch is sent once its data reaches this size
	// (default 32 KiB).
	BatchBytes int
	// FlushInterval: an event waits at most about this long before its
	// batch is sent (default 500ms).
	FlushInterval time.Duration
}

// TraceStats counts a client's trace events.
type TraceStats struct {
	Queued  uint64 // accepted into the queue
	Written uint64 // stored by a broker
	Dropped uint64 // dropped: the queue was full (overload) or the client closed
	Failed  uint64 // lost with a batch the broker did not take (down, refused)
	Batches uint64 // %TRACE% records written
}

const (
	traceBatchEvents = 1024 // events per record (the writer's batch)
	traceInFlight    = 8    // batches in flight at once
)

func (o TraceOptions) withDefaults() TraceOptions {
	if o.QueueSize <= 0 {
		o.QueueSize = 16384
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 32 << 10
	}
	o.BatchBytes = min(o.BatchBytes, 1<<20)
	if o.FlushInterval <= 0 {
		o.FlushInterval = 500 * time.Millisecond
	}
	return o
}

var (
	hostOnce sync.Once
	hostName string
)

func traceHost() string {
	hostOnce.Do(func() {
		hostName, _ = os.Hostname()
		if hostName == "" {
			hostName = "unknown"
		}
	})
	return hostName
}

// traceClock is the monotonic time since the process's first use of the
// trace clock: one cheap clock read (time.Now reads two clocks). The
// writer turns it into wall time with an offset it refreshes every flush
// (wallMs), so a step of the wall clock shows within FlushInterval.
func traceClock() time.Duration { return time.Since(traceEpoch) }

var traceEpoch = time.Now()

// traceMarkProps is the properties line of a traced plain message.
var traceMarkProps = appendTraceMark(nil)

type traceItem struct {
	addr string
	ev   trace.Event
}

// traceWriter queues events and writes them in batches (one goroutine, up
// to traceInFlight puts in flight). The queue is a slice under mu that the
// writer swaps out whole: adding an event takes the lock and copies the
// event, and wakes the writer only once per traceBatchEvents events (a
// channel send per event would wake it every time, which cost more than
// the rest of the trace path).
type traceWriter struct {
	pool    *connPool
	opts    TraceOptions
	cfg     *Config
	mu      sync.Mutex
	queue   []traceItem   // guarded by mu
	pqueue  []produceItem // guarded by mu: the producer's sends (traceSend)
	spare   []traceItem   // the writer's (swapped with queue)
	pspare  []produceItem // the writer's (swapped with pqueue)
	nQueued uint64        // guarded by mu
	kick    chan struct{}
	stopped atomic.Bool
	stop    chan struct{} // Close: flush and end
	done    chan struct{} // run returned
	ctx     context.Context
	cancel  context.CancelFunc
	slots   chan *tracePut // free batches (traceInFlight of them)
	failLog atomic.Uint64
	wallOff atomic.Int64 // unix ns at traceClock() == 0 (wallMs)

	written, dropped, failed, batches atomic.Uint64
}

// tracePut is one batch on its way to a broker.
type tracePut struct {
	w     *traceWriter
	cl    *call
	done  func(*call) // p.finish, bound once
	addr  string
	batch trace.Batch
	data  protocol.MessageData
}

func newTraceWriter(pool *connPool, cfg *Config) *traceWriter {
	w := &traceWriter{pool: pool, cfg: cfg, opts: cfg.TraceOptions.withDefaults(),
		stop: make(chan struct{}), done: make(chan struct{}), slots: make(chan *tracePut, traceInFlight),
		kick: make(chan struct{}, 1)}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.syncClock()
	for range traceInFlight {
		p := &tracePut{w: w, cl: newCall()}
		p.done = p.finish
		w.slots <- p
	}
	go w.run()
	return w
}

// syncClock sets the offset from traceClock to the wall clock.
func (w *traceWriter) syncClock() {
	w.wallOff.Store(time.Now().UnixNano() - int64(traceClock()))
}

// wallMs is the unix ms of traceClock reading t.
func (w *traceWriter) wallMs(t time.Duration) int64 {
	return (w.wallOff.Load() + int64(t)) / 1e6
}

// add queues an event for the broker at addr; it never blocks.
func (w *traceWriter) add(addr string, e *trace.Event) {
	w.mu.Lock()
	if len(w.queue)+len(w.pqueue) >= w.opts.QueueSize || w.stopped.Load() {
		w.mu.Unlock()
		w.dropped.Add(1)
		return
	}
	w.queue = append(w.queue, traceItem{addr: addr, ev: *e})
	w.nQueued++
	n := len(w.queue) + len(w.pqueue)
	w.mu.Unlock()
	if n == traceBatchEvents {
		w.wake()
	}
}

// addProduce queues a send's produce event; it never blocks.
func (w *traceWriter) addProduce(it *produceItem) {
	w.mu.Lock()
	if len(w.queue)+len(w.pqueue) >= w.opts.QueueSize || w.stopped.Load() {
		w.mu.Unlock()
		w.dropped.Add(1)
		return
	}
	w.pqueue = append(w.pqueue, *it)
	w.nQueued++
	n := len(w.queue) + len(w.pqueue)
	w.mu.Unlock()
	if n == traceBatchEvents {
		w.wake()
	}
}

func (w *traceWriter) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take swaps the queues out.
func (w *traceWriter) take() ([]traceItem, []produceItem) {
	w.mu.Lock()
	q, pq := w.queue, w.pqueue
	w.queue, w.pqueue = w.spare[:0], w.pspare[:0]
	w.mu.Unlock()
	w.spare, w.pspare = nil, nil
	return q, pq
}

// giveBack returns processed queues for reuse.
func (w *traceWriter) giveBack(q []traceItem, pq []produceItem) {
	clear(q) // drop the strings
	clear(pq)
	w.spare, w.pspare = q[:0], pq[:0]
}

func (w *traceWriter) stats() TraceStats {
	if w == nil {
		return TraceStats{}
	}
	w.mu.Lock()
	queued := w.nQueued
	w.mu.Unlock()
	return TraceStats{Queued: queued, Written: w.written.Load(), Dropped: w.dropped.Load(),
		Failed: w.failed.Load(), Batches: w.batches.Load()}
}

// close writes what is queued (bounded by grace) and stops the writer.
func (w *traceWriter) close(grace time.Duration) {
	if w == nil || w.stopped.Swap(true) {
		return
	}
	close(w.stop)
	t := time.NewTimer(grace)
	select {
	case <-w.done:
	case <-t.C:
		w.cancel() // puts waiting for a connection give up
		<-w.done
	}
	t.Stop()
	w.cancel()
}

func (w *traceWriter) run() {
	defer close(w.done)
	pending := map[string]*tracePut{} // batch being filled, per broker
	tick := time.NewTicker(w.opts.FlushInterval)
	defer tick.Stop()
	add := func(it *traceItem) {
		p := pending[it.addr]
		if p == nil {
			select {
			case p = <-w.slots:
			case <-w.ctx.Done():
				w.dropped.Add(1)
				return
			}
			p.addr = it.addr
			pending[it.addr] = p
		}
		p.batch.Add(&it.ev)
		if p.batch.N >= traceBatchEvents || p.batch.Full(w.opts.BatchBytes) {
			delete(pending, it.addr)
			w.send(p)
		}
	}
	flush := func() {
		for addr, p := range pending {
			delete(pending, addr)
			w.send(p)
		}
	}
	var it traceItem
	process := func() {
		q, pq := w.take()
		for i := range q {
			add(&q[i])
		}
		for i := range pq {
			it.addr, it.ev = pq[i].addr, pq[i].event(w)
			add(&it)
		}
		it = traceItem{}
		w.giveBack(q, pq)
	}
	for {
		select {
		case <-w.kick:
			process()
		case <-tick.C:
			w.syncClock()
			process()
			flush()
		case <-w.stop:
			process()
			flush()
			for range traceInFlight { // every batch back: nothing in flight
				<-w.slots
			}
			return
		}
	}
}

// send puts p's batch as one %TRACE% record; the slot comes back in finish.
func (w *traceWriter) send(p *tracePut) {
	conn := w.pool.get(p.addr)
	p.cl.reset()
	p.cl.kind = kindPut
	p.cl.onDone = p.done
	p.data = protocol.MessageData{Props: p.batch.Props, Payload: p.batch.Data}
	if conn == nil {
		p.cl.err = ErrClosed
		p.finish(p.cl)
		return
	}
	// No put checksum: the store's record CRC covers the batch once stored,
	// and a 32 KiB CRC-32 per batch on both sides is most of a batch's cost.
	if err := conn.startPut(w.ctx, p.cl, conn.deadlineFor(w.ctx, w.cfg.Producer.SendTimeout), trace.Topic, 0, &p.data, false); err != nil {
		p.cl.err = err
		p.finish(p.cl)
	}
}

// finish completes a batch's put (on a connection goroutine, or the
// writer's when it could not start).
func (p *tracePut) finish(cl *call) {
	w := p.w
	n := uint64(p.batch.N)
	err := cl.err
	if err == nil && cl.code != protocol.StatusSuccess {
		err = brokerErr(p.addr, cl.code, cl.body)
	}
	if err != nil {
		w.failed.Add(n)
		if k := w.failLog.Add(1); k&(k-1) == 0 { // 1st, 2nd, 4th … failure
			w.cfg.Logger.Warn("metaq client: trace records lost", "broker", p.addr, "events", n, "failures", k, "err", err)
		}
	} else {
		w.written.Add(n)
		w.batches.Add(1)
	}
	p.batch.Reset()
	cl.reset()
	w.slots <- p
}

// appendTraceMark adds _trace=1 to a traced producer's properties line: the
// broker writes its own events (delay, retry, dead letter, transaction end)
// for marked messages.
func appendTraceMark(dst []byte) []byte {
	if len(dst) > 0 {
		dst = append(dst, '&')
	}
	return append(dst, trace.PropTrace+"=1"...)
}

// --- the hooks ------------------------------------------------------------------

// traceSend queues the produce event of a send that ended (sendEnded): the
// producer's trace path, called directly rather than as a Hook so that a
// traced send costs two clock reads and one queued event (no SendEvent, no
// wall-clock time.Now).
func (p *Producer) traceSend(s *sendState, res SendResult, err error, addr string, attempts int) {
	if addr == "" {
		return // no broker was reached: nowhere to keep the event
	}
	m := s.msg
	it := produceItem{addr: addr, topic: m.Topic, tag: m.Tag, msgID: res.MsgID, offset: res.Offset,
		t0: s.t0, cost: traceClock() - s.t0, partition: int32(res.Partition.Partition), broker: int32(res.Partition.BrokerID),
		size: int32(len(m.Body)), attempts: int32(attempts)}
	if len(m.Keys) > 0 || !m.DeliverAt.IsZero() || m.DelayLevel > 0 || err != nil {
		x := &produceExtra{}
		if len(m.Keys) > 0 {
			x.keys = strings.Join(m.Keys, " ")
		}
		switch {
		case !m.DeliverAt.IsZero():
			x.detail = "deliverAt " + m.DeliverAt.UTC().Format(time.RFC3339Nano)
		case m.DelayLevel > 0:
			x.detail = "delay level " + strconv.Itoa(m.DelayLevel)
		}
		if err != nil {
			if x.keys == "" {
				return // neither an id nor a key would find it
			}
			x.err, x.failed = err.Error(), true
		}
		it.x = x
	}
	p.trace.addProduce(&it)
}

// produceItem is a produce event as queued by traceSend: what a send gives,
// in a third of a trace.Event's bytes (copying the event into the queue was
// most of the send's trace cost).
type produceItem struct {
	addr, topic, tag string
	x                *produceExtra // nil for most sends
	msgID, offset    int64
	t0, cost         time.Duration // t0: traceClock when the send began
	partition        int32
	broker           int32
	size             int32
	attempts         int32
}

type produceExtra struct {
	keys, detail, err string
	failed            bool
}

// event is the item as a trace.Event (the writer's side).
func (it *produceItem) event(w *traceWriter) trace.Event {
	ev := trace.Event{Type: trace.Produce, MsgID: it.msgID, Topic: it.topic, Tag: it.tag, Time: w.wallMs(it.t0),
		Cost: int64(it.cost / time.Microsecond), OK: true, Host: traceHost(), Group: w.cfg.TraceOptions.Group,
		Broker: int(it.broker), Partition: int(it.partition), Offset: it.offset, Attempt: int(it.attempts), Size: int(it.size)}
	if x := it.x; x != nil {
		ev.Keys, ev.Detail = x.keys, x.detail
		if x.failed {
			ev.MsgID, ev.Err, ev.OK = -1, x.err, false
			ev.Broker, ev.Partition, ev.Offset = -1, -1, -1
		}
	}
	return ev
}

type consumerTrace struct {
	NopHook
	w *traceWriter
}

// consumeEvent is the common part of a handler call's events.
func (h *consumerTrace) consumeEvent(e *ConsumeEvent, t trace.Type) trace.Event {
	m := e.Message
	ev := trace.Event{Type: t, MsgID: m.MsgID, Topic: m.Topic, Tag: m.Tag, Host: traceHost(),
		Group: e.Group, Client: e.ConsumerID, Broker: m.Partition.BrokerID, Partition: m.Partition.Partition,
		Offset: m.Offset, Attempt: e.Attempt, Reconsume: m.ReconsumeTimes, Size: len(m.Body)}
	if orig, ok := m.Properties[PropOrigMsgID]; ok {
		if id, err := strconv.ParseInt(orig, 10, 64); err == nil && id >= 0 {
			ev.MsgID, ev.RecordID = id, m.MsgID
		}
	}
	if rt, ok := m.Properties[PropRetryTopic]; ok && rt != "" && m.Topic != rt {
		ev.Detail = "from " + m.Topic
		ev.Topic = rt
	}
	if len(m.Keys) > 0 {
		ev.Keys = strings.Join(m.Keys, " ")
	}
	return ev
}

func (h *consumerTrace) BeforeConsume(e *ConsumeEvent) {
	ev := h.consumeEvent(e, trace.ConsumeBegin)
	ev.Time = e.Start.UnixMilli()
	h.w.add(e.Broker, &ev)
}

func (h *consumerTrace) AfterConsume(e *ConsumeEvent) {
	ev := h.consumeEvent(e, trace.ConsumeEnd)
	end := e.Start.Add(e.Cost)
	ev.Time, ev.Cost, ev.OK = end.UnixMilli(), e.Cost.Microseconds(), e.Err == nil
	if e.Err != nil {
		ev.Err = e.Err.Error()
	}
	h.w.add(e.Broker, &ev)
	if e.Err == nil {
		return
	}
	r := h.consumeEvent(e, trace.Retry)
	r.Time = time.Now().UnixMilli()
	r.Err = ev.Err
	switch {
	case e.DeadLetter:
		r.Detail = "sent to the dead-letter queue " + DLQTopic(e.Group)
	case e.GivenBack:
		r.Detail = "given back to the broker: redelivered through " + RetryTopic(e.Group)
	case e.Retry.Done:
		r.Detail = "given up by the retry policy"
	default:
		r.Detail = "redelivered in place after " + e.Retry.Delay.String()
	}
	h.w.add(e.Broker, &r)
}

// TraceStats returns the producer's trace counters (zero without
// Config.Trace).
func (p *Producer) TraceStats() TraceStats { return p.trace.stats() }

// TraceStats returns the consumer's trace counters (zero without
// Config.Trace).
func (c *Consumer) TraceStats() TraceStats { return c.trace.stats() }
