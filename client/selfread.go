package client

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// A lone synchronous call reads its own reply.
//
// Replies are normally read by the connection's reader goroutine, which
// completes each call: for a caller that waits (Send, a get, an admin
// request) that is a goroutine hand-off per request — the netpoller wakes
// the reader, the reader wakes the caller — and, on an otherwise idle
// machine, a futex wake of a second OS thread on the reply's path. When a
// waiting call is the only one in flight, nothing is gained by the
// hand-off, so the caller reads the socket itself (as Redis's rueidis
// client does for a lone command):
//
//   - the read side of a generation has one owner at a time (readState,
//     guarded by brokerConn.mu): the reader goroutine (readActive), nobody
//     (readIdle: the reader goroutine waits on rkick, not on the socket), or
//     one waiting caller (readCaller);
//   - the reader goroutine goes idle only when nothing is in flight and the
//     connection's last request was a synchronous one (a connection used
//     for SendAsync keeps its reader on the socket, so a lone async send is
//     never delayed by waking it);
//   - a synchronous call registered while the reader is idle and nothing
//     else is in flight takes the read side (claim); any other registration
//     while it is idle hands it back to the reader goroutine (kick);
//   - the caller reads replies with the same code as the reader goroutine,
//     completing whatever call each belongs to (calls registered meanwhile
//     included), until its own arrives; it then gives the read side back:
//     to nobody when nothing is in flight, else to the reader goroutine;
//   - a caller whose call timed out (the ticker's sweep) or whose context
//     ended is interrupted with a read deadline in the past. It stops only
//     between two replies (sockReader.edge): a deadline that fires in the
//     middle of a reply is cleared and the reply read to its end, so the
//     stream is never cut; the caller then hands the read side on and waits
//     as any other caller;
//   - a connection failure closes the socket, which ends the caller's read;
//     fail completes every call, the caller's included.
//
// Not used for TLS connections, traced producers (their reader stamps
// replies) and transaction producers (the broker writes `check` requests
// that must be read while nothing is in flight).

type readOwner uint8

const (
	readActive readOwner = iota // the reader goroutine reads
	readIdle                    // nobody reads; the reader goroutine waits on rkick
	readCaller                  // a waiting caller reads (rcall)
)

// selfReadEnabled switches lone synchronous calls reading their own reply
// on (tests compare both paths).
var selfReadEnabled = true

// errInterrupted ends a caller's read between two replies (interrupt).
var errInterrupted = errors.New("metaq client: read handed back")

// readSide is a generation's read state: the reply reader and who reads it.
type readSide struct {
	rr    *protocol.ReplyReader
	sr    sockReader
	taken *call // a get whose value block is being read into its own buffer (takeValue)
	into  func(rep protocol.Reply, n int) []byte

	// The reader goroutine's batch of replies (readBatch).
	reps  [readBatchMax]protocol.Reply
	calls [readBatchMax]*call

	lazy  bool      // callers may read their own replies on this generation
	owner readOwner // guarded by brokerConn.mu
	rcall *call     // the call whose caller reads (readCaller)
	rkick chan struct{}
}

// sockReader is what the reply reader reads from: the socket, with a read
// deadline that only interrupt sets.
type sockReader struct {
	c    *brokerConn
	g    *generation
	edge bool // the next Read starts a reply: stopping there cuts nothing
}

