package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Batching (docs/client.md, "Batching"): SendBatch and SendBatchAsync send
// many messages of one topic in `mput` frames (protocol/batch.go): every
// frame goes to one partition and is stored by the broker with one append,
// so its messages get consecutive queue offsets and share one group commit.
// A frame holds at most protocol.MaxBatchCount messages and MaxMessageSize
// bytes; larger batches are cut into several frames, each placed by the
// selector's choice for its first message and retried (as a whole) like a
// single send. ProducerOptions.Linger makes SendAsync collect messages per
// partition for up to Linger before sending them as one frame; it is off by
// default, and Send is never delayed.

// ErrNotBatchable is returned for a message a batch cannot carry: a
// delayed message (DelayLevel, DeliverAt) or one of another topic than the
// batch's first.
var ErrNotBatchable = errors.New("metaq client: message cannot be batched")

// batchFrame is one mput frame through all its attempts.
type batchFrame struct {
	p     *Producer
	cl    *call
	done  func(*call) // f.callDone, bound once
	route *topicRoute
	tbl   *routeTable
	attemptPos
	fixed  bool // idx was chosen before the frame was built (linger): keep it on the first attempt
	topic  string
	first  *Message
	base   int // index of the frame's first message in the caller's batch
	count  int
	block  []byte
	sum    int32
	finish func(f *batchFrame, res []SendResult, err error)
	res    []SendResult
	props  []byte // scratch for one message's properties line
	// Config.Trace (trace.go): the frame's messages, and when the send of
	// the frame (t0) or of each message (t0s, Linger) began.
	msgs []*Message
	t0   time.Duration
	t0s  []time.Duration
}

var framePool sync.Pool

func (p *Producer) newFrame() *batchFrame {
	f, _ := framePool.Get().(*batchFrame)
	if f == nil {
		f = &batchFrame{cl: newCall()}
		f.cl.kind = kindBatch
		f.done = f.callDone
	}
	f.p = p
	f.idx, f.failedBroker = -1, -1
	return f
}

func (f *batchFrame) release() {
	f.cl.reset()
	f.cl.kind = kindBatch
	keep := batchFrame{cl: f.cl, done: f.done, block: f.block[:0], res: f.res[:0], props: f.props[:0], msgs: f.msgs[:0]}
	clear(f.msgs)
	if cap(keep.block) > 8<<20 {
		keep.block = nil
	}
	*f = keep
	framePool.Put(f)
}

func (f *batchFrame) callDone(*call) { f.p.frameDone(f) }

// checkBatch validates msgs for a batch (the topic's name once: the
// others must carry the same).
func (p *Producer) checkBatch(msgs []*Message) error {
	if len(msgs) == 0 {
		return errors.New("metaq client: empty batch")
	}
	if err := msgs[0].validate(p.opts.MaxMessageSize); err != nil {
		return err
	}
	topic := msgs[0].Topic
	for i, m := range msgs {
		if m == nil {
			return errors.New("metaq client: nil message")
		}
		if m.Topic != topic {
			return fmt.Errorf("%w: message %d is for topic %s, the batch for %s", ErrNotBatchable, i, m.Topic, topic)
		}
		if i > 0 {
			if err := m.validateBody(p.opts.MaxMessageSize); err != nil {
				return err
			}
		}
		if m.DelayLevel > 0 || !m.DeliverAt.IsZero() {
			return fmt.Errorf("%w: message %d is delayed (send it with Send or SendAsync)", ErrNotBatchable, i)
		}
	}
	return nil
}

