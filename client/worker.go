package client

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// partWorker consumes one partition: it claims the owner node (clustering),
// loads the start offset, fetches with long polling and hands messages to the
// handler — itself in ordered mode, through the shared pool in concurrent
// mode — tracking which offsets are finished so that commits never pass an
// unfinished message.
type partWorker struct {
	c   *Consumer
	key partKey
	sub *subscription

	ctx    context.Context // cancelled on stop
	cancel context.CancelFunc
	done   chan struct{} // run returned: no fetch, no dispatch, no handler in flight

	claimed atomic.Bool
	running atomic.Bool // offset loaded, fetching

	// Concurrent mode: the pool's handlers of this worker's messages. A
	// stopping worker waits for those, not for the messages still queued
	// for the pool: the pool may be busy in other partitions' handlers for
	// long, and the rebalance would wait with it. Once poolShut is set, the
	// pool drops this worker's queued messages (unfinished: not committed).
	poolMu   sync.Mutex
	poolShut bool
	tasks    sync.WaitGroup

	tr tracker

	commitMu      sync.Mutex
	lastCommitted Offset
	final         bool
}

// batch is one fetched block (or an offset move when msgs is empty).
type batch struct {
	msgs []Message
	next int64
}

// task is a message for the concurrent pool.
type task struct {
	w   *partWorker
	m   *Message
	seq uint64
}

func (c *Consumer) newWorker(k partKey) *partWorker {
	w := &partWorker{c: c, key: k, sub: c.subs[k.topic], done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(c.ctx)
	return w
}

func (w *partWorker) logArgs(args ...any) []any {
	return append([]any{"topic", w.key.topic, "partition", w.key.p.String()}, args...)
}

func (w *partWorker) run() {
	defer close(w.done)
	c := w.c
	if !c.opts.Broadcast && !w.claim() {
		return
	}
	off, ok := w.initOffset()
	if !ok {
		return
	}
	c.log.Debug("metaq client: consuming", w.logArgs("offset", off)...)
	w.running.Store(true)
	defer w.running.Store(false)
	batches := make(chan *batch, c.opts.Prefetch)
	var dispatched sync.WaitGroup
	dispatched.Add(1)
	go func() {
		defer dispatched.Done()
		w.dispatch(batches)
	}()
	w.fetch(off, batches)
	close(batches)
	dispatched.Wait()
	w.poolMu.Lock()
	w.poolShut = true
	w.poolMu.Unlock()
	w.tasks.Wait()
}

// enterPool admits a pool goroutine to handle one of w's messages; false
// once w stopped (or is stopping). The caller calls w.tasks.Done after.
func (w *partWorker) enterPool() bool {
	w.poolMu.Lock()
	defer w.poolMu.Unlock()
	if w.poolShut || w.ctx.Err() != nil {
		return false
	}
	w.tasks.Add(1)
	return true
}

// stop ends the worker and, when commit, commits its position and releases
// the owner node.
func (w *partWorker) stop(commit bool) {
	w.cancel()
	<-w.done
	c := w.c
	// The final commit, and no commit of this worker after it. Its timeout
	// starts once it holds commitMu: a periodic commit stuck on a slow
	// ZooKeeper must not use up the final one's time.
	w.commitMu.Lock()
	if commit && !c.noCommit.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		err := w.commitLocked(ctx)
		if err == nil && !c.opts.Broadcast {
			// Durable before the owner node goes: an OffsetStore may buffer
			// commits until Flush, and the next owner loads the offset as
			// soon as it claims the partition.
			err = c.store.Flush(ctx)
		}
		if err != nil {
			c.log.Warn("metaq client: committing offset of a released partition", w.logArgs("err", err)...)
		}
		cancel()
	}
	w.final = true
	w.commitMu.Unlock()
	// Release even when no claim succeeded: a claim that timed out may
	// still have created the node (ReleasePartition deletes only our own).
	if !c.opts.Broadcast && !c.noCommit.Load() {
		w.release()
	}
}

// release deletes the owner node, retrying until it succeeds or the
// consumer closes: a node left behind lives as long as our session, and
// the partition's next owner would wait for it forever (docs/client.md,
// Failures). After a session expiry the node is gone and the release
// succeeds at once; at Close one attempt is made, the session's end
// deletes the node anyway.
func (w *partWorker) release() {
	c := w.c
	b := backoff{min: 100 * time.Millisecond, max: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		err := c.zk.ReleasePartition(ctx, c.group, w.key.topic, w.key.p, c.id)
		cancel()
		if err == nil {
			if attempt > 1 {
				c.log.Info("metaq client: released partition", w.logArgs("attempts", attempt)...)
			}
			return
		}
		if c.ctx.Err() != nil {
			c.log.Warn("metaq client: releasing partition", w.logArgs("err", err)...)
			return
		}
		if attempt&(attempt-1) == 0 {
			c.log.Warn("metaq client: releasing partition failed; retrying", w.logArgs("err", err, "attempts", attempt)...)
		}
		if !sleepCtx(c.ctx, b.next()) {
			return
		}
	}
}

