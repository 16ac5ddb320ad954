package broker

import (
	"errors"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Memory bound for put data (docs/broker.md, "Memory bound for put data").
//
// A put whose data is whole in one read is handed to the store straight
// from the read buffer. A put whose data spans reads is accumulated by the
// parser, and that is where a client can make the broker hold memory: 100
// connections announcing 4 MiB each and stalling before the last byte held
// 579 MiB for idleTimeout. Three rules bound it:
//
//   - Budget. Before the parser buffers more than the first read of such a
//     put, the connection reserves the put's whole announced length from a
//     broker-wide budget (maxPendingPutBytes). When the budget is spent the
//     reader stops reading (TCP pushes back on the client) until other puts
//     complete; a connection that got its reservation can always finish, so
//     waiting cannot deadlock. A put larger than the whole budget is let in
//     when nothing else is reserved.
//   - Deadline. A put's data must all arrive within putDataTimeoutMs of the
//     first read that left it incomplete, or of the moment it got its
//     reservation when it had to wait; otherwise the broker answers it (400)
//     and closes the connection: the stream cannot be framed without the
//     missing bytes. A put that waits putDataTimeoutMs for a reservation
//     without getting one is answered 503 and its connection closed.
//   - Release. The reservation is returned when the put completes or the
//     connection ends, the parser keeps one data buffer of at most
//     maxReadBuf between puts, given back when the connection goes quiet
//     (readbuf.go; larger ones are dropped after use), and
//     once the budget falls back to zero after a burst (a quarter of it, at
//     most 64 MiB, released) the freed memory is handed back to the OS
//     (debug.FreeOSMemory, at most every 10 s) instead of waiting for the
//     runtime's background scavenger.
//
// Lock rules: putBudget.mu guards used, waiting, changed, released and the
// return timer; it is never held while blocking. conn.put is reader-only.

const (
	defaultMaxPendingPutBytes = 256 << 20
	defaultPutDataTimeout     = 30 * time.Second
	memReturnMin              = 64 << 20 // bytes released before memory is handed back (or limit/4)
	memReturnDelay            = time.Second
	memReturnEvery            = 10 * time.Second
)

var (
	errPutBudgetTimeout = errors.New("put data budget exhausted")
	errPutBudgetClosed  = errors.New("broker shutting down")
)

// putBudget is the broker-wide reservation of buffered put data.
type putBudget struct {
	limit  int64
	closed chan struct{} // closed by Shutdown: waiters give up

	mu         sync.Mutex
	used       int64
	waiting    int
	changed    chan struct{} // closed (then forgotten) when bytes are released
	released   int64         // bytes released since memory was last handed back
	returnT    *time.Timer   // pending memory return
	lastReturn time.Time
	isClosed   bool

	waits    atomic.Int64 // reservations that had to wait
	refused  atomic.Int64 // connections closed after waiting putDataTimeout for budget
	timeouts atomic.Int64 // puts whose data did not arrive within putDataTimeout
	returns  atomic.Int64 // memory handed back to the OS
}

func newPutBudget(limit int64) *putBudget {
	return &putBudget{limit: limit, closed: make(chan struct{})}
}

// fitsLocked reports whether n more bytes may be reserved.
func (b *putBudget) fitsLocked(n int64) bool {
	return b.used+n <= b.limit || b.used == 0
}

// acquire reserves n bytes, waiting while the budget is spent until
// deadline (zero: no deadline), dead closes or the broker shuts down.
func (b *putBudget) acquire(n int64, deadline time.Time, dead <-chan struct{}) error {
	b.mu.Lock()
	if b.fitsLocked(n) {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	b.waiting++
	b.waits.Add(1)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	for {
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-expired:
			err = errPutBudgetTimeout
		case <-dead:
			err = errConnClosed
		case <-b.closed:
			err = errPutBudgetClosed
		}
		b.mu.Lock()
		if err == nil && !b.fitsLocked(n) {
			continue
		}
		b.waiting--
		if err == nil {
			b.used += n
		}
		b.mu.Unlock()
		return err
	}
}

// release returns n reserved bytes.
func (b *putBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.released += n
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	if b.used == 0 && b.released >= min(memReturnMin, max(b.limit/4, 1)) && b.returnT == nil && !b.isClosed {
		delay := max(memReturnDelay, time.Until(b.lastReturn.Add(memReturnEvery)))
		b.returnT = time.AfterFunc(delay, b.returnMemory)
	}
}

// returnMemory hands the freed put buffers back to the OS when no put is
// being buffered any more (timer goroutine).
func (b *putBudget) returnMemory() {
	b.mu.Lock()
	b.returnT = nil
	if b.used > 0 || b.isClosed {
		b.mu.Unlock()
		return
	}
	b.released = 0
	b.lastReturn = time.Now()
	b.mu.Unlock()
	b.returns.Add(1)
	debug.FreeOSMemory()
}

func (b *putBudget) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		return
	}
	b.isClosed = true
	close(b.closed)
	if b.returnT != nil {
		b.returnT.Stop()
		b.returnT = nil
	}
}

