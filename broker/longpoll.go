package broker

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/internal/sockwrite"
	"github.com/metaqgo/metaq/protocol"
)

// Long polling: a get that found nothing is parked until a record arrives
// on its partition, its deadline passes, or the connection stops reading.
//
// A parked get has no goroutine. It is a store.Waiter: the goroutine that
// makes its record readable calls it — the dispatcher, or, when the
// dispatcher was asleep, the producer's own reader dispatching inline
// (store/dispatch.go) — and that goroutine reads the records (ReadIndexed:
// it must not wait for the dispatcher, which may be itself) and writes the
// reply to the consumer's socket with one non-blocking write when the write
// side is free and nothing is queued before it. So the end-to-end path is
// read put → append → write out → index → write the consumer's reply, all
// on the thread that read the put, like Redis serving a blocked XREAD in the
// XADD's event-loop turn: no goroutine hand-off and no futex wake between
// the put and the delivery (the parked goroutine it replaces cost one of
// each, plus one more to start it, per message).
//
// The write never blocks the waker: it is one write(2) of at most
// parkWriteMax bytes on the non-blocking socket; what the socket does not
// take (a consumer that does not read) is queued, in order, for the
// connection's writer goroutine, as is every reply that cannot be written
// that way (TLS, a busy write side, replies queued before it, a large or
// non-value reply).
//
// Deadline and stop: a timer (time.AfterFunc: no goroutine until it fires)
// answers 404 at the deadline; when the reader stops, every parked get of
// the connection is answered 404 at once (finishReading → stopParked).
// Exactly one of fire, expiry and stop answers a parked get: pg.state.

// parkWriteMax bounds the reply a waker copies into one write.
const parkWriteMax = 16 << 10

// Bounds of a parked get.
//
// The gets parked on one connection are bounded by maxParkedGetsPerConnection
// (Options.MaxParkedGets), as pops are by maxParkedPops (popconn.go): each
// holds a parkedGet, a timer and a store waiter (about 300 bytes) for up to
// its maxWaitMs, and the reader goes on reading, so without a bound one
// connection pipelining gets grew the broker with what it sent. Beyond it a
// get that finds nothing is answered 503 at once (the client backs off and
// fetches again). A client library keeps one get in flight per partition it
// consumes, all the partitions of one broker on one connection, so the
// default is larger than pop's: four times the Go client's default window of
// 1,024 requests in flight per connection (client.Config.MaxInFlight), which
// bounds its gets on the connection. A client consuming more partitions of
// one broker with a larger window needs the key raised with it.
//
// maxWaitMs is at most 2^31−1 (the parser refuses more, as for pop); park
// clamps it again before turning it into a time.Duration, which overflows
// from about 2^43 ms.
const (
	defaultMaxParkedGets = 4096
	maxParkWaitMs        = 1<<31 - 1
)

const (
	parkArmed  int32 = iota // waiting in the store
	parkFiring              // a waker is reading or re-arming it
	parkDone                // answered (or dropped with the connection)
)

type parkedGet struct {
	c       *conn
	g       getReq
	w       store.Waiter
	timer   *time.Timer
	state   atomic.Int32
	expired atomic.Bool // the deadline passed or the reader stopped

	prev, next *parkedGet // c.pk.list; guarded by c.pk.mu
}

// parkState is a connection's parked gets and the waker's write scratch.
type parkState struct {
	mu   sync.Mutex
	list *parkedGet // guarded by mu
	// raw is the socket for the wakers' non-blocking writes (nil: TLS).
	// Set by the reader at the first park, before any waiter is armed.
	raw     syscall.RawConn
	rawDone bool
	buf     []byte       // the waker's reply; owned with conn.writing
	n       atomic.Int32 // gets parked now (bounded by Options.MaxParkedGets)
}