// claim creates the owner node, retrying with capped backoff while the
// previous owner still holds it (it releases after committing). Each attempt
// runs to completion even when the worker is stopped meanwhile: an attempt
// abandoned half-way could still create the node in ZooKeeper, and a node we
// do not know we hold would never be released (stop always releases).
func (w *partWorker) claim() bool {
	c := w.c
	b := backoff{min: c.opts.ClaimBackoff, max: c.opts.MaxClaimBackoff}
	for attempt := 1; ; attempt++ {
		if w.ctx.Err() != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		ok, holder, err := c.zk.ClaimPartition(ctx, c.group, w.key.topic, w.key.p, c.id)
		cancel()
		if ok {
			w.claimed.Store(true)
			c.log.Debug("metaq client: claimed", w.logArgs("attempts", attempt)...)
			return w.ctx.Err() == nil
		}
		switch {
		case err != nil:
			c.log.Warn("metaq client: claiming partition", w.logArgs("err", err)...)
		case attempt == 20:
			c.log.Warn("metaq client: partition still owned by another consumer; waiting for it", w.logArgs("owner", holder)...)
		default:
			c.log.Debug("metaq client: partition owned by another consumer", w.logArgs("owner", holder)...)
		}
		if !sleepCtx(w.ctx, b.next()) {
			return false
		}
	}
}

// initOffset loads the committed offset or resolves the start position (and
// commits it at once, so that a rebalance before the first commit does not
// move a FromLatest group forward).
func (w *partWorker) initOffset() (int64, bool) {
	c := w.c
	b := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for {
		off, err := w.loadOffset()
		if err == nil {
			return off, true
		}
		if w.ctx.Err() != nil {
			return 0, false
		}
		c.log.Warn("metaq client: cannot load the start offset; retrying", w.logArgs("err", err)...)
		if !sleepCtx(w.ctx, b.next()) {
			return 0, false
		}
	}
}

func (w *partWorker) loadOffset() (int64, error) {
	c := w.c
	ctx, cancel := context.WithTimeout(w.ctx, c.cfg.RequestTimeout)
	defer cancel()
	o, ok, err := c.store.Load(ctx, w.key.topic, w.key.p)
	if err != nil {
		return 0, err
	}
	if ok {
		w.tr.init(o)
		w.setCommitted(o)
		return o.Offset, nil
	}
	addr := c.addrOf(w.key)
	var conn *brokerConn
	if addr != "" { // never dial "": the pool would keep a connection to nowhere
		conn = c.pool.get(addr)
	}
	if conn == nil {
		return 0, fmt.Errorf("no broker address for partition %s", w.key.p)
	}
	var off int64
	part := w.key.p.Partition
	from := c.opts.From.kind
	if from == startLatest && w.key.topic == RetryTopic(c.group) {
		// The retry topic holds only what this group gave back, and the
		// broker creates it with the first of those: starting at its end
		// would skip them (docs/client.md; RocketMQ does the same).
		from = startEarliest
	}
	switch from {
	case startLatest:
		off, err = offsetOn(ctx, conn, w.key.topic, c.group, part, math.MaxInt64, c.cfg.RequestTimeout)
	case startTime:
		off, err = seekOn(ctx, conn, w.key.topic, part, c.opts.From.t.UnixMilli(), c.cfg.RequestTimeout)
	default:
		off, err = offsetOn(ctx, conn, w.key.topic, c.group, part, 0, c.cfg.RequestTimeout)
	}
	if err != nil {
		return 0, err
	}
	o = Offset{MsgID: -1, Offset: off}
	w.tr.init(o)
	if !c.noCommit.Load() {
		// Not w.ctx: a write abandoned half-way still lands later.
		cctx, ccancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		err := c.store.Commit(cctx, w.key.topic, w.key.p, o)
		if err == nil {
			err = c.store.Flush(cctx)
		}
		ccancel()
		if err != nil {
			return 0, err
		}
	}
	w.setCommitted(o)
	c.log.Debug("metaq client: new position", w.logArgs("from", c.opts.From.String(), "offset", off)...)
	return off, nil
}

func (w *partWorker) setCommitted(o Offset) {
	w.commitMu.Lock()
	w.lastCommitted = o
	w.commitMu.Unlock()
}

// commit stores the worker's committable position when it moved.
func (w *partWorker) commit(ctx context.Context) error {
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	return w.commitLocked(ctx)
}