// encodeFrames cuts msgs into frames within the protocol's and the
// broker's limits and encodes their blocks, in one pass into each frame's
// reused buffer; nothing is sent. A message without properties (no tag,
// keys or properties) costs no properties line. dst's frames are appended.
func (p *Producer) encodeFrames(route *topicRoute, msgs []*Message, dst []*batchFrame) ([]*batchFrame, error) {
	limit := p.opts.MaxMessageSize
	first := len(dst)
	f := p.newFrame()
	fail := func(err error) ([]*batchFrame, error) {
		f.release()
		for _, g := range dst[first:] {
			g.release()
		}
		return dst[:first], err
	}
	// The entry header of the previous message, reused while size and flag
	// repeat (a batch's messages are often alike).
	var hdr [32]byte
	hdrLen, hdrSize, hdrFlag := 0, -1, int32(0)
	for i, m := range msgs {
		var props []byte
		if hasProps(m) {
			f.props = appendProps(f.props[:0], m)
			if len(f.props) > protocol.MaxPropertiesLen {
				return fail(fmt.Errorf("metaq client: properties line of %d bytes exceeds %d", len(f.props), protocol.MaxPropertiesLen))
			}
			props = f.props
		}
		d := messageData(m, props)
		if size, flag := d.Len(), d.SendFlag(); size != hdrSize || flag != hdrFlag {
			hdrLen = len(protocol.AppendBatchEntryHeader(hdr[:0], size, flag))
			hdrSize, hdrFlag = size, flag
		}
		start := len(f.block)
		f.block = append(f.block, hdr[:hdrLen]...)
		f.block = d.AppendTo(f.block)
		n := len(f.block) - start
		if n > limit {
			return fail(fmt.Errorf("metaq client: message %d of %d bytes exceeds MaxMessageSize %d in a batch", i, n, limit))
		}
		if f.count == protocol.MaxBatchCount || len(f.block) > limit {
			// The entry starts the next frame (moved; rare).
			g := p.newFrame()
			g.block = append(g.block[:0], f.block[start:]...)
			f.block = f.block[:start]
			dst = append(dst, f)
			f = g
		}
		if f.count == 0 {
			f.first, f.base = m, i
		}
		f.count++
	}
	dst = append(dst, f)
	for _, g := range dst[first:] {
		if p.trace != nil {
			g.msgs = append(g.msgs[:0], msgs[g.base:g.base+g.count]...) // trace.go
		}
		g.route, g.topic = route, msgs[0].Topic
		g.ordered = p.opts.Selector.Ordered(g.first)
		g.sum = protocol.ChecksumNone
		if !p.opts.NoChecksum {
			g.sum = protocol.MessageChecksum(g.block)
		}
	}
	return dst, nil
}

// SendBatch sends msgs (all of one topic) in as few mput frames as the
// limits allow and waits for every frame's answer. The results are in the
// order of msgs. On error some frames may have been stored (their results
// are filled in, the others are zero). ctx bounds the wait for window
// slots and, with a deadline, each frame.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]SendResult, error) {
	type outcome struct {
		res []SendResult
		err error
	}
	ch := make(chan outcome, 1)
	p.SendBatchAsync(ctx, msgs, func(res []SendResult, err error) { ch <- outcome{res, err} })
	o := <-ch
	return o.res, o.err
}

// SendBatchAsync is SendBatch without waiting: cb (which may be nil) is
// called once, from a connection goroutine, with the results of every
// frame (in the order of msgs) and the first error. msgs and their bodies
// must not be changed until cb ran.
func (p *Producer) SendBatchAsync(ctx context.Context, msgs []*Message, cb func([]SendResult, error)) {
	p.inflight.Add(1)
	fail := func(err error) {
		if cb != nil {
			cb(nil, err)
		}
		p.sendDone()
	}
	if p.closed.Load() {
		fail(ErrClosed)
		return
	}
	if err := p.checkBatch(msgs); err != nil {
		fail(err)
		return
	}
	route, err := p.route(ctx, msgs[0].Topic)
	if err != nil {
		fail(err)
		return
	}
	bs := &batchSend{p: p, cb: cb}
	if p.hooks != nil { // hook.go: every message gets its BeforeSend before the frames are encoded
		bs.evs = p.batchBeforeSend(ctx, msgs)
	}
	frames, err := p.encodeFrames(route, msgs, bs.one[:0])
	if err != nil {
		if bs.evs != nil {
			p.batchAfterSend(bs.evs, nil, 0, len(msgs), nil, err, 0, "")
		}
		fail(err)
		return
	}
	var t0 time.Duration
	if p.trace != nil {
		t0 = traceClock() // trace.go
	}
	bs.results = make([]SendResult, len(msgs))
	bs.left = len(frames)
	for _, f := range frames {
		f.finish = bs.finish
		f.t0 = t0
		p.attemptFrame(ctx, f)
	}
}

