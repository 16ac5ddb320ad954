package broker

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
)

// A conn is one client connection, served by exactly two goroutines: the
// reader (readLoop: read → parse → handle → queue replies) and the writer
// (writer.loop: take the queue → render → writev). Parked long-poll gets are
// answered by the goroutine that makes their record readable (longpoll.go).
//
// Lock rules (conn.mu):
//   - mu guards out, outBytes, readerDone and closeErr. Functions ending in
//     Locked need it held.
//   - mu is never held across socket I/O, a store call that can block, or a
//     channel send that can block.
//   - drained (a sync.Cond on mu) is broadcast by the writer when outBytes
//     falls below lowWater; the reader waits on it when outBytes exceeds
//     highWater (backpressure instead of unbounded memory).
//   - writing (under mu) says the socket's write side is taken: by the
//     writer goroutine, or by the reader writing its own replies inline
//     (inline.go). Whoever sets it owns conn.w until it clears it, then
//     signals the writer if replies were queued meanwhile.

const (
	minReadBuf = 4 << 10
	maxReadBuf = 256 << 10
	highWater  = 16 << 20 // queued reply bytes before the reader stops reading
	// smallReadsToShrink consecutive small reads halve the read buffer.
	smallReadsToShrink = 64
	lowWater           = 4 << 20
)

var errConnClosed = errors.New("connection closed")

type conn struct {
	srv    *Server
	nc     net.Conn
	id     uint64
	log    *slog.Logger
	parser protocol.Parser

	wake chan struct{} // cap 1: there is something for the writer
	dead chan struct{} // closed once when the connection is torn down
	stop chan struct{} // closed when the reader stops: parked gets answer at once

	mu         sync.Mutex
	drained    sync.Cond
	out        outQueue // replies not yet taken by the writer
	outBytes   int      // bytes queued but not yet written (backpressure)
	readerDone bool     // the reader stopped; the writer closes once the queue is empty
	closeErr   error

	writing   bool     // the write side is taken (guarded by mu; inline.go)
	w         *writer  // the render/write state, owned by whoever set writing
	rq        outQueue // reader-local replies, published after each parsed buffer
	readMs    int64    // unix ms of the last read: the store time of its puts (reader only)
	parked    atomic.Int32
	quit      bool
	filters   map[string]*protocol.TagFilter // tag expression cache (reader only)
	wheres    whereCache                     // filter expression cache (where.go; reader only)
	txs       *tx.Session                    // transactions of this connection (txconn.go; reader only)
	txEnds    txEndBatch                     // txends of this read batch, appended at its end (txconn.go; reader only)
	delayBuf  []byte                         // scratch for delayed puts and retries (reader only)
	batch     batchBufs                      // scratch for mput (batchput.go; reader only)
	pop       popConn                        // broker-managed delivery scratch (popconn.go; reader only)
	lastGroup string                         // the group of the last pop (popconn.go; reader only)
	user      string                         // authenticated user, "" = anonymous (security.go; reader only)
	authBuf   []byte                         // scratch for the unescaped secret (reader only)
	traceMark uint16                         // protocol.SysFlagTraced after `trace on` (traceput.go; reader only)

	pk  parkState  // parked gets (longpoll.go)
	own ownPuts    // this connection's puts, for the gets after them (reader only; ordering.go)
	put partialPut // a put whose data spans reads (reader only; putbudget.go)
	rd  readTimes  // what the read deadline was set for (reader only; readbuf.go)

	putCounts  putCounts     // puts counted but not yet added to the shared counters (putcount.go; reader only)
	topicCache putTopicCache // the last put's topic (putcount.go; reader only)

	closeOnce sync.Once
	wg        sync.WaitGroup // writer + parked gets and pops

	handoff   *ha.LinkRequest // `replicate`: the socket goes to broker/ha after serve (replication.go; reader only)
	handedOff atomic.Bool     // set with handoff: closing the conn leaves the socket open
}

