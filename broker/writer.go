package broker

import (
	"errors"
	"net"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// The writer goroutine owns the socket's write side. It takes the whole
// pending queue at once (under conn.mu), renders it without any lock into one
// header buffer plus the mapped record slices of `value` replies, and writes
// everything with writev (net.Buffers), so many replies cost one syscall and
// record bytes go from the page cache to the socket without a heap copy.

var errSlowConsumer = errors.New("slow consumer: write timed out")

// segment is a run of bytes to write: either buf[start:end] of the writer's
// render buffer, or ext (a mapped record slice).
type segment struct {
	start, end int
	ext        []byte
}

type writer struct {
	c       *conn
	buf     []byte
	segs    []segment
	iov     net.Buffers
	pending []int  // indexes of replies whose read results are rendered but not yet written
	tlsBuf  []byte // TLS connections: small segments gathered into one record (security.go)
}

func (w *writer) loop() {
	c := w.c
	var q outQueue
	for {
		select {
		case <-c.wake:
		case <-c.dead:
			c.drainQueue(&q)
			return
		}
		c.mu.Lock()
		if c.writing { // the reader writes inline and signals again when done
			c.mu.Unlock()
			continue
		}
		c.out, q = q, c.out
		done := c.readerDone
		c.writing = len(q.replies) > 0
		c.mu.Unlock()
		if len(q.replies) == 0 {
			if done && c.idleAfterReader() {
				c.closeWithError(nil)
				return
			}
			continue
		}
		err := w.writeQueue(&q)
		c.mu.Lock()
		c.writing = false
		c.outBytes -= q.bytes
		if c.outBytes < lowWater {
			c.drained.Broadcast()
		}
		c.mu.Unlock()
		q.releaseAll()
		if err != nil {
			c.closeWithError(err)
			c.drainQueue(&q)
			return
		}
		if done && c.idleAfterReader() {
			c.closeWithError(nil)
			return
		}
	}
}

// writeQueue renders and writes every reply of q in order. A put reply that
// waits for a group commit first writes what is rendered before it, then
// waits, so one slow fsync never holds back earlier replies.
func (w *writer) writeQueue(q *outQueue) error {
	w.buf = w.buf[:0]
	w.segs = w.segs[:0]
	for i := range q.replies {
		r := &q.replies[i]
		if r.flush != nil { // a put or a transaction outcome: durable first
			select {
			case <-r.flush.Done():
			default:
				if err := w.flush(q); err != nil {
					return err
				}
				select {
				case <-r.flush.Done():
				case <-w.c.dead:
					return errConnClosed
				}
			}
			if err := r.flush.Err(); err != nil {
				w.c.srv.stats.putFailed.Add(1)
				w.appendResult(replyFlushCode(err), w.c.srv.putFailedMessage(err), r.opaque) // 503: not replicated (replication.go)
				continue
			}
		}
		switch r.kind {
		case replyPut:
			w.appendPutResult(r)
			w.c.srv.observePut(r.t0)
		case replyResult:
			w.appendResultBytes(r.code, q.arena[r.bodyStart:r.bodyEnd], r.opaque)
		case replyBatch:
			w.appendResultBytes(r.code, q.arena[r.bodyStart:r.bodyEnd], r.opaque)
			w.c.srv.observePut(r.t0)
		case replyArenaValue:
			start := len(w.buf)
			w.buf = protocol.AppendValueHeader(w.buf, r.bodyEnd-r.bodyStart, r.opaque)
			w.buf = append(w.buf, q.arena[r.bodyStart:r.bodyEnd]...)
			w.addBuf(start)
		case replyRaw:
			start := len(w.buf)
			w.buf = append(w.buf, q.arena[r.bodyStart:r.bodyEnd]...)
			w.addBuf(start)
		case replyValue:
			start := len(w.buf)
			w.buf = protocol.AppendValueHeader(w.buf, r.res.Bytes, r.opaque)
			w.addBuf(start)
			for _, b := range r.res.Bufs {
				w.segs = append(w.segs, segment{ext: b})
			}
			w.pending = append(w.pending, i)
		}
	}
	return w.flush(q)
}

func (w *writer) addBuf(start int) {
	if n := len(w.segs); n > 0 && w.segs[n-1].ext == nil && w.segs[n-1].end == start {
		w.segs[n-1].end = len(w.buf)
		return
	}
	w.segs = append(w.segs, segment{start: start, end: len(w.buf)})
}

func (w *writer) appendResult(code int, body string, opaque int32) {
	start := len(w.buf)
	w.buf = protocol.AppendResultString(w.buf, code, body, opaque)
	w.addBuf(start)
}

func (w *writer) appendResultBytes(code int, body []byte, opaque int32) {
	start := len(w.buf)
	w.buf = protocol.AppendResult(w.buf, code, body, opaque)
	w.addBuf(start)
}

// appendPutResult renders MetaQ's put reply: result 200 <len> <opaque>\r\n<msgId> <partition> <offset>.
func (w *writer) appendPutResult(r *reply) {
	start := len(w.buf)
	w.buf = protocol.AppendPutResult(w.buf, r.msgID, r.partition, r.offset, r.opaque)
	w.addBuf(start)
}

// flush writes every rendered segment and releases the read results they
// referenced.
func (w *writer) flush(q *outQueue) error {
	if len(w.segs) == 0 {
		return nil
	}
	w.iov = w.iov[:0]
	for _, s := range w.segs {
		if s.ext != nil {
			w.iov = append(w.iov, s.ext)
		} else {
			w.iov = append(w.iov, w.buf[s.start:s.end])
		}
	}
	c := w.c
	if c.srv.opts.WriteTimeout > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
	}
	iov := w.iov // WriteTo consumes the slice header; keep ours for reuse
	err := w.write(iov)
	for i := range w.iov {
		w.iov[i] = nil
	}
	w.segs = w.segs[:0]
	w.buf = w.buf[:0]
	for _, i := range w.pending {
		if r := q.replies[i].res; r != nil {
			r.Release()
			q.replies[i].res = nil
		}
	}
	w.pending = w.pending[:0]
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errSlowConsumer
		}
		return err
	}
	return nil
}