// batchSend is one SendBatchAsync call: its results, filled in frame by
// frame, and the frames still to answer (one allocation per call).
type batchSend struct {
	p        *Producer
	cb       func([]SendResult, error)
	evs      []SendEvent    // Config.Hooks: one event per message (hook.go); nil without hooks
	one      [1]*batchFrame // encodeFrames' room for the usual single frame
	mu       sync.Mutex
	results  []SendResult
	left     int
	firstErr error
}

func (bs *batchSend) finish(f *batchFrame, res []SendResult, err error) {
	if bs.evs != nil {
		addr, attempts := bs.p.frameAttempt(f)
		bs.p.batchAfterSend(bs.evs, nil, f.base, f.count, res, err, attempts, addr)
	}
	bs.mu.Lock()
	copy(bs.results[f.base:], res)
	if err != nil && bs.firstErr == nil {
		bs.firstErr = err
	}
	bs.left--
	last := bs.left == 0
	bs.mu.Unlock()
	if last {
		if bs.cb != nil {
			bs.cb(bs.results, bs.firstErr)
		}
		bs.p.sendDone()
	}
}

// attemptFrame starts one attempt of a frame; failures to start go through
// frameDone like failed replies.
func (p *Producer) attemptFrame(ctx context.Context, f *batchFrame) {
	cl := f.cl
	t := f.route.table()
	if len(t.parts) == 0 {
		cl.err = fmt.Errorf("%w %s", ErrNoPartitions, f.topic)
		f.ordered = true // nothing to retry on
		p.frameDone(f)
		return
	}
	if !f.fixed || f.attempt > 0 || f.tbl != t || f.idx < 0 || f.idx >= len(t.parts) {
		f.idx = p.pick(t, f.first, &f.attemptPos)
	}
	f.tbl = t
	conn := t.conns[f.idx]
	cl.err, cl.code = nil, 0
	cl.stamp, cl.by = 0, nil
	cl.onDone = f.done
	if err := conn.startBatch(ctx, cl, conn.deadlineFor(ctx, p.opts.SendTimeout), f.topic, t.putPartition(f.idx), f.count, f.block, f.sum); err != nil {
		cl.err = err
		p.frameDone(f)
	}
}

// frameDone completes an attempt of a frame: success, a retry elsewhere (in
// a new goroutine: this may run on a connection's reader), or the error.
func (p *Producer) frameDone(f *batchFrame) {
	cl := f.cl
	err := cl.err
	if err == nil && cl.code != protocol.StatusSuccess {
		err = brokerErr(f.tbl.conns[f.idx].addr, cl.code, cl.body)
	}
	if err == nil && len(cl.ids) != f.count {
		err = &ConnError{Addr: f.tbl.conns[f.idx].addr, Err: fmt.Errorf("mput of %d messages answered with %d ids", f.count, len(cl.ids))}
	}
	if err != nil && !f.ordered && IsRetriable(err) && f.attempt < p.opts.SendRetries {
		p.closeMu.Lock()
		if p.ctx.Err() == nil {
			f.attempt++
			f.failedBroker = f.tbl.brokerOf(f.idx)
			p.wg.Add(1)
			p.closeMu.Unlock()
			go func() {
				defer p.wg.Done()
				p.attemptFrame(p.ctx, f)
			}()
			return
		}
		p.closeMu.Unlock()
	}
	res := f.res[:0]
	if err == nil {
		bid := -1
		if !f.tbl.direct {
			bid = f.tbl.parts[f.idx].BrokerID
		}
		for i, id := range cl.ids {
			b := bid
			if b < 0 {
				b, _ = protocol.SplitMsgID(id)
			}
			res = append(res, SendResult{MsgID: id, Partition: Partition{BrokerID: b, Partition: int(cl.partition)}, Offset: cl.offset + int64(i)})
		}
	}
	f.res = res
	if p.trace != nil {
		p.traceFrame(f, res, err) // trace.go
	}
	fin := f.finish
	fin(f, res, err)
	f.release()
}