// mayPark reports whether another get may be parked on the connection;
// otherwise it queues the 503 (reader only).
func (c *conn) mayPark(g *getReq) bool {
	limit := c.srv.opts.MaxParkedGets
	if int(c.pk.n.Load()) < limit {
		return true
	}
	c.srv.stats.getMiss.Add(1)
	g.ts.getMiss.Add(1)
	c.rq.addResultString(protocol.StatusServiceUnavailable, "no message at position "+itoa(g.offset)+", and "+strconv.Itoa(limit)+
		" gets already wait on this connection (maxParkedGetsPerConnection): wait for their replies", g.opaque)
	return false
}

// park holds a get that found nothing (see above).
func (c *conn) park(g getReq, maxWaitMs int64) {
	c.handOffReplies() // a parked get may be answered at once (another connection's put)
	s := c.srv
	s.stats.longPolls.Add(1)
	if !c.pk.rawDone {
		c.pk.rawDone = true
		if sc, ok := c.nc.(*net.TCPConn); ok {
			c.pk.raw, _ = sc.SyscallConn()
		}
	}
	pg := &parkedGet{c: c, g: g}
	pg.w.Fn = pg.fire
	c.pk.n.Add(1)
	c.parked.Add(1)
	c.wg.Add(1)
	c.pk.mu.Lock()
	pg.next = c.pk.list
	if c.pk.list != nil {
		c.pk.list.prev = pg
	}
	c.pk.list = pg
	c.pk.mu.Unlock()
	pg.timer = time.AfterFunc(time.Duration(min(maxWaitMs, maxParkWaitMs))*time.Millisecond, pg.expire)
	pg.state.Store(parkFiring) // arm below as if re-arming after a wake-up
	pg.rearm()
}

// rearm arms pg in the store again (state parkFiring, held by the caller);
// when its record is readable already it is answered at once.
func (pg *parkedGet) rearm() {
	s := pg.c.srv
	for {
		if pg.expired.Load() {
			pg.answer(nil, nil)
			return
		}
		pg.state.Store(parkArmed)
		if s.store.WaitFunc(pg.g.ts.name, pg.g.partition, pg.g.offset, &pg.w) {
			// Armed. An expiry since the state store above either found it
			// firing and left it to us, or answered it before WaitFunc
			// linked it: unlink it then, or it would stay in the store.
			if pg.expired.Load() {
				switch {
				case pg.state.CompareAndSwap(parkArmed, parkDone):
					s.store.CancelWait(&pg.w)
					pg.answer(nil, nil)
				case pg.state.Load() == parkDone:
					s.store.CancelWait(&pg.w)
				}
			}
			return
		}
		if !pg.state.CompareAndSwap(parkArmed, parkFiring) {
			return // an expiry took it
		}
		if pg.read() {
			return
		}
	}
}

// fire is the store's call: a record at or past the get's offset is
// readable (or the store closed).
func (pg *parkedGet) fire() {
	if !pg.state.CompareAndSwap(parkArmed, parkFiring) {
		return
	}
	if !pg.read() {
		pg.rearm()
	}
}

// read reads the parked get's records and answers it; false when there is
// still nothing for it (woken for a record a filter skips, say): re-arm.
func (pg *parkedGet) read() bool {
	g := &pg.g
	res, err := pg.c.srv.store.ReadIndexed(g.ts.name, g.partition, g.offset, g.maxBytes, g.filter)
	if err == nil && res.Status == store.ReadNoMessage && !pg.expired.Load() {
		res.Release()
		return false
	}
	if err == nil && res.Status == store.ReadNoMessage {
		res.Release()
		res = nil // expired meanwhile: 404
	}
	pg.answer(res, err)
	return true
}

// expire answers the get 404 (deadline, or the reader stopped), unless a
// waker is at it: it then sees expired and answers instead.
func (pg *parkedGet) expire() {
	pg.expired.Store(true)
	if pg.state.CompareAndSwap(parkArmed, parkDone) {
		pg.c.srv.store.CancelWait(&pg.w)
		pg.answer(nil, nil)
	}
}