func (b *putBudget) snapshot() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiting
}

// partialPut is the reader's view of a put whose data spans reads.
type partialPut struct {
	active bool
	last   protocol.PartialData
	start  time.Time // first read that left it incomplete, or its reservation
	held   int64     // bytes reserved from the budget for it
}

// trackPartialPut runs after each parsed read of n bytes: it notices a put
// left incomplete, reserves its length from the budget (waiting when it is
// spent) and releases the reservation of a put that completed. It returns
// false when the connection must close (its reply is queued).
func (c *conn) trackPartialPut(n int) bool {
	pd, ok := c.parser.Partial()
	if !ok {
		if c.put.active {
			c.releasePut()
			c.put.active = false
		}
		return true
	}
	// The same put as after the previous read iff all n bytes went into it.
	same := c.put.active && pd.Len == c.put.last.Len && pd.Received == c.put.last.Received+n
	if !same {
		c.releasePut()
		c.put.active, c.put.start = true, time.Now()
	}
	c.put.last = pd
	var want int64
	if pd.Buffered {
		want = int64(pd.Len)
	}
	if c.put.held == want {
		return true
	}
	c.releasePut()
	if want == 0 {
		return true
	}
	if finishOp(pd.Op) {
		// The handles of an ack, reject, release or extend: whoever may use
		// a consumer group may send them (a subscriber acking a batch
		// need not publish); they reserve like put data.
		if !c.mayUseGroups() {
			if want <= maxUnauthorizedPutData {
				return true // buffered without a reservation; authorize refuses it when complete
			}
			c.closeReason(protocol.StatusForbidden, pd.Opaque, "forbidden: this connection may not use any consumer group ("+
				c.whoForGroups()+"); "+pd.Op.String()+" data of "+strconv.Itoa(pd.Len)+" bytes is not buffered: closing the connection")
			return false
		}
	} else if !c.mayPut() {
		if want <= maxUnauthorizedPutData {
			return true // buffered without a reservation; authorize refuses it when complete
		}
		c.srv.stats.putFailed.Add(1)
		c.closeReason(protocol.StatusForbidden, pd.Opaque, "forbidden: this connection may not put to any topic ("+
			c.whoForPut()+"); a put of "+strconv.Itoa(pd.Len)+" bytes is not buffered: closing the connection")
		return false
	}
	var deadline time.Time
	if t := c.srv.opts.PutDataTimeout; t > 0 {
		deadline = c.put.start.Add(t)
	}
	if err := c.srv.putBudget.acquire(want, deadline, c.dead); err != nil {
		if err == errPutBudgetTimeout {
			c.srv.putBudget.refused.Add(1)
			c.closeReason(protocol.StatusServiceUnavailable, pd.Opaque, "put refused: the broker is buffering maxPendingPutBytes="+
				strconv.FormatInt(c.srv.putBudget.limit, 10)+" bytes of incomplete puts and no room came free within putDataTimeoutMs="+
				strconv.FormatInt(c.srv.opts.PutDataTimeout.Milliseconds(), 10)+"; retry later")
		}
		return false
	}
	c.put.held = want
	c.parser.GrowData() // the reserved bytes are the buffer: no doubling garbage
	// The data deadline counts from when the broker is ready to read it: time
	// spent waiting for budget is not the client's.
	c.put.start = time.Now()
	return true
}