// startBatch registers and queues an mput frame (cl.onDone runs on
// completion).
func (c *brokerConn) startBatch(ctx context.Context, cl *call, deadline int64, topic string, partition int32, count int, block []byte, sum int32) error {
	if err := c.begin(ctx, cl, deadline); err != nil {
		return err
	}
	cl.batchN = count
	c.wbuf = protocol.AppendBatchPutRunsHeader(c.wbuf, topic, partition, count, len(block), sum, cl.opaque)
	c.wbuf = append(c.wbuf, block...)
	// A frame is a batch already: write it now when nobody is writing
	// rather than waking the writer goroutine for it.
	c.endSync()
	return nil
}

// --- linger ---------------------------------------------------------------

// lingerKey is one partition of one topic route.
type lingerKey struct {
	route *topicRoute
	idx   int
}

// lingerBatch collects SendAsync messages for one partition.
type lingerBatch struct {
	key   lingerKey
	tbl   *routeTable
	cr    *lingerCredit // the credit its messages hold (released when its last frame is answered)
	msgs  []*Message
	cbs   []func(SendResult, error)
	t0s   []time.Duration // Config.Trace: when each message was given to SendAsync (trace.go)
	evs   []*SendEvent    // Config.Hooks: each message's event (hook.go); nil without hooks
	bytes int
	timer *time.Timer
}

// lingerQueue is the closed batches of one partition waiting for its
// sender, in the order they were closed.
type lingerQueue struct {
	batches []*lingerBatch
}

// lingerCredit bounds the lingering messages of one broker connection
// (open, queued and in flight, until their callbacks are due):
// MaxInFlight × BatchSize messages and MaxInFlight × MaxMessageSize bytes,
// what a full window of full batches holds. Guarded by lingerer.mu.
type lingerCredit struct {
	msgs, bytes int
	wake        chan struct{} // closed when credit is given back; nil while nobody waits
}

// lingerer holds the open batches of a producer, the closed ones waiting
// for their partition's sender, and the credit of each connection (guarded
// by mu).
type lingerer struct {
	mu     sync.Mutex
	open   map[lingerKey]*lingerBatch
	queues map[lingerKey]*lingerQueue // a key is present while its sender runs
	credit map[*brokerConn]*lingerCredit
}

