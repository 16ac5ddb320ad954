package client

import (
	"context"
	"io"
	"os"
	"slices"
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

type traceItem struct {
	addr string
	ev   trace.Event
}

// traceWriter queues events and writes them in batches (one goroutine, up
// to traceInFlight puts in flight). The queue is a slice under mu that the
// writer swaps out whole: adding an event takes the lock and copies the
// event, and wakes the writer only once per traceBatchEvents events (a
// channel send per event would wake it every time, which cost more than
// the rest of the trace path). The produce events of async sends skip the
// queue: each connection's reader appends them to a ring of its own
// (produceRing) that the writer drains.
type traceWriter struct {
	pool    *connPool
	opts    TraceOptions
	cfg     *Config
	mu      sync.Mutex
	queue   []traceItem    // guarded by mu
	pqueue  []produceItem  // guarded by mu: the producer's sends (traceSend)
	spare   []traceItem    // the writer's (swapped with queue)
	pspare  []produceItem  // the writer's (swapped with pqueue)
	nQueued uint64         // guarded by mu
	rings   []*produceRing // guarded by mu: one per connection of a traced producer
	kick    chan struct{}
	stopped atomic.Bool
	stop    chan struct{} // Close: flush and end
	done    chan struct{} // run returned
	ctx     context.Context
	cancel  context.CancelFunc
	slots   chan *tracePut  // free batches (traceInFlight of them)
	put     func(*tracePut) // send, bound once (a benchmark's stand-in)
	ringBuf []*produceRing  // the writer's (takeRings)
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
	w.put = w.send
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

// addProduces queues produce events (a connection's read batch, or one
// send); it never blocks: what does not fit is dropped and counted.
func (w *traceWriter) addProduces(its []produceItem) {
	w.mu.Lock()
	before := len(w.queue) + len(w.pqueue)
	room := w.opts.QueueSize - before
	if w.stopped.Load() {
		room = 0
	}
	room = max(0, min(room, len(its)))
	w.pqueue = append(w.pqueue, its[:room]...)
	w.nQueued += uint64(room)
	w.mu.Unlock()
	if room < len(its) {
		w.dropped.Add(uint64(len(its) - room))
	}
	if before < traceBatchEvents && before+room >= traceBatchEvents {
		w.wake()
	}
}

// produceRing is a traced producer connection's trace batch. The
// connection's reader completes the async sends (Producer.asyncDone runs on
// it) and encodes their produce events straight into a batch of its own —
// one of the writer's free batches (w.slots), most events as a continuation
// line of the one before (trace.Batch.AddMoved) — with no lock, no clock
// read of its own (the reply's read stamps it) and no allocation per event.
// A full batch (or one older than FlushInterval at the end of a read batch)
// is sent by the reader itself, as a put on its own connection that takes
// no window slot (startFreePut): it goes out with the producer's next
// write, and its reply comes with the producer's replies. So an event is
// written once, on the goroutine that has its fields in cache, and a batch
// costs no goroutine wake-up and no system call of its own. Without a free
// batch the events are dropped and counted until the next read batch: the
// producer never waits for its trace.
//
// The reader holds mu from the first event of a read batch to publish (at
// the end of the read batch, or every 64 events); the writer goroutine
// takes mu (TryLock) to send a partial batch (its tick, Close, or when it
// needs the slot).
type produceRing struct {
	w    *traceWriter
	addr string
	mu   sync.Mutex
	held bool // the reader's: it holds mu (events added since publish)
	// guarded by mu:
	p      *tracePut     // the batch being filled (nil: none)
	since  time.Duration // trace clock of p's first event
	lastAt time.Duration // trace clock of the last event (its reply's read)
	plain  bool          // p's last event is a plain produce with key last: a next one may be AddMoved
	last   produceKey
	noSlot bool   // no free batch at the last try: drop until publish
	n      uint64 // events added in its life
	ev     trace.Event
	// queued is n as last published (stats).
	queued atomic.Uint64
	// retired: the connection closed; the writer takes its batch once
	// more and forgets it.
	retired atomic.Bool
}

// produceKey is what consecutive produce events of a connection share when
// the later is a continuation line of the earlier (with Host, Group, OK).
type produceKey struct {
	topic, tag             string
	broker, attempts, size int32
}

// newRing registers a trace batch for the connection to addr.
func (w *traceWriter) newRing(addr string) *produceRing {
	r := &produceRing{w: w, addr: addr}
	w.mu.Lock()
	w.rings = append(w.rings, r)
	w.mu.Unlock()
	return r
}

// add encodes a produce event (on the connection's reader goroutine only).
func (r *produceRing) add(it *produceItem, at time.Duration) {
	w := r.w
	if !r.held {
		r.mu.Lock()
		r.held = true
	}
	p := r.p
	if p == nil {
		if r.noSlot || w.stopped.Load() {
			w.dropped.Add(1)
			return
		}
		select {
		case p = <-w.slots:
		default:
			r.noSlot = true
			w.dropped.Add(1)
			w.wake() // the writer takes the partial batches holding them
			return
		}
		p.addr = r.addr
		r.p, r.since, r.plain = p, at, false
	} else if w.stopped.Load() {
		w.dropped.Add(1)
		return
	}
	k := produceKey{topic: it.topic, tag: it.tag, broker: it.broker, attempts: it.attempts, size: it.size}
	if !r.plain || it.x != nil || k != r.last ||
		!p.batch.AddMoved(it.msgID, w.wallMs(it.t0), int64(it.cost/time.Microsecond), int(it.partition), it.offset) {
		it.fill(w, &r.ev)
		p.batch.Add(&r.ev)
		r.plain, r.last = it.x == nil, k
	}
	r.added(p, at)
}

// addMoved is add for a plain send (no keys, no delay, no error) whose
// event continues the connection's last one in its batch (AddMoved): what
// add does for most events, without building the item. False: it did
// nothing, use add.
func (r *produceRing) addMoved(m *Message, res *SendResult, t0, end time.Duration, attempts int) bool {
	if !r.held {
		return false // r.p is the trace writer's unless the reader holds r.mu
	}
	p := r.p
	if p == nil || !r.plain || r.w.stopped.Load() ||
		(produceKey{topic: m.Topic, tag: m.Tag, broker: int32(res.Partition.BrokerID), attempts: int32(attempts), size: int32(len(m.Body))}) != r.last ||
		!p.batch.AddMoved(res.MsgID, r.w.wallMs(t0), int64((end-t0)/time.Microsecond), res.Partition.Partition, res.Offset) {
		return false
	}
	r.added(p, end)
	return true
}

// added ends add and addMoved: the batch goes when it is full, and every 64
// events the reader publishes.
func (r *produceRing) added(p *tracePut, at time.Duration) {
	r.lastAt = at
	r.n++
	if p.batch.N >= traceBatchEvents || p.batch.Full(r.w.opts.BatchBytes) {
		r.handOverLocked()
	} else if r.n%64 == 0 {
		r.publish()
	}
}

// handOverLocked sends the batch being filled, right here: a put on the
// producer's own connection that takes no window slot (startFreePut), so
// it goes out with the producer's next write and needs no goroutine woken.
func (r *produceRing) handOverLocked() {
	p := r.p
	r.p, r.plain = nil, false
	r.w.put(p)
}

// publish ends a read batch (the reader's): a batch older than
// FlushInterval goes to the writer, and mu is released.
func (r *produceRing) publish() {
	if !r.held {
		return
	}
	if r.p != nil && r.lastAt-r.since >= r.w.opts.FlushInterval {
		r.handOverLocked()
	}
	r.noSlot = false
	r.queued.Store(r.n)
	r.held = false
	r.mu.Unlock()
}

// take hands the partial batch to the writer when the reader is not adding
// to it (the writer goroutine: tick, Close, or when it needs a slot).
func (r *produceRing) take() (*tracePut, bool) {
	if !r.mu.TryLock() {
		return nil, false
	}
	p := r.p
	r.p, r.plain = nil, false
	r.mu.Unlock()
	if p != nil && p.batch.N == 0 {
		r.w.slots <- p
		return nil, true
	}
	return p, true
}

// sync waits (at most until deadline) for the reader to publish what it
// added (Close: the async sends are done, their events about to be
// sent one last time).
func (r *produceRing) sync(deadline time.Time) {
	for !r.mu.TryLock() {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	r.mu.Unlock()
}

// stampReader is a traced producer connection's socket as its reply
// reader reads it: one trace clock reading per read, which stamps every
// reply of that read (call.stamp) instead of a clock read per reply.
type stampReader struct {
	r  io.Reader
	at time.Duration
}

func (s *stampReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	s.at = traceClock()
	return n, err
}

// appendTraceOn is the first request of a traced producer's connection:
// `trace on`, with opaque 0, which no call uses, so its reply is dropped
// (an older broker's 400 too: its puts are then simply not marked).
func appendTraceOn(dst []byte) []byte { return protocol.AppendTrace(dst, true, 0) }

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
	for _, r := range w.rings {
		queued += r.queued.Load()
	}
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
	// add adds e to the batch of the broker at addr; p is that batch when
	// the caller has it (nil: look it up), and so is the result (nil once
	// the batch was sent, or the event dropped).
	batchOf := func(addr string, p *tracePut) *tracePut {
		if p == nil {
			if p = pending[addr]; p == nil {
				if p = w.slot(); p == nil {
					w.dropped.Add(1)
					return nil
				}
				p.addr = addr
				pending[addr] = p
			}
		}
		return p
	}
	sent := func(p *tracePut) *tracePut {
		if p.batch.N >= traceBatchEvents || p.batch.Full(w.opts.BatchBytes) {
			delete(pending, p.addr)
			w.send(p)
			return nil
		}
		return p
	}
	add := func(addr string, p *tracePut, e *trace.Event) *tracePut {
		if p = batchOf(addr, p); p == nil {
			return nil
		}
		p.batch.Add(e)
		return sent(p)
	}
	var ev trace.Event
	// addProduce is add for a produce item: most are the event before
	// with another id, time, cost, partition and offset (AddMoved).
	addProduce := func(addr string, p *tracePut, it *produceItem) *tracePut {
		if p = batchOf(addr, p); p == nil {
			return nil
		}
		if !it.moved(w, &p.batch) {
			it.fill(w, &ev)
			p.batch.Add(&ev)
		}
		return sent(p)
	}
	flush := func() {
		for addr, p := range pending {
			delete(pending, addr)
			w.send(p)
		}
	}
	process := func() {
		q, pq := w.take()
		for i := range q {
			add(q[i].addr, nil, &q[i].ev)
		}
		for i := range pq {
			addProduce(pq[i].addr, nil, &pq[i])
		}
		w.giveBack(q, pq)
		ev = trace.Event{}
		if len(w.slots) == 0 { // the connections' partial batches hold them
			w.takeRings()
		}
	}
	for {
		select {
		case <-w.kick:
			process()
		case <-tick.C:
			w.syncClock()
			process()
			w.takeRings()
			flush()
		case <-w.stop:
			process()
			w.takeRings()
			flush()
			for n := 0; n < traceInFlight; { // every batch back: nothing in flight
				select {
				case <-w.slots:
					n++
				case <-w.ctx.Done(): // Close's grace is over (a batch still held)
					return
				}
			}
			return
		}
	}
}

// slot is a free batch for the writer's own events, waiting for one while
// the batches handed over by the connections are sent (nil: closing).
func (w *traceWriter) slot() *tracePut {
	select {
	case p := <-w.slots:
		return p
	default:
	}
	w.takeRings() // partial batches of idle connections go out: their slots come back
	select {
	case p := <-w.slots:
		return p
	case <-w.ctx.Done():
		return nil
	}
}

// takeRings sends the connections' partial batches (those whose reader is
// not adding to them right now) and forgets the connections that closed.
func (w *traceWriter) takeRings() {
	w.mu.Lock()
	rings := append(w.ringBuf[:0], w.rings...)
	w.mu.Unlock()
	for _, r := range rings {
		retired := r.retired.Load() // before the take: then nothing follows it
		p, ok := r.take()
		if p != nil {
			w.send(p)
		}
		if ok && retired {
			w.forget(r)
		}
	}
	clear(rings)
	w.ringBuf = rings[:0]
}

// syncRings waits for every ring's reader to publish its events.
func (w *traceWriter) syncRings(grace time.Duration) {
	if w == nil {
		return
	}
	w.mu.Lock()
	rings := slices.Clone(w.rings)
	w.mu.Unlock()
	deadline := time.Now().Add(grace)
	for _, r := range rings {
		r.sync(deadline)
	}
}

// forget drops the trace batch of a connection that closed (its events
// sent: take).
func (w *traceWriter) forget(r *produceRing) {
	w.mu.Lock()
	if i := slices.Index(w.rings, r); i >= 0 {
		w.rings = slices.Delete(w.rings, i, i+1)
		w.nQueued += r.queued.Load()
	}
	w.mu.Unlock()
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
	// A free put: it takes no slot of the window (a producer's window is
	// full whenever it sends flat out), so it neither waits for one nor
	// holds one up. No put checksum: the store's record CRC covers the
	// batch once stored, and a 32 KiB CRC-32 per batch on both sides is most
	// of a batch's cost.
	if err := conn.startFreePut(w.ctx, p.cl, conn.deadlineFor(w.ctx, w.cfg.Producer.SendTimeout), trace.Topic, 0, &p.data); err != nil {
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

// --- the hooks ------------------------------------------------------------------

// traceSend queues the produce event of a send that ended (sendEnded): the
// producer's trace path, called directly rather than as a Hook. A send
// completed by its connection's reader (every async send that got an
// answer) costs one clock read (its start, newSend) and a fixed-size item
// appended to the connection's buffer: its end is the read that brought
// the reply (call.stamp), and the buffer goes to the writer once per read
// batch (connTrace). Other sends queue the item under the writer's lock.
func (p *Producer) traceSend(s *sendState, res SendResult, err error, addr string, attempts int) {
	if addr == "" {
		return // no broker was reached: nowhere to keep the event
	}
	end := s.cl.stamp
	if end == 0 {
		end = traceClock()
	}
	p.traceProduce(s.cl.by, addr, s.msg, res, err, s.t0, end, attempts)
}

// traceProduce queues the produce event of message m, sent from t0 to end
// (traceClock readings) to the broker at addr. by is the connection whose
// reader completed the send when this runs on that reader (its ring takes
// the event), else nil.
func (p *Producer) traceProduce(by *brokerConn, addr string, m *Message, res SendResult, err error, t0, end time.Duration, attempts int) {
	if by != nil && by.tl != nil && err == nil && len(m.Keys) == 0 && m.DelayLevel <= 0 && m.DeliverAt.IsZero() &&
		by.tl.addMoved(m, &res, t0, end, attempts) {
		return // the common case: a continuation line of the connection's last event
	}
	var x *produceExtra
	if len(m.Keys) > 0 || !m.DeliverAt.IsZero() || m.DelayLevel > 0 || err != nil {
		x = &produceExtra{}
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
	}
	it := [1]produceItem{{addr: addr, topic: m.Topic, tag: m.Tag, x: x, msgID: res.MsgID, offset: res.Offset, t0: t0, cost: end - t0,
		partition: int32(res.Partition.Partition), broker: int32(res.Partition.BrokerID), size: int32(len(m.Body)), attempts: int32(attempts)}}
	if by != nil && by.tl != nil {
		by.tl.add(&it[0], end) // encoded right here, on the connection's reader
		return
	}
	p.trace.addProduces(it[:])
}

// traceFrame queues the produce events of an mput frame (SendBatch,
// SendBatchAsync, Linger) that ended: one per message, each with its own
// id and queue offset, from when its send began (the batch's call, or the
// message's SendAsync under Linger) to the frame's answer.
func (p *Producer) traceFrame(f *batchFrame, res []SendResult, err error) {
	addr, attempts := p.frameAttempt(f) // hook.go
	if addr == "" {
		return // no broker was reached
	}
	cl := f.cl
	end := cl.stamp
	if end == 0 {
		end = traceClock()
	}
	for i, m := range f.msgs {
		var r SendResult
		if err == nil && i < len(res) {
			r = res[i]
		}
		t0 := f.t0
		if i < len(f.t0s) {
			t0 = f.t0s[i]
		}
		p.traceProduce(cl.by, addr, m, r, err, t0, end, attempts)
	}
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

// moved adds the item to b as the event before it with another id, time,
// cost, partition and offset when that is what it is (trace.Batch.AddMoved,
// the writer's side); false: add its event (fill).
func (it *produceItem) moved(w *traceWriter, b *trace.Batch) bool {
	l := b.Last()
	if it.x != nil || l == nil || l.Type != trace.Produce || !l.OK || l.Topic != it.topic || l.Tag != it.tag ||
		l.Keys != "" || l.Detail != "" || l.Err != "" || l.Client != "" || l.Reconsume != 0 ||
		l.Broker != int(it.broker) || l.Attempt != int(it.attempts) || l.Size != int(it.size) ||
		l.Host != traceHost() || l.Group != w.cfg.TraceOptions.Group {
		return false
	}
	return b.AddMoved(it.msgID, w.wallMs(it.t0), int64(it.cost/time.Microsecond), int(it.partition), it.offset)
}

// fill makes ev the item's event (the writer's side).
func (it *produceItem) fill(w *traceWriter, ev *trace.Event) {
	*ev = trace.Event{Type: trace.Produce, MsgID: it.msgID, Topic: it.topic, Tag: it.tag, Time: w.wallMs(it.t0),
		Cost: int64(it.cost / time.Microsecond), OK: true, Host: traceHost(), Group: w.cfg.TraceOptions.Group,
		Broker: int(it.broker), Partition: int(it.partition), Offset: it.offset, Attempt: int(it.attempts), Size: int(it.size)}
	if x := it.x; x != nil {
		ev.Keys, ev.Detail = x.keys, x.detail
		if x.failed {
			ev.MsgID, ev.Err, ev.OK = -1, x.err, false
			ev.Broker, ev.Partition, ev.Offset = -1, -1, -1
		}
	}
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
	case e.Released:
		r.Detail = "released to the broker: delivered again after " + e.Retry.Delay.String()
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

// TraceStats returns the push consumer's trace counters (zero without
// Config.Trace).
func (c *PushConsumer) TraceStats() TraceStats { return c.trace.stats() }