func (w *partWorker) commitLocked(ctx context.Context) error {
	if w.final || !w.tr.ready() || w.c.noCommit.Load() {
		return nil
	}
	o := w.tr.committable()
	if o == w.lastCommitted {
		return nil
	}
	if err := w.c.store.Commit(ctx, w.key.topic, w.key.p, o); err != nil {
		return fmt.Errorf("%s/%s: %w", w.key.topic, w.key.p, err)
	}
	w.lastCommitted = o
	return nil
}

// fetch long-polls the partition and queues batches until stopped.
func (w *partWorker) fetch(off int64, out chan<- *batch) {
	c := w.c
	req := FetchRequest{
		Topic:     w.key.topic,
		Group:     c.group,
		Partition: w.key.p.Partition,
		MaxBytes:  c.opts.MaxFetchBytes,
		MaxWait:   c.opts.MaxWait,
		Tags:      w.sub.getTags,
		Where:     w.sub.where.String(),
	}
	dec := decoder{topic: w.key.topic, brokerID: w.key.p.BrokerID}
	errBackoff := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	missBackoff := backoff{min: 50 * time.Millisecond, max: time.Second}
	failures := 0
	for w.ctx.Err() == nil {
		addr := c.addrOf(w.key)
		if addr == "" { // the partition is going away: a rebalance follows
			if !sleepCtx(w.ctx, missBackoff.next()) {
				return
			}
			continue
		}
		conn := c.pool.get(addr)
		if conn == nil {
			return
		}
		req.Offset = off
		start := time.Now()
		res, err := fetchOn(w.ctx, conn, &req, c.cfg.RequestTimeout, &dec)
		if err != nil && (res == nil || len(res.Messages) == 0) {
			if w.ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures&(failures-1) == 0 {
				c.log.Warn("metaq client: fetch failed; retrying", w.logArgs("offset", off, "err", err, "failures", failures)...)
			}
			if !sleepCtx(w.ctx, errBackoff.next()) {
				return
			}
			continue
		}
		if err != nil {
			c.log.Error("metaq client: bad record from broker; the rest of the block is fetched again", w.logArgs("err", err)...)
		}
		failures = 0
		errBackoff.reset()
		var b *batch
		switch {
		case res.Moved:
			// Routine with a tag filter (a stretch of other tags) or after
			// retention; backwards means the broker lost messages.
			if res.NextOffset < off {
				c.log.Warn("metaq client: offset beyond the partition's end; moved back by the broker", w.logArgs("from", off, "to", res.NextOffset)...)
			} else {
				c.log.Debug("metaq client: offset moved by the broker", w.logArgs("from", off, "to", res.NextOffset)...)
			}
			if res.NextOffset == off && !sleepCtx(w.ctx, missBackoff.next()) {
				return
			}
			b = &batch{next: res.NextOffset}
		case len(res.Messages) == 0:
			// Nothing new. A 404 long before MaxWait (a topic the broker does
			// not accept, a broker shutting down) must not become a busy loop.
			if time.Since(start) < c.opts.MaxWait/2 {
				if !sleepCtx(w.ctx, missBackoff.next()) {
					return
				}
			} else {
				missBackoff.reset()
			}
			continue
		default:
			missBackoff.reset()
			b = &batch{msgs: res.Messages, next: res.NextOffset}
		}
		select {
		case out <- b:
		case <-w.ctx.Done():
			return
		}
		off = res.NextOffset
	}
}

// dispatch hands the batches' messages to the handler, in order.
func (w *partWorker) dispatch(in <-chan *batch) {
	c := w.c
	f := w.sub.filter
	for b := range in {
		for i := range b.msgs {
			if w.ctx.Err() != nil {
				return
			}
			m := &b.msgs[i]
			if !f.All() && !f.MatchTag(m.Tag) { // a tag-hash collision
				w.tr.skip(m.Offset + 1)
				continue
			}
			seq := w.tr.push(m.Offset, m.MsgID)
			if c.tasks == nil {
				if !w.handle(m) {
					return
				}
				w.tr.finish(seq)
				continue
			}
			select {
			case c.tasks <- task{w: w, m: m, seq: seq}:
			case <-w.ctx.Done():
				return
			}
		}
		w.tr.skip(b.next)
	}
}

// poolWorker runs concurrent-mode tasks.
func (c *Consumer) poolWorker() {
	defer c.wg.Done()
	for t := range c.tasks {
		if !t.w.enterPool() {
			continue // released meanwhile: left to the next owner
		}
		if t.w.handle(t.m) {
			t.w.tr.finish(t.seq)
		}
		t.w.tasks.Done()
	}
}

