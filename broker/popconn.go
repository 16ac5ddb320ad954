package broker

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/protocol"
)

// The text-protocol side of broker-managed delivery (docs/push.md):
//
//	pop <topic> <group> <max> <invisibleMs> <maxWaitMs> <opaque> [<tags> [<where>]]
//	ack|reject <group> <handle>|<len> <opaque>
//	release|extend <group> <ms> <handle>|<len> <opaque>
//
// A pop reply is `value <len> <opaque>\r\n` and a run of deliveries, each a
// 4-byte big-endian attempt and one record; the records are copied into the
// reply arena (one memcpy each), so the store reads are released at once.

// maxHandles bounds the handles of one command.
const maxHandles = 65536

// maxParkedPops bounds the pops parked on one connection. A parked pop is a
// goroutine and a timer; a client library keeps one pop in flight per
// subscription and broker, so only a client pipelining pops reaches it:
// beyond it a pop that finds nothing is answered 503 at once (busy: the
// client backs off) instead of growing the broker with what it sends.
const maxParkedPops = 512

// popConn is a connection's reusable scratch (reader only) and its count
// of parked pops.
type popConn struct {
	batch   pop.Batch
	handles []pop.Handle
	scratch []byte
	parked  atomic.Int32 // pops parked now (parkPop's goroutines)
}

func (c *conn) handlePop(cmd *protocol.Command) {
	s := c.srv
	p := s.pop.Load()
	if p == nil {
		c.rq.addResultString(protocol.StatusServiceUnavailable, "pop is not enabled on this broker", cmd.Opaque)
		return
	}
	ts := s.topics.lookup(cmd.Topic, -1, nil) // a read interns no topic (topics.go)
	if ts == nil || !ts.settings.AcceptSubscribe {
		c.rq.addResultString(protocol.StatusNotFound, "The topic `"+string(cmd.Topic)+"` is not served for subscription here", cmd.Opaque)
		return
	}
	f, bad := c.getFilter(cmd.Tags, cmd.Where)
	if bad != "" {
		c.rq.addResultString(protocol.StatusBadRequest, bad, cmd.Opaque)
		return
	}
	b := &c.pop.batch
	b.MaxBytes = s.opts.MaxTransferSize
	group := c.internGroup(cmd.Group)
	err := p.Poll(group, ts.name, f, int(cmd.Count), time.Duration(cmd.Millis)*time.Millisecond, b)
	if err == nil && len(b.Items) == 0 && cmd.MaxWaitMs > 0 && !s.shuttingDown.Load() {
		if c.pop.parked.Load() >= maxParkedPops {
			b.Release()
			c.rq.addResultString(protocol.StatusServiceUnavailable, "no message to deliver, and "+strconv.Itoa(maxParkedPops)+
				" pops already wait on this connection (the most it parks): wait for their replies", cmd.Opaque)
			return
		}
		waits := append([]<-chan struct{}(nil), b.Waits...)
		b.Release()
		c.parkPop(popReq{group: group, topic: ts.name, filter: f, max: int(cmd.Count),
			invisible: time.Duration(cmd.Millis) * time.Millisecond, opaque: cmd.Opaque}, waits, cmd.MaxWaitMs)
		return
	}
	s.popReply(&c.rq, b, err, cmd.Opaque)
	b.Release()
}

// internGroup returns group as a string, reusing the last one (consumers
// send the same group on every command).
func (c *conn) internGroup(g []byte) string {
	if string(g) != c.lastGroup {
		c.lastGroup = string(g)
	}
	return c.lastGroup
}

// popReply renders a poll's outcome: the deliveries, 404 when there are
// none, or the error.
func (s *Server) popReply(q *outQueue, b *pop.Batch, err error, opaque int32) {
	if err != nil {
		code := protocol.StatusInternalServerError
		switch {
		case errors.Is(err, pop.ErrUnknownTopic):
			code = protocol.StatusNotFound
		case errors.Is(err, pop.ErrBadRequest), errors.Is(err, pop.ErrBadHandle):
			code = protocol.StatusBadRequest
		case errors.Is(err, pop.ErrClosed), errors.Is(err, pop.ErrTooManyGroups):
			code = protocol.StatusServiceUnavailable
		}
		q.addResultString(code, err.Error(), opaque)
		return
	}
	if len(b.Items) == 0 {
		q.addResultString(protocol.StatusNotFound, "no message to deliver", opaque)
		return
	}
	start := len(q.arena)
	for _, it := range b.Items {
		q.arena = binary.BigEndian.AppendUint32(q.arena, uint32(it.Attempt))
		q.arena = append(q.arena, it.Record...)
	}
	q.replies = append(q.replies, reply{kind: replyArenaValue, opaque: opaque, bodyStart: start, bodyEnd: len(q.arena)})
	q.bytes += replyHeaderEstimate + len(q.arena) - start
}

type popReq struct {
	group, topic string
	filter       pop.Filter
	max          int
	invisible    time.Duration
	opaque       int32
}