func newConn(srv *Server, nc net.Conn, id uint64) *conn {
	c := &conn{
		srv:  srv,
		nc:   nc,
		id:   id,
		log:  srv.log.With("conn", id, "remote", nc.RemoteAddr().String()),
		wake: make(chan struct{}, 1),
		dead: make(chan struct{}),
		stop: make(chan struct{}),
	}
	c.parser.MaxMessageSize = srv.opts.MaxMessageSize
	// A frame split across reads reuses one data buffer up to the read
	// buffer's bound (readbuf.go gives it back with the read buffer).
	c.parser.RetainData = maxReadBuf
	c.drained.L = &c.mu
	return c
}

// serve runs the connection to its end; it returns when both goroutines are done.
func (c *conn) serve() {
	c.w = &writer{c: c}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.w.loop()
	}()
	c.readLoop()
	c.wg.Wait()
	c.closeTx()
	if c.handoff != nil {
		c.handOff() // replication.go
	}
}

func (c *conn) signalWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// handOffReplies hands the replies of the commands read so far to the writer
// (their records written out first), before the reader waits or parks a
// request that may be answered from another goroutine: such an answer must
// not overtake them (docs/protocol.md, "Ordering on a connection").
func (c *conn) handOffReplies() {
	c.writeOut()
	c.publish()
}

// writeOut makes the records of this batch's async-flush puts durable
// against a broker crash (in the page cache) before they are acknowledged:
// one store.WriteOut per batch of commands read, not per put (two atomic
// loads when nothing is staged, as in sync mode). When that fails their
// replies become failures.
func (c *conn) writeOut() {
	c.endTxBatch() // the batch's txends append first (txconn.go)
	err := c.srv.store.WriteOut()
	if err == nil {
		return
	}
	if n := c.rq.failUnflushedPuts(protocol.StatusInternalServerError, c.srv.putFailedMessage(err)); n > 0 {
		c.srv.stats.putFailed.Add(int64(n))
		c.log.Error("commit log write failed; put not acknowledged", "puts", n, "err", err)
	}
}

// publish hands the reader's replies to the writer.
func (c *conn) publish() {
	c.flushPutCounts() // putcount.go: counted before acknowledged
	if c.txEnds.pending() {
		c.writeOut() // their replies are placeholders until then
	}
	if len(c.rq.replies) == 0 {
		return
	}
	added := c.rq.bytes
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		c.rq.releaseAll()
		return
	}
	if c.inlineLocked() {
		c.writeInline(&c.rq) // unlocks c.mu (inline.go)
		return
	}
	if len(c.out.replies) == 0 {
		c.out, c.rq = c.rq, c.out
	} else {
		c.appendQueueLocked(&c.rq)
	}
	c.outBytes += added
	c.mu.Unlock()
	c.rq.reset()
	c.signalWriter()
}

func (c *conn) appendQueueLocked(src *outQueue) {
	base := len(c.out.arena)
	c.out.arena = append(c.out.arena, src.arena...)
	for _, r := range src.replies {
		if r.kind == replyResult || r.kind == replyRaw || r.kind == replyBatch || r.kind == replyArenaValue {
			r.bodyStart += base
			r.bodyEnd += base
		}
		c.out.replies = append(c.out.replies, r)
	}
	c.out.bytes += src.bytes
}

// enqueue adds a reply from a goroutine other than the reader (parked gets).
func (c *conn) enqueue(add func(q *outQueue)) {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		var q outQueue
		add(&q)
		q.releaseAll()
		return
	}
	before := c.out.bytes
	add(&c.out)
	c.outBytes += c.out.bytes - before
	c.mu.Unlock()
	c.signalWriter()
}