// answer queues or writes the reply (res nil and err nil: 404) and ends the
// parked get.
func (pg *parkedGet) answer(res *store.ReadResult, err error) {
	pg.state.Store(parkDone)
	pg.timer.Stop()
	c, g := pg.c, &pg.g
	switch {
	case res == nil && err == nil:
		c.notFound(g)
	case err == nil && res.Status == store.ReadFound && c.writeParked(g, res):
	default:
		c.enqueue(func(q *outQueue) { c.srv.readReply(q, g, res, err) })
	}
	c.pk.mu.Lock()
	if pg.prev != nil {
		pg.prev.next = pg.next
	} else {
		c.pk.list = pg.next
	}
	if pg.next != nil {
		pg.next.prev = pg.prev
	}
	pg.prev, pg.next = nil, nil
	c.pk.mu.Unlock()
	c.pk.n.Add(-1)
	c.parkedDone()
	c.wg.Done()
}

// stopParked answers every parked get of the connection 404 (the reader
// stopped). The reader parks no more, so one snapshot of the list holds
// them all; expire is a no-op for a get answered meanwhile. (Rescanning
// the list from its head after each expire was quadratic when many gets
// stayed linked, being answered by their wakers.)
func (c *conn) stopParked() {
	c.pk.mu.Lock()
	pgs := make([]*parkedGet, 0, max(c.parked.Load(), 0))
	for p := c.pk.list; p != nil; p = p.next {
		pgs = append(pgs, p)
	}
	c.pk.mu.Unlock()
	for _, pg := range pgs {
		pg.expire()
	}
}

// writeParked writes a found get's reply from the waker's goroutine with one
// non-blocking write, queueing what the socket does not take for the
// writer; false (nothing done) when it cannot be written that way.
func (c *conn) writeParked(g *getReq, res *store.ReadResult) bool {
	if c.pk.raw == nil || res.Bytes > parkWriteMax {
		return false
	}
	c.mu.Lock()
	if c.closeErr != nil || c.writing || len(c.out.replies) != 0 || c.readerDone {
		c.mu.Unlock()
		return false
	}
	c.writing = true
	c.mu.Unlock()
	g.ts.getMsgs.Add(int64(res.Count))
	g.ts.getBytes.Add(int64(res.Bytes))
	b := protocol.AppendValueHeader(c.pk.buf[:0], res.Bytes, g.opaque)
	for _, r := range res.Bufs {
		b = append(b, r...)
	}
	res.Release()
	// Not attempted (a write deadline the writer set has passed, or the
	// socket is closing): n = 0, and the writer writes it, or fails as it
	// would.
	n, err := sockwrite.Once(c.pk.raw, b)
	rest := b[n:]
	if cap(b) <= parkWriteMax+64 {
		c.pk.buf = b[:0]
	}
	if err != nil {
		c.finishInline(err)
		return true
	}
	if len(rest) == 0 {
		c.finishInline(nil)
		return true
	}
	// The socket is full: the rest goes first in the writer's queue.
	var q outQueue
	start := len(q.arena)
	q.arena = append(q.arena, rest...)
	q.replies = append(q.replies, reply{kind: replyRaw, bodyStart: start, bodyEnd: len(q.arena)})
	q.bytes = len(rest)
	c.mu.Lock()
	c.writing = false
	if c.closeErr == nil {
		c.out, q = q, c.out
		c.appendQueueLocked(&q)
		c.outBytes += len(rest)
	}
	c.mu.Unlock()
	c.signalWriter()
	return true
}

// parkedDone ends a parked get after its reply was queued or written. The
// writer needs a wake-up only when the reader has stopped (it closes the
// connection once nothing is parked or queued; see idleAfterReader):
// otherwise the reply's own signal, or the inline write, was enough.
func (c *conn) parkedDone() {
	c.parked.Add(-1)
	c.mu.Lock()
	done := c.readerDone
	c.mu.Unlock()
	if done {
		c.signalWriter()
	}
}

func (c *conn) notFound(g *getReq) {
	c.srv.stats.getMiss.Add(1)
	g.ts.getMiss.Add(1)
	c.enqueue(func(q *outQueue) {
		q.addResultString(protocol.StatusNotFound, "Could not find message at position "+itoa(g.offset), g.opaque)
	})
}