// linger adds msg to its partition's open batch; the batch is sent when it
// is full (BatchSize messages or about MaxMessageSize bytes) or Linger after
// its first message. It first takes credit for msg on its partition's
// connection, waiting (bounded by ctx) while the connection's lingering
// messages are at their bound; when ctx ends first, msg fails with
// ctx.Err(). false: msg cannot linger (send it now).
func (p *Producer) linger(ctx context.Context, route *topicRoute, msg *Message, cb func(SendResult, error)) bool {
	if msg.DelayLevel > 0 || !msg.DeliverAt.IsZero() {
		return false
	}
	t := route.table()
	if len(t.parts) == 0 {
		return false
	}
	var ev *SendEvent
	if p.hooks != nil { // hook.go; before the lock: a hook is user code
		ev = &SendEvent{Ctx: ctx, Message: msg, Start: time.Now()}
		p.hooks.beforeSend(ev)
	}
	pos := attemptPos{idx: -1, failedBroker: -1, ordered: p.opts.Selector.Ordered(msg)}
	key := lingerKey{route, p.pick(t, msg, &pos)}
	size := msg.dataLenWithoutProps() + 64 + len(msg.Tag) + 16*len(msg.Keys) + 32*len(msg.Properties)
	l := &p.lingers
	l.mu.Lock()
	cr, err := p.takeCreditLocked(ctx, t.conns[key.idx], size)
	if err != nil {
		l.mu.Unlock()
		if ev != nil {
			p.batchAfterSend(nil, []*SendEvent{ev}, 0, 1, nil, err, 0, "")
		}
		p.asyncFail(cb, err)
		return true
	}
	if l.open == nil {
		l.open = make(map[lingerKey]*lingerBatch)
	}
	b := l.open[key]
	if b != nil && b.tbl != t { // the route changed: send what was collected for the old table
		p.detachLocked(b)
		p.queueLocked(b)
		b = nil
	}
	if b == nil {
		b = &lingerBatch{key: key, tbl: t, cr: cr}
		l.open[key] = b
		b.timer = time.AfterFunc(p.opts.Linger, func() { p.lingerDue(b) })
	}
	b.msgs = append(b.msgs, msg)
	b.cbs = append(b.cbs, cb)
	if ev != nil {
		b.evs = append(b.evs, ev)
	}
	if p.trace != nil {
		b.t0s = append(b.t0s, traceClock()) // trace.go
	}
	b.bytes += size
	if len(b.msgs) >= p.opts.BatchSize || b.bytes >= p.opts.MaxMessageSize/2 {
		p.detachLocked(b)
		p.queueLocked(b)
	}
	l.mu.Unlock()
	return true
}

// takeCreditLocked takes credit for one message of size bytes on c
// (p.lingers.mu held; it is released while waiting). A message larger than
// the byte bound is let through when c holds nothing else.
func (p *Producer) takeCreditLocked(ctx context.Context, c *brokerConn, size int) (*lingerCredit, error) {
	l := &p.lingers
	if l.credit == nil {
		l.credit = make(map[*brokerConn]*lingerCredit)
	}
	cr := l.credit[c]
	if cr == nil {
		cr = &lingerCredit{}
		l.credit[c] = cr
	}
	maxMsgs, maxBytes := p.cfg.MaxInFlight*p.opts.BatchSize, p.cfg.MaxInFlight*p.opts.MaxMessageSize
	for cr.msgs > 0 && (cr.msgs >= maxMsgs || cr.bytes+size > maxBytes) {
		if cr.wake == nil {
			cr.wake = make(chan struct{})
		}
		wake := cr.wake
		l.mu.Unlock()
		var err error
		select {
		case <-wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.ctx.Done():
			err = ErrClosed
		}
		l.mu.Lock()
		if err != nil {
			return nil, err
		}
	}
	cr.msgs++
	cr.bytes += size
	return cr, nil
}

// releaseCredit gives back the credit of a batch's messages.
func (p *Producer) releaseCredit(b *lingerBatch) {
	l := &p.lingers
	l.mu.Lock()
	b.cr.msgs -= len(b.msgs)
	b.cr.bytes -= b.bytes
	if b.cr.wake != nil {
		close(b.cr.wake)
		b.cr.wake = nil
	}
	l.mu.Unlock()
}

// detachLocked removes b from the open batches (p.lingers.mu held).
func (p *Producer) detachLocked(b *lingerBatch) {
	if p.lingers.open[b.key] == b {
		delete(p.lingers.open, b.key)
	}
	b.timer.Stop()
}