// maxUnauthorizedPutData is the most put data the broker buffers for a
// connection that may not put to any topic (not authenticated with
// anonymous=none, or a user without publish rights): it takes no
// reservation, and such a put is refused (403) once complete, by
// authorize. A larger one is refused on its first read and the connection
// closed (the stream cannot be framed without reading the data): whoever
// may not put cannot hold the budget of those who may. The handles of an
// ack, reject, release or extend are not put data: the same rule applies
// to them with "use any consumer group" for "put to any topic" (an ack
// needs the group's rights, authorize), so a subscriber without publish
// rights can ack a batch of any size.
const maxUnauthorizedPutData = 4 << 10

// finishOp reports whether op is one whose data block holds handles
// (popconn.go) rather than messages.
func finishOp(op protocol.Op) bool {
	switch op {
	case protocol.OpAck, protocol.OpReject, protocol.OpRelease, protocol.OpExtend:
		return true
	}
	return false
}

// mayUseGroups reports whether the connection's identity may use some
// consumer group (always true without [security]).
func (c *conn) mayUseGroups() bool {
	a := c.srv.opts.Auth
	return a == nil || a.MayUseGroups(c.user)
}

func (c *conn) whoForGroups() string {
	if c.user == "" {
		return "authenticate first: auth <user> <secret> <opaque>"
	}
	return "user " + c.user + " may use no consumer group"
}

// mayPut reports whether the connection's identity may put to some topic
// (always true without [security]).
func (c *conn) mayPut() bool {
	a := c.srv.opts.Auth
	return a == nil || a.MayPublish(c.user)
}

func (c *conn) whoForPut() string {
	if c.user == "" {
		return "authenticate first: auth <user> <secret> <opaque>"
	}
	return "user " + c.user + " has no publish rights"
}

// putExpired reports whether a put's data stopped arriving (after a read
// deadline fired).
func (c *conn) putExpired() bool {
	t := c.srv.opts.PutDataTimeout
	return c.put.active && t > 0 && !time.Now().Before(c.put.start.Add(t))
}

// cutExpiredPut answers a put whose data did not arrive in time; the
// connection closes after it.
func (c *conn) cutExpiredPut() {
	c.srv.putBudget.timeouts.Add(1)
	pd := c.put.last
	c.closeReason(protocol.StatusBadRequest, pd.Opaque, "put data incomplete: "+strconv.Itoa(pd.Received)+" of "+strconv.Itoa(pd.Len)+
		" bytes arrived within putDataTimeoutMs="+strconv.FormatInt(c.srv.opts.PutDataTimeout.Milliseconds(), 10)+"; closing the connection")
}

// closeReason queues a last reply before the reader stops and logs why.
func (c *conn) closeReason(code int, opaque int32, msg string) {
	c.log.Info("closing connection", "reason", msg)
	c.rq.addResultString(code, msg, opaque)
	c.publish()
}

// releasePut returns the reservation of the connection's partial put.
func (c *conn) releasePut() {
	if c.put.held > 0 {
		c.srv.putBudget.release(c.put.held)
		c.put.held = 0
	}
}

// endPartialPut runs when the reader stops: the reservation goes back and
// the parser drops its data buffer.
func (c *conn) endPartialPut() {
	c.parser.Reset()
	c.put.active = false
	c.releasePut()
}

// appendStats adds the budget's `stats` lines (metaq additions).
func (b *putBudget) appendStats(dst []byte) []byte {
	used, waiting := b.snapshot()
	dst = protocol.AppendStatInt(dst, "put_buffer_limit", b.limit)
	dst = protocol.AppendStatInt(dst, "put_buffer_bytes", used)
	dst = protocol.AppendStatInt(dst, "put_buffer_waiting", int64(waiting))
	dst = protocol.AppendStatInt(dst, "put_buffer_waits", b.waits.Load())
	dst = protocol.AppendStatInt(dst, "put_buffer_refused", b.refused.Load())
	dst = protocol.AppendStatInt(dst, "put_data_timeouts", b.timeouts.Load())
	dst = protocol.AppendStatInt(dst, "put_memory_returns", b.returns.Load())
	return dst
}
