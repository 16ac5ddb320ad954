package broker

import "time"

// The read buffer and the read deadline.
//
// The reader's buffer grows by doubling while reads fill it (up to
// maxReadBuf, 256 KiB) and shrinks when reads are small, as in
// nats-server. A connection that goes quiet right after a burst (a large
// put, a batch) would keep its large buffer for as long as it stays idle:
// 2,000 such connections pin 500 MiB. So when the buffer is larger than
// minReadBuf, the read deadline is brought forward to shrinkAfter; when it
// fires without anything to read, the buffer is replaced by a minReadBuf
// one and the read goes on with the normal deadline. A busy connection
// never sees it fire; an idle one pays one extra wake-up. The parser's data
// buffer (a put or mput split across reads, kept up to maxReadBuf for the
// next one: protocol.Parser.RetainData) is given back at the same time, as
// is a large mput scratch (batchput.go).
//
// The deadline of a Read is the earliest of: idleTimeout, the deadline of a
// put whose data is in progress (putbudget.go) and the shrink time.

const shrinkAfter = time.Second

// readTimes records what the current read deadline stands for.
type readTimes struct {
	idleAt   time.Time // zero: no idle timeout
	shrinkAt time.Time // zero: no shrink pending
	set      bool      // a deadline is set on the socket
}

// armReadDeadline sets the read deadline before a Read (reader only).
func (c *conn) armReadDeadline(idle time.Duration, bigBuf bool) {
	var now, d time.Time
	c.rd.idleAt, c.rd.shrinkAt = time.Time{}, time.Time{}
	if idle > 0 || bigBuf || c.put.active {
		now = time.Now()
	}
	if idle > 0 {
		c.rd.idleAt = now.Add(idle)
		d = c.rd.idleAt
	}
	earlier := func(t time.Time) {
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	if c.put.active && c.srv.opts.PutDataTimeout > 0 {
		earlier(c.put.start.Add(c.srv.opts.PutDataTimeout))
	}
	if bigBuf {
		c.rd.shrinkAt = now.Add(shrinkAfter)
		earlier(c.rd.shrinkAt)
	}
	if d.IsZero() {
		if !c.rd.set {
			return
		}
		c.rd.set = false
	} else {
		c.rd.set = true
	}
	_ = c.nc.SetReadDeadline(d)
}

// shrinkDue reports, after a read deadline fired, whether it was the shrink
// time rather than idleTimeout.
func (c *conn) shrinkDue() bool {
	if c.rd.shrinkAt.IsZero() {
		return false
	}
	now := time.Now()
	return !now.Before(c.rd.shrinkAt) && (c.rd.idleAt.IsZero() || now.Before(c.rd.idleAt))
}