// queueLocked hands a detached batch to its partition's sender, starting
// one when none runs (p.lingers.mu held). One sender per partition sends
// the batches in the order they were closed, so the frames of a partition
// reach its connection in send order (per-key order with an ordered
// selector) whichever goroutine closed them; the callers, the Linger
// timers and Close never wait for a window slot themselves.
func (p *Producer) queueLocked(b *lingerBatch) {
	l := &p.lingers
	if q := l.queues[b.key]; q != nil {
		q.batches = append(q.batches, b)
		return
	}
	p.closeMu.Lock()
	if p.ctx.Err() != nil { // closed: nobody would send it
		p.closeMu.Unlock()
		// Not under l.mu (the callbacks are user code), and not in p.wg:
		// Close may be waiting for it already.
		go p.failLingered(b, ErrClosed)
		return
	}
	p.wg.Add(1)
	p.closeMu.Unlock()
	if l.queues == nil {
		l.queues = make(map[lingerKey]*lingerQueue)
	}
	q := &lingerQueue{batches: []*lingerBatch{b}}
	l.queues[b.key] = q
	go p.lingerSender(b.key, q)
}

// lingerSender sends the queued batches of one partition, one after the
// other, until its queue is empty.
func (p *Producer) lingerSender(key lingerKey, q *lingerQueue) {
	defer p.wg.Done()
	l := &p.lingers
	for {
		l.mu.Lock()
		if len(q.batches) == 0 {
			delete(l.queues, key)
			l.mu.Unlock()
			return
		}
		b := q.batches[0]
		q.batches[0] = nil
		q.batches = q.batches[1:]
		l.mu.Unlock()
		p.sendLingered(b)
	}
}

func (p *Producer) lingerDue(b *lingerBatch) {
	p.lingers.mu.Lock()
	if p.lingers.open[b.key] == b {
		p.detachLocked(b)
		p.queueLocked(b)
	} // else: queued already because it was full
	p.lingers.mu.Unlock()
}

// flushLingering hands every open batch to its sender (Close).
func (p *Producer) flushLingering() {
	p.lingers.mu.Lock()
	for _, b := range p.lingers.open {
		p.detachLocked(b)
		p.queueLocked(b)
	}
	p.lingers.mu.Unlock()
}

// failLingered completes every message of a batch that was not sent with
// err.
func (p *Producer) failLingered(b *lingerBatch, err error) {
	p.releaseCredit(b)
	if b.evs != nil {
		p.batchAfterSend(nil, b.evs, 0, len(b.msgs), nil, err, 0, "")
	}
	for i, cb := range b.cbs {
		if cb != nil {
			cb(SendResult{}, err)
		}
		b.cbs[i] = nil
		p.sendDone()
	}
}

// sendLingered sends a detached batch to its partition (on its partition's
// sender); every message's callback gets its own result. The messages were
// counted in flight by SendAsync. It returns once every frame was begun
// (given its window slot and queued on the connection) or failed.
func (p *Producer) sendLingered(b *lingerBatch) {
	frames, err := p.encodeFrames(b.key.route, b.msgs, nil)
	if err != nil {
		p.failLingered(b, err)
		return
	}
	var mu sync.Mutex
	left := len(frames)
	finish := func(f *batchFrame, res []SendResult, err error) {
		mu.Lock()
		left--
		last := left == 0
		mu.Unlock()
		if last {
			p.releaseCredit(b) // before the callbacks: one may send again
		}
		if b.evs != nil {
			addr, attempts := p.frameAttempt(f)
			p.batchAfterSend(nil, b.evs, f.base, f.count, res, err, attempts, addr)
		}
		for i := 0; i < f.count; i++ {
			var r SendResult
			if err == nil {
				r = res[i]
			}
			if cb := b.cbs[f.base+i]; cb != nil {
				cb(r, err)
			}
			p.sendDone()
		}
	}
	for _, f := range frames {
		f.finish = finish
		f.fixed, f.tbl, f.idx = true, b.tbl, b.key.idx
		if p.trace != nil {
			f.t0s = b.t0s[f.base : f.base+f.count]
		}
		p.attemptFrame(p.ctx, f)
	}
}
