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
	traceBatchEvents = 256 // events per record (the writer's batch)
	traceInFlight    = 8   // batches in flight at once
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
	queue   []traceItem // guarded by mu
	spare   []traceItem // the writer's (swapped with queue)
	kick    chan struct{}
	stopped atomic.Bool
	stop    chan struct{} // Close: flush and end
	done    chan struct{} // run returned
	ctx     context.Context
	cancel  context.CancelFunc
	slots   chan *tracePut // free batches (traceInFlight of them)
	failLog atomic.Uint64

	queued, written, dropped, failed, batches atomic.Uint64
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
	for range traceInFlight {
		p := &tracePut{w: w, cl: newCall()}
		p.done = p.finish
		w.slots <- p
	}
	go w.run()
	return w
}

// add queues an event for the broker at addr; it never blocks.
func (w *traceWriter) add(addr string, e *trace.Event) {
	w.mu.Lock()
	if len(w.queue) >= w.opts.QueueSize || w.stopped.Load() {
		w.mu.Unlock()
		w.dropped.Add(1)
		return
	}
	w.queue = append(w.queue, traceItem{addr: addr, ev: *e})
	n := len(w.queue)
	w.mu.Unlock()
	w.queued.Add(1)
	if n == traceBatchEvents {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// take swaps the queue out.
func (w *traceWriter) take() []traceItem {
	w.mu.Lock()
	q := w.queue
	w.queue = w.spare[:0]
	w.mu.Unlock()
	w.spare = nil
	return q
}

// giveBack returns a processed queue for reuse.
func (w *traceWriter) giveBack(q []traceItem) {
	clear(q) // drop the strings
	w.spare = q[:0]
}

func (w *traceWriter) stats() TraceStats {
	if w == nil {
		return TraceStats{}
	}
	return TraceStats{Queued: w.queued.Load(), Written: w.written.Load(), Dropped: w.dropped.Load(),
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
	process := func() {
		q := w.take()
		for i := range q {
			add(&q[i])
		}
		w.giveBack(q)
	}
	for {
		select {
		case <-w.kick:
			process()
		case <-tick.C:
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

type producerTrace struct {
	NopHook
	w     *traceWriter
	group string
}

func (h *producerTrace) AfterSend(e *SendEvent) {
	if e.Broker == "" {
		return // no broker was reached: nowhere to keep the event
	}
	m := e.Message
	ev := trace.Event{Type: trace.Produce, MsgID: e.Result.MsgID, Topic: m.Topic, Tag: m.Tag,
		Time: e.Start.UnixMilli(), Cost: e.Cost.Microseconds(), OK: e.Err == nil, Host: traceHost(), Group: h.group,
		Broker: e.Result.Partition.BrokerID, Partition: e.Result.Partition.Partition, Offset: e.Result.Offset,
		Attempt: e.Attempts, Size: len(m.Body)}
	if len(m.Keys) > 0 {
		ev.Keys = strings.Join(m.Keys, " ")
	}
	switch {
	case !m.DeliverAt.IsZero():
		ev.Detail = "deliverAt " + m.DeliverAt.UTC().Format(time.RFC3339Nano)
	case m.DelayLevel > 0:
		ev.Detail = "delay level " + strconv.Itoa(m.DelayLevel)
	}
	if e.Err != nil {
		ev.MsgID, ev.Err = -1, e.Err.Error()
		ev.Broker, ev.Partition, ev.Offset = -1, -1, -1
		if ev.Keys == "" {
			return // neither an id nor a key would find it
		}
	}
	h.w.add(e.Broker, &ev)
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
