package client

import (
	"net"
	"syscall"

	"github.com/metaqgo/metaq/internal/sockwrite"
)

// A lone async send writes its own request.
//
// An async request is normally appended to the connection's buffer and the
// writer goroutine is kicked (end): while requests are in flight that
// batches many of them into one write. But a send with nothing else in
// flight has nothing to batch with, and the kick is a goroutine hand-off —
// on an idle machine a futex wake of another OS thread, which must then be
// scheduled before the request leaves (tens of µs on a VM, and up to
// hundreds when the other CPU is busy: `perf sched` of the end-to-end
// workload at 1,000 msg/s, bench/README.md). So when the send is the only
// call in flight and nobody is writing, the caller writes the buffer itself
// with one non-blocking write(2): SendAsync still never waits for the
// socket. What the socket does not take (a broker that stopped reading)
// stays first in the buffer for the writer goroutine, in order, as does
// everything that cannot be written this way (TLS, a busy write side, other
// calls in flight).

// asyncInlineMax bounds the buffer a lone async send writes itself.
const asyncInlineMax = 64 << 10

// rawConn is the generation's socket for non-blocking writes (nil for TLS
// and other non-TCP connections).
func rawConn(nc net.Conn) syscall.RawConn {
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			return rc
		}
	}
	return nil
}

// endAsync is end for an async request (called with c.mu held after begin;
// releases it).
func (c *brokerConn) endAsync() {
	g := c.cur
	if c.writing || g == nil || g.failed || g.raw == nil || c.pending.len() != 1 ||
		len(c.wbuf) == 0 || len(c.wbuf) > asyncInlineMax {
		c.end()
		return
	}
	buf := c.wbuf
	c.wbuf, c.spare = c.spare[:0], nil
	c.writing = true
	c.mu.Unlock()
	n, err := sockwrite.Once(g.raw, buf)
	c.activity.Store(true)
	c.mu.Lock()
	c.writing = false
	if g.failed { // failed meanwhile: its calls and buffer are gone
		c.spare = buf[:0]
		c.mu.Unlock()
		return
	}
	if err != nil {
		c.spare = buf[:0]
		c.mu.Unlock()
		_ = c.fail(g, &ConnError{Addr: c.addr, Err: err})
		return
	}
	kick := len(c.wbuf) > 0
	if n < len(buf) { // the rest goes first, before what others appended meanwhile
		rest := copy(buf, buf[n:])
		buf = append(buf[:rest], c.wbuf...)
		c.wbuf, buf = buf, c.wbuf
		kick = true
	}
	c.spare = buf[:0]
	cur := c.cur
	c.mu.Unlock()
	if kick && cur == g {
		select {
		case g.wkick <- struct{}{}:
		default:
		}
	}
}