func (c *conn) readLoop() {
	defer c.finishReading()
	if !c.handshake() { // TLS (security.go)
		return
	}
	buf := make([]byte, minReadBuf)
	small := 0 // consecutive reads below an eighth of buf
	idle := c.srv.opts.IdleTimeout
	for {
		c.armReadDeadline(idle, len(buf) > minReadBuf || c.parser.RetainsData() || c.batch.big())
		// Shutdown sets shuttingDown, then the read deadline to now. Checking
		// the flag after re-arming the deadline means either we see it here or
		// Shutdown's deadline lands after ours and wakes the Read below.
		if c.srv.shuttingDown.Load() {
			return
		}
		n, err := c.nc.Read(buf)
		if n > 0 {
			c.readMs = time.Now().UnixMilli()
			perr := c.parser.Parse(buf[:n], c.handle)
			c.handOffReplies()
			if perr == protocol.ErrQuit || c.quit {
				return
			}
			if perr != nil {
				c.fatal(perr)
				return
			}
			if !c.trackPartialPut(n) {
				return
			}
			if !c.waitBackpressure() {
				return
			}
			// Grow at once; shrink only after smallReadsToShrink small reads
			// in a row: a pipelined client's reads alternate between full
			// and small ones, and reallocating (and zeroing) the buffer on
			// each swing cost ~5% of the broker's CPU in async publish.
			switch {
			case n == len(buf) && len(buf) < maxReadBuf:
				buf = make([]byte, 2*len(buf))
				small = 0
			case n < len(buf)/8 && len(buf) > minReadBuf:
				if small++; small >= smallReadsToShrink {
					buf = make([]byte, len(buf)/2)
					small = 0
				}
			default:
				small = 0
			}
		}
		if err != nil {
			if c.srv.shuttingDown.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if c.putExpired() {
					c.cutExpiredPut()
					return
				}
				if c.shrinkDue() {
					buf = make([]byte, minReadBuf) // quiet: give the large read buffer back
					c.parser.ReleaseData()         // and a large data buffer
					c.batch.release()              // and a large mput scratch
					continue
				}
				if c.parked.Load() > 0 || c.queued() {
					continue // a long poll or a slow write is not idleness
				}
				c.log.Info("closing idle connection", "idleTimeout", idle)
				return
			}
			if c.parser.Pending() {
				c.log.Info("client went away in the middle of a request; the partial request was dropped")
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, os.ErrDeadlineExceeded) {
				c.log.Debug("read error", "err", err)
			}
			return
		}
	}
}

func (c *conn) queued() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outBytes > 0
}

// waitBackpressure blocks the reader while too many reply bytes are queued,
// so a client that writes faster than it reads is slowed by TCP instead of
// growing our memory. It returns false when the connection died meanwhile.
func (c *conn) waitBackpressure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.outBytes > highWater && c.closeErr == nil {
		c.drained.Wait()
	}
	return c.closeErr == nil
}

// fatal answers a framing error and ends the connection.
func (c *conn) fatal(err error) {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		c.log.Warn("protocol error, closing connection", "err", pe.Msg)
		c.rq.addResultString(pe.Code, pe.Msg, pe.Opaque)
		c.publish()
		return
	}
	c.log.Warn("protocol error, closing connection", "err", err)
}

// finishReading runs when the reader stops for any reason: parked gets are
// answered at once, the writer writes what is queued and then closes.
func (c *conn) finishReading() {
	c.endPartialPut()
	c.mu.Lock()
	c.readerDone = true
	c.mu.Unlock()
	close(c.stop)
	c.stopParked() // longpoll.go
	c.signalWriter()
	// Bound the time the writer may spend on a client that no longer reads.
	t := time.AfterFunc(c.srv.closeGrace(), func() { c.closeWithError(errConnClosed) })
	<-c.dead
	t.Stop()
}

// closeWithError tears the connection down (idempotent).
func (c *conn) closeWithError(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closeErr = err
		c.drained.Broadcast()
		c.mu.Unlock()
		close(c.dead)
		if !c.handedOff.Load() {
			_ = c.nc.Close()
		}
		if err != nil && err != errConnClosed {
			c.log.Info("connection closed", "err", err)
		}
	})
}

// drainQueue releases everything still queued after the connection died.
func (c *conn) drainQueue(q *outQueue) {
	q.releaseAll()
	c.mu.Lock()
	c.out.releaseAll()
	c.outBytes = 0
	c.mu.Unlock()
}

// idleAfterReader reports whether nothing more can be queued: the reader is
// done, no parked get is outstanding and the queue is empty. Parked gets
// queue their reply before they decrement parked, so checking parked first
// and the queue second cannot miss a reply.
func (c *conn) idleAfterReader() bool {
	if c.parked.Load() != 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out.replies) == 0
}