// parkPop holds a pop that found nothing until a message may have become
// deliverable (a new record on one of the topic's partitions, or a
// redelivery falling due), its wait ends, or the connection stops. Like a
// parked get it is a goroutine blocked in select: no polling.
func (c *conn) parkPop(r popReq, waits []<-chan struct{}, maxWaitMs int64) {
	c.handOffReplies() // a parked pop may be answered at once (a lock ending)
	s := c.srv
	c.parked.Add(1)
	c.pop.parked.Add(1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { c.pop.parked.Add(-1); c.parked.Add(-1); c.signalWriter() }()
		timer := time.NewTimer(time.Duration(maxWaitMs) * time.Millisecond)
		defer timer.Stop()
		var b pop.Batch
		b.MaxBytes = s.opts.MaxTransferSize
		cases := make([]reflect.SelectCase, 0, len(waits)+3)
		for {
			cases = append(cases[:0],
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf((<-chan struct{})(c.stop))},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf((<-chan struct{})(c.dead))})
			for _, w := range waits {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
			}
			i, _, _ := reflect.Select(cases)
			switch i {
			case 0, 1:
				c.enqueue(func(q *outQueue) {
					q.addResultString(protocol.StatusNotFound, "no message to deliver", r.opaque)
				})
				return
			case 2:
				return
			}
			p := s.pop.Load() // nil once the broker was demoted (replication_run.go)
			if p == nil {
				c.enqueue(func(q *outQueue) {
					q.addResultString(protocol.StatusServiceUnavailable, "pop is not enabled on this broker", r.opaque)
				})
				return
			}
			err := p.Poll(r.group, r.topic, r.filter, r.max, r.invisible, &b)
			if err == nil && len(b.Items) == 0 {
				waits = append(waits[:0], b.Waits...)
				b.Release()
				continue
			}
			c.enqueue(func(q *outQueue) { s.popReply(q, &b, err, r.opaque) })
			b.Release()
			return
		}
	}()
}

func (c *conn) handleFinish(cmd *protocol.Command) {
	s := c.srv
	p := s.pop.Load()
	if p == nil {
		c.rq.addResultString(protocol.StatusServiceUnavailable, "pop is not enabled on this broker", cmd.Opaque)
		return
	}
	hs := c.pop.handles[:0]
	add := func(h []byte) bool {
		ph, err := pop.ParseHandle(h)
		if err != nil {
			c.rq.addResultString(protocol.StatusBadRequest, "invalid handle "+strconv.Quote(string(h[:min(len(h), 300)]))+
				": want <topic>:<partition>:<offset>:<attempt>", cmd.Opaque)
			return false
		}
		if len(hs) >= maxHandles {
			c.rq.addResultString(protocol.StatusBadRequest, "more than "+strconv.Itoa(maxHandles)+" handles in one command", cmd.Opaque)
			return false
		}
		hs = append(hs, ph)
		return true
	}
	if len(cmd.Key) > 0 {
		if !add(cmd.Key) {
			return
		}
	} else {
		for rest := cmd.Data; ; {
			h, r, ok := protocol.NextHandle(rest)
			if !ok {
				break
			}
			rest = r
			if !add(h) {
				c.pop.handles = hs[:0]
				return
			}
		}
		if len(hs) == 0 {
			c.rq.addResultString(protocol.StatusBadRequest, "no handle", cmd.Opaque)
			return
		}
	}
	c.pop.handles = hs[:0]
	var op pop.Op
	switch cmd.Op {
	case protocol.OpAck:
		op = pop.OpAck
	case protocol.OpRelease:
		op = pop.OpRelease
	case protocol.OpReject:
		op = pop.OpReject
	default:
		op = pop.OpExtend
	}
	applied, stale, flush, scratch, err := p.Finish(cmd.Group, hs, op, time.Duration(cmd.Millis)*time.Millisecond, c.pop.scratch)
	c.pop.scratch = scratch
	var nb [512]byte
	switch {
	case err != nil:
		code := protocol.StatusInternalServerError
		if errors.Is(err, pop.ErrClosed) {
			code = protocol.StatusServiceUnavailable
		} else {
			c.log.Error(cmd.Op.String()+" failed", "group", string(cmd.Group), "err", err)
		}
		c.rq.addResultString(code, cmd.Op.String()+" failed: "+err.Error(), cmd.Opaque)
		clear(hs)
		return
	case stale > 0:
		c.rq.addResult(protocol.StatusNotFound, appendStale(nb[:0], applied, stale, hs), cmd.Opaque)
	default:
		c.rq.addResult(protocol.StatusSuccess, strconv.AppendInt(nb[:0], int64(applied), 10), cmd.Opaque)
	}
	// An ack or reject applied appended a done record. In async-flush mode
	// (flush nil) it is durable only once the reader's write-out at the end
	// of this batch succeeds; when that fails the reply becomes a 500, as a
	// put's does (failUnflushedPuts), instead of a 200 for an ack that was
	// never written.
	r := &c.rq.replies[len(c.rq.replies)-1]
	r.flush = flush
	r.needsWriteOut = applied > 0 && (op == pop.OpAck || op == pop.OpReject)
	clear(hs)
}

// maxStaleListed bounds the stale handles a 404 names.
const maxStaleListed = 8

// appendStale renders the 404 body of a finish some of whose handles were
// not current: `<applied> of <n> applied; <k> not current …: <handle>…`,
// naming the first maxStaleListed of them.
func appendStale(b []byte, applied, stale int, hs []pop.Handle) []byte {
	b = strconv.AppendInt(b, int64(applied), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(len(hs)), 10)
	b = append(b, " applied; "...)
	b = strconv.AppendInt(b, int64(stale), 10)
	b = append(b, " not current (acknowledged, released, timed out or redelivered):"...)
	listed := 0
	for i := range hs {
		if !hs[i].Stale {
			continue
		}
		if listed == maxStaleListed {
			b = append(b, " …"...)
			break
		}
		h := &hs[i]
		b = pop.AppendHandle(append(b, ' '), h.Topic, h.Partition, h.Offset, h.Attempt)
		listed++
	}
	return b
}