func (s *sockReader) Read(p []byte) (int, error) {
	for {
		n, err := s.g.nc.Read(p)
		if n > 0 || err == nil {
			s.edge = false
			return n, err
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || !s.g.rint.Load() {
			return n, err
		}
		if s.edge {
			return 0, errInterrupted
		}
		// In the middle of a reply: read it to its end first.
		s.c.mu.Lock()
		_ = s.g.nc.SetReadDeadline(time.Time{})
		s.c.mu.Unlock()
	}
}

func newReadSide(c *brokerConn, g *generation) *readSide {
	rs := &readSide{rkick: make(chan struct{}, 1)}
	rs.sr = sockReader{c: c, g: g}
	rs.lazy = selfReadEnabled && g.raw != nil && c.tl == nil && c.cfg.onCheck == nil
	rs.into = func(rep protocol.Reply, n int) []byte {
		if rep.Kind != protocol.ReplyValue {
			return nil
		}
		c.mu.Lock()
		rs.taken = c.pending.take(rep.Opaque)
		c.mu.Unlock()
		return rs.taken.valueBuffer(n)
	}
	return rs
}

// onRegisterLocked runs when cl was registered on g (c.mu held): it claims
// the read side for cl's caller or wakes the reader goroutine.
func (c *brokerConn) onRegisterLocked(g *generation, cl *call) {
	rs := g.rs
	waits := cl.onDone == nil && !cl.free && cl.kind != kindHeartbeat
	if cl.kind != kindHeartbeat && !cl.free {
		c.syncMode = waits
	}
	if rs.owner != readIdle {
		return
	}
	if waits && c.pending.len() == 1 {
		rs.owner, rs.rcall, cl.selfg = readCaller, cl, g
		return
	}
	rs.owner = readActive
	kick(rs.rkick)
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// parkReader is the reader goroutine's wait for the read side: it goes
// idle when nothing is in flight on a synchronous connection, and waits
// while it is idle or a caller reads. False when g died.
func (c *brokerConn) parkReader(g *generation) bool {
	rs := g.rs
	for {
		c.mu.Lock()
		if rs.owner == readActive && c.pending.len() == 0 && c.syncMode && !g.failed {
			rs.owner = readIdle
		}
		own := rs.owner == readActive
		c.mu.Unlock()
		if own {
			return true
		}
		select {
		case <-rs.rkick:
		case <-g.dead:
			return false
		}
	}
}

// handBackLocked gives the read side up after a caller read (c.mu held):
// to the reader goroutine when calls are in flight, else to nobody.
func (c *brokerConn) handBackLocked(g *generation) {
	rs := g.rs
	if g.rint.Load() {
		_ = g.nc.SetReadDeadline(time.Time{})
		g.rint.Store(false)
	}
	rs.rcall = nil
	if c.pending.len() > 0 || g.failed {
		rs.owner = readActive
		kick(rs.rkick)
		return
	}
	rs.owner = readIdle
}

// interruptLocked makes the caller reading for cl stop at the next reply
// boundary (c.mu held).
func (c *brokerConn) interruptLocked(g *generation, cl *call) {
	rs := g.rs
	if rs.owner != readCaller || rs.rcall != cl || g.failed || g.rint.Load() {
		return
	}
	g.rint.Store(true)
	_ = g.nc.SetReadDeadline(time.Unix(1, 0))
}

// selfWait is wait for a caller that claimed the read side (register): it
// reads replies until its own, then waits as usual if it was interrupted.
func (c *brokerConn) selfWait(ctx context.Context, cl *call, g *generation) error {
	if ctx.Done() != nil {
		op := cl.opaque
		cl.interrupter.Add(1)
		stop := context.AfterFunc(ctx, func() {
			defer cl.interrupter.Done()
			c.mu.Lock()
			if cl.opaque == op {
				c.interruptLocked(g, cl)
			}
			c.mu.Unlock()
		})
		// stop does not wait for a callback that has started: wait for it
		// here, or it could still read cl after the caller reused it.
		defer func() {
			if stop() {
				cl.interrupter.Done() // it will never run
			}
			cl.interrupter.Wait()
		}()
	}
	rs := g.rs
	for {
		if g.rint.Load() && rs.rr.Buffered() == 0 {
			c.mu.Lock()
			c.handBackLocked(g)
			c.mu.Unlock()
			break
		}
		done, err := c.readReply(g)
		if err != nil {
			c.mu.Lock()
			if err == errInterrupted || g.failed {
				c.handBackLocked(g)
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
			c.readFailed(g, err)
			break
		}
		if done == cl {
			c.mu.Lock()
			c.handBackLocked(g)
			c.mu.Unlock()
			break
		}
	}
	return c.wait(ctx, cl)
}

// readReply reads one reply from g and completes its call (the reader
// goroutine, or a caller that owns the read side); it returns that call
// (nil for a late reply or a check).
func (c *brokerConn) readReply(g *generation) (*call, error) {
	rs := g.rs
	rs.taken = nil
	rs.sr.edge = rs.rr.Buffered() == 0
	rep, err := rs.rr.NextInto(rs.into)
	if err != nil {
		return nil, err
	}
	c.activity.Store(true)
	if rep.Kind == protocol.ReplyCheck { // a request from the broker, not a reply
		c.handleCheck(rep.Body)
		return nil, nil
	}
	cl := rs.taken
	if rep.Kind != protocol.ReplyValue {
		c.mu.Lock()
		cl = c.pending.take(rep.Opaque)
		c.mu.Unlock()
	}
	if cl == nil {
		return nil, nil // timed out or abandoned: a late reply
	}
	c.releaseFor(cl)
	cl.setReply(c.addr, &rep)
	if st := g.stamp; st != nil {
		cl.stamp = st.at
		if cl.onDone != nil {
			cl.by = c // completed right here, on this goroutine
		}
	}
	cl.finish()
	return cl, nil
}

// readBatchMax bounds the replies readBatch completes in one go.
const readBatchMax = 128

// readBatch completes the replies whole in g's read buffer that
// NextBuffered takes — a pipelined producer's put results, hundreds per
// read — in one go (the reader goroutine): their calls leave the pending
// table under one lock and give their window slots back with one release,
// where readReply takes the lock and releases a slot per reply. False when
// the buffer does not start with such a reply (readReply then reads).
func (c *brokerConn) readBatch(g *generation) bool {
	rs := g.rs
	reps := rs.rr.NextBuffered(rs.reps[:0])
	if len(reps) == 0 {
		return false
	}
	c.activity.Store(true)
	calls := rs.calls[:len(reps)]
	c.mu.Lock()
	for i := range reps {
		calls[i] = c.pending.take(reps[i].Opaque)
	}
	c.mu.Unlock()
	slots := 0
	for _, cl := range calls {
		if cl != nil && !cl.free {
			slots++
		}
	}
	if slots > 0 {
		c.window.release(slots)
	}
	for i, cl := range calls {
		if cl == nil {
			continue // timed out or abandoned: a late reply
		}
		calls[i] = nil
		cl.setReply(c.addr, &reps[i])
		if st := g.stamp; st != nil {
			cl.stamp = st.at
		}
		if cl.onDone != nil {
			cl.by = c // completed right here, on this goroutine
		}
		cl.finish()
	}
	return true
}

// readFailed ends g after a read error (the call whose value block was
// being read is failed here: it left the pending table already).
func (c *brokerConn) readFailed(g *generation, err error) {
	if cl := g.rs.taken; cl != nil {
		g.rs.taken = nil
		c.releaseFor(cl)
		cl.err = &ConnError{Addr: c.addr, Err: err}
		cl.finish()
	}
	g.fail(err)
}