// handle runs the handler until it succeeds or the retry policy takes the
// message; false when the worker was stopped first (the message is then not
// finished and not committed).
func (w *partWorker) handle(m *Message) bool {
	c := w.c
	for attempt := 1; ; attempt++ {
		m.Attempt = attempt // in place: the handler can tell a retry (as RocketMQ's orderly reconsumeTimes)
		var ev *ConsumeEvent
		ctx := w.ctx
		if c.hooks != nil {
			ev = w.beforeConsume(m, attempt) // hook.go
			ctx = ev.Ctx
		}
		err := w.call(ctx, m)
		if ev != nil {
			ev.Cost, ev.Err = time.Since(ev.Start), err
		}
		if err == nil {
			if ev != nil {
				w.afterConsume(ev)
			}
			return true
		}
		if w.ctx.Err() != nil {
			if ev != nil {
				w.afterConsume(ev)
			}
			return false
		}
		m.givenBack = 0
		d := c.opts.RetryPolicy.OnFailure(w.ctx, m, attempt, err)
		if ev != nil {
			ev.Retry = d
			ev.GivenBack, ev.DeadLetter = m.givenBack != 0, m.givenBack == givenBackDLQ
			w.afterConsume(ev)
		}
		if d.Done {
			if attempt > 1 || d.Delay == 0 {
				c.log.Warn("metaq client: handler failed; the retry policy took the message", w.logArgs("offset", m.Offset, "msgId", m.MsgID, "attempts", attempt, "err", err)...)
			}
			return true
		}
		if attempt == 1 || attempt&(attempt-1) == 0 {
			c.log.Warn("metaq client: handler failed; redelivering", w.logArgs("offset", m.Offset, "msgId", m.MsgID, "attempt", attempt, "retryIn", d.Delay, "err", err)...)
		}
		if !sleepCtx(w.ctx, d.Delay) {
			return false
		}
	}
}

// HandlerPanic is the error a panicking handler is turned into.
type HandlerPanic struct {
	Value any
	Stack []byte
}

func (p *HandlerPanic) Error() string {
	return fmt.Sprintf("metaq client: handler panicked: %v", p.Value)
}

func (w *partWorker) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &HandlerPanic{Value: r, Stack: debug.Stack()}
		}
	}()
	return w.sub.handler(ctx, m)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// --- offset tracking ------------------------------------------------------------

// tracker follows the messages of one partition between fetch and commit.
// Messages are pushed in offset order before they are handed out and
// finished when handled; the committable position is the lowest unfinished
// offset, or — when nothing is unfinished — the offset after everything
// handed out or skipped. So a commit never passes a message still in a
// handler, whatever the order handlers finish in.
type tracker struct {
	mu      sync.Mutex
	inited  bool
	next    int64 // offset after the last message pushed or skipped
	lastID  int64 // msgId of the last message below the committable position
	q       []slot
	head    int
	headSeq uint64 // seq of q[head]
	seq     uint64 // next seq
}

type slot struct {
	off, id int64
	done    bool
}

func (t *tracker) init(o Offset) {
	t.mu.Lock()
	t.next, t.lastID, t.inited = o.Offset, o.MsgID, true
	t.mu.Unlock()
}

func (t *tracker) ready() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inited
}

// push registers a message about to be handled and returns its sequence.
func (t *tracker) push(off, id int64) uint64 {
	t.mu.Lock()
	if t.head > 0 && t.head == len(t.q) {
		t.q, t.head = t.q[:0], 0
	} else if t.head > 1024 && t.head > len(t.q)/2 {
		n := copy(t.q, t.q[t.head:])
		t.q, t.head = t.q[:n], 0
	}
	if len(t.q) == t.head {
		t.headSeq = t.seq
	}
	t.q = append(t.q, slot{off: off, id: id})
	s := t.seq
	t.seq++
	t.next = off + 1
	t.mu.Unlock()
	return s
}

// skip moves the position past offsets that need no handling (filtered
// records, an offset moved by the broker).
func (t *tracker) skip(next int64) {
	t.mu.Lock()
	if t.head == len(t.q) || next > t.next {
		t.next = next
	}
	t.mu.Unlock()
}

// finish marks a pushed message handled.
func (t *tracker) finish(seq uint64) {
	t.mu.Lock()
	i := t.head + int(seq-t.headSeq)
	t.q[i].done = true
	for t.head < len(t.q) && t.q[t.head].done {
		t.lastID = t.q[t.head].id
		t.head++
		t.headSeq++
	}
	t.mu.Unlock()
}

// committable is the position that may be committed.
func (t *tracker) committable() Offset {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head < len(t.q) {
		return Offset{MsgID: t.lastID, Offset: t.q[t.head].off}
	}
	return Offset{MsgID: t.lastID, Offset: t.next}
}
