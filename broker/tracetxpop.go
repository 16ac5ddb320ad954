package broker

import (
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/tracelog"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// Trace events of transactions (tx.Config.OnEvent) and of broker-managed
// delivery (pop.Config.OnEvent), docs/trace.md. Both packages tell every
// event; this file picks those of traced messages (the _trace property)
// and writes them through Options.Trace. The packages only know a traced
// message where they hold its properties (a half message stored, a commit,
// a delivery), so this file remembers the ids of traced messages in flight
// between those events and the later ones (checks, answers, acks): a
// bounded set, empty — and every lookup one atomic load — while nothing
// traced is in flight.

// traceState is the Server's memory of traced messages in flight.
type traceState struct {
	halves tracedHalves
	pops   tracedPops
}

// maxTracedHalves bounds the remembered traced half messages (~40 MiB
// when full: halves whose outcome never comes stay until then). Beyond it
// the later events of a new traced half are not written, and not counted
// anywhere: its trace shows the half put and nothing after.
const maxTracedHalves = 1 << 20

type tracedHalves struct {
	n  atomic.Int64
	mu sync.Mutex
	m  map[int64]struct{} // guarded by mu
}

func (h *tracedHalves) add(id int64) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[int64]struct{}{}
	}
	if len(h.m) < maxTracedHalves {
		h.m[id] = struct{}{}
	}
	h.n.Store(int64(len(h.m)))
	h.mu.Unlock()
}

// has reports whether id is a traced half message; done forgets it.
func (h *tracedHalves) has(id int64, done bool) bool {
	if h.n.Load() == 0 {
		return false
	}
	h.mu.Lock()
	_, ok := h.m[id]
	if ok && done {
		delete(h.m, id)
		h.n.Store(int64(len(h.m)))
	}
	h.mu.Unlock()
	return ok
}

// txTraceHook is the transaction table's OnEvent (nil without a trace
// writer).
func (s *Server) txTraceHook() func(*tx.Event) {
	if s.opts.Trace == nil {
		return nil
	}
	return s.traceTxEvent
}

func (s *Server) traceTxEvent(e *tx.Event) {
	h := &s.trace.halves
	ev := trace.Event{MsgID: e.ID, Group: e.Group, OK: true, Broker: s.opts.BrokerID, Partition: -1, Offset: -1}
	checks := strconv.Itoa(e.Checks)
	switch e.Kind {
	case tx.EvHalf:
		if !tracelog.Traced(e.SysFlag, e.Props) {
			return
		}
		h.add(e.ID)
		ev.Type, ev.Topic, ev.Time, ev.Partition = trace.TxHalf, e.Topic, e.Result.StoreTime, int(e.Partition)
		ev.Detail = "half message of producer group " + e.Group + " stored in " + tx.HalfTopic + ": invisible until committed"
	case tx.EvPending:
		if tracelog.Traced(e.SysFlag, e.Props) {
			h.add(e.ID) // pending across a restart: its checks and outcome are still traced
		}
		return
	case tx.EvCheck:
		if !h.has(e.ID, false) {
			return
		}
		ev.Type, ev.Attempt = trace.TxCheck, e.Checks
		ev.Detail = "check " + checks + " sent to a live producer of the group"
		if !e.Sent {
			ev.OK, ev.Err = false, "no live producer of group "+e.Group+" connected"
			ev.Detail = "check " + checks + " not sent"
		}
	case tx.EvEnd:
		if !h.has(e.ID, e.Action != tx.Unknown) {
			return
		}
		ev.Type, ev.Attempt = trace.TxAnswer, e.Checks
		ev.Detail = "txend from the producer: "
		if e.Checks > 0 {
			ev.Detail = "answer to check " + checks + ": "
		}
		switch e.Action {
		case tx.Commit:
			ev.Detail += "commit"
		case tx.Rollback:
			ev.Type = trace.TxRollback
			ev.Detail += "rollback"
		default:
			ev.Detail += "unknown (the half message stays pending)"
		}
		if e.Action == tx.Commit && e.Checks == 0 {
			return // the tx-commit event says it all
		}
	case tx.EvCommit:
		if !tracelog.Traced(e.SysFlag, e.Props) {
			return
		}
		ev.Type, ev.RecordID, ev.Topic, ev.Time = trace.TxCommit, e.Result.MsgID, e.Topic, e.Result.StoreTime
		ev.Partition, ev.Offset = int(e.Partition), e.Result.QueueOffset
		ev.Detail = "committed: appended to " + e.Topic + " as record " + strconv.FormatInt(e.Result.MsgID, 10)
		if e.Topic == scheduleTopic {
			ev.Offset = -1
			ev.Detail = "committed: delayed, stored in " + e.Topic + " as record " + strconv.FormatInt(e.Result.MsgID, 10)
		}
	case tx.EvExpired:
		if !h.has(e.ID, true) {
			return
		}
		ev.Type, ev.Attempt, ev.OK = trace.TxRollback, e.Checks, false
		ev.Err = "no outcome after " + checks + " checks"
		ev.Detail = "rolled back by the broker (transactionCheckMax)"
	case tx.EvTxPut, tx.EvTxPrepared, tx.EvTxCommit, tx.EvTxRollback:
		if !s.traceLocalTx(e, &ev) { // the `transaction` command's
			return
		}
	default:
		return
	}
	if ev.Time == 0 {
		ev.Time = time.Now().UnixMilli()
	}
	s.opts.Trace.Emit(&ev)
}

const scheduleTopic = "%SCHEDULE%"

// --- broker-managed delivery -------------------------------------------------

// popKey names one message of one group's delivery.
type popKey struct {
	group, topic string
	part         int32
	off          int64
}

type popEntry struct {
	id, rid  int64  // traced id, and the record when it is a copy
	last     string // the last event's kind
	attempts int
}

// popGen bounds the remembered traced deliveries: two generations of at
// most popGen entries; an entry untouched for two generations is forgotten
// (its later events are not written).
const popGen = 1 << 15

type tracedPops struct {
	n        atomic.Int64 // entries in cur and old
	mu       sync.Mutex
	cur, old map[popKey]*popEntry // guarded by mu
}

func (t *tracedPops) putLocked(k popKey, e *popEntry) {
	if t.cur == nil {
		t.cur = map[popKey]*popEntry{}
	}
	if len(t.cur) >= popGen {
		t.old, t.cur = t.cur, make(map[popKey]*popEntry, popGen/4)
	}
	t.cur[k] = e
	t.n.Store(int64(len(t.cur) + len(t.old)))
}

// getLocked finds k (moving it to the current generation); del forgets it.
func (t *tracedPops) getLocked(k popKey, del bool) *popEntry {
	e := t.cur[k]
	if e == nil {
		if e = t.old[k]; e == nil {
			return nil
		}
		delete(t.old, k)
		if !del {
			t.putLocked(k, e)
		}
	} else if del {
		delete(t.cur, k)
	}
	t.n.Store(int64(len(t.cur) + len(t.old)))
	return e
}

// popTraceHook is the delivery service's OnEvent (nil without a trace
// writer).
func (s *Server) popTraceHook() func(pop.Event) {
	if s.opts.Trace == nil {
		return nil
	}
	return s.tracePopEvent
}

func (s *Server) tracePopEvent(e pop.Event) {
	t := &s.trace.pops
	k := popKey{group: e.Group, topic: e.Topic, part: e.Partition, off: e.Offset}
	ev := trace.Event{Topic: e.Topic, Group: e.Group, OK: true, Broker: s.opts.BrokerID, Partition: int(e.Partition),
		Offset: e.Offset, Attempt: e.Attempt}
	if e.Kind == "deliver" {
		props := recordProps(e.Record)
		if !tracelog.Traced(recordSysFlag(e.Record), props) {
			return
		}
		id := e.MsgID
		if v, ok := protocol.PropertyRaw(props, "origMsgId"); ok {
			if o, err := strconv.ParseInt(string(v), 10, 64); err == nil && o >= 0 {
				id = o
			}
		}
		t.mu.Lock()
		pe := t.getLocked(k, false)
		prev := ""
		if pe == nil {
			pe = &popEntry{id: id, rid: e.MsgID}
			t.putLocked(k, pe)
		} else {
			prev = pe.last
		}
		pe.last, pe.attempts = "deliver", e.Attempt
		t.mu.Unlock()
		ev.Type, ev.MsgID, ev.RecordID = trace.Push, id, e.MsgID
		switch {
		case e.Attempt <= 1:
			ev.Detail = "delivered to a member of the group (broker-managed)"
		case prev == "release":
			ev.Detail = "delivered again after a release"
		case prev == "deliver":
			ev.Detail = "delivered again: the lock of attempt " + strconv.Itoa(e.Attempt-1) + " ran out"
		default:
			ev.Detail = "delivered again"
		}
	} else {
		if t.n.Load() == 0 {
			return
		}
		switch e.Kind {
		case "ack", "release", "reject", "dead":
		default:
			return // extend: the lock only lasts longer
		}
		t.mu.Lock()
		pe := t.getLocked(k, e.Kind == "ack" || e.Kind == "dead")
		var prev string
		var pv popEntry
		if pe != nil {
			prev, pe.last = pe.last, e.Kind
			pv = *pe
		}
		t.mu.Unlock()
		if pe == nil {
			return
		}
		ev.MsgID, ev.RecordID = pv.id, pv.rid
		switch e.Kind {
		case "ack":
			ev.Type, ev.Detail = trace.PushAck, "acknowledged: done for the group"
		case "release":
			ev.Type, ev.Detail = trace.PushRelease, "released: delivered again later"
		case "reject":
			ev.Type, ev.OK, ev.Err, ev.Detail = trace.PushReject, false, "rejected", "rejected by the member: to the dead-letter queue"
		case "dead":
			ev.Type, ev.Topic, ev.Partition, ev.Offset, ev.Attempt = trace.DeadLetter, "%DLQ%"+e.Group, 0, -1, pv.attempts
			ev.OK, ev.Err = false, "maxDeliveries"
			ev.Detail = "dead-lettered after " + strconv.Itoa(pv.attempts) + " deliveries"
			if prev == "reject" {
				ev.Err, ev.Detail = "rejected", "dead-lettered: rejected"
			}
		}
	}
	if ev.RecordID == ev.MsgID {
		ev.RecordID = 0
	}
	ev.Time = time.Now().UnixMilli()
	s.opts.Trace.Emit(&ev)
}

// recordProps is the properties of a record in the record format
// (docs/storage.md); nil when it does not parse.
func recordProps(rec []byte) []byte {
	p := protocol.OffTopicLen
	if len(rec) <= p {
		return nil
	}
	p += 1 + int(rec[p])
	if len(rec) < p+2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(rec[p:]))
	p += 2
	if len(rec) < p+n {
		return nil
	}
	return rec[p : p+n]
}

// recordSysFlag is the sysFlag of an encoded record (0 when it is too
// short to hold one).
func recordSysFlag(rec []byte) uint16 {
	if len(rec) < protocol.OffSysFlag+2 {
		return 0
	}
	return binary.BigEndian.Uint16(rec[protocol.OffSysFlag:])
}

// traceLocalTx fills ev for an event of a local or XA transaction (the
// `transaction` command): tx-put when a traced put is held, tx-prepare,
// tx-commit (rid: the committed record) and tx-rollback. The events carry
// the provisional id the put was answered with; a prepared transaction
// committed after a restart no longer knows it, and its commit event
// carries the committed record's id.
func (s *Server) traceLocalTx(e *tx.Event, ev *trace.Event) bool {
	if !tracelog.Traced(e.SysFlag, e.Props) {
		return false
	}
	kind := "local transaction "
	if strings.HasPrefix(e.Key, "XID:") {
		kind = "XA transaction "
	}
	ev.Topic, ev.Partition = e.Topic, int(e.Partition)
	if v, ok := protocol.PropertyRaw(e.Props, protocol.PropKeys); ok {
		ev.Keys = protocol.Unescape(v)
	}
	switch e.Kind {
	case tx.EvTxPut:
		ev.Type = trace.TxPut
		ev.Detail = "put in " + kind + e.Key + ": held until it commits"
	case tx.EvTxPrepared:
		ev.Type, ev.RecordID, ev.Time = trace.TxPrepare, e.Result.MsgID, e.Result.StoreTime
		ev.Detail = "prepared: stored in " + tx.HalfTopic + " as record " + strconv.FormatInt(e.Result.MsgID, 10) + " (" + kind + e.Key + ")"
	case tx.EvTxCommit:
		ev.Type, ev.Time, ev.Offset = trace.TxCommit, e.Result.StoreTime, e.Result.QueueOffset
		ev.RecordID = e.Result.MsgID
		if ev.MsgID == 0 {
			ev.MsgID, ev.RecordID = e.Result.MsgID, 0
		}
		how := "committed by "
		if e.TwoPhase {
			how = "committed in two phases by "
		}
		ev.Detail = how + kind + e.Key + ": appended to " + e.Topic + " as record " + strconv.FormatInt(e.Result.MsgID, 10)
		if e.Topic == scheduleTopic {
			ev.Offset = -1
			ev.Detail = how + kind + e.Key + ": delayed, stored in " + e.Topic + " as record " + strconv.FormatInt(e.Result.MsgID, 10)
		}
	default: // EvTxRollback
		ev.Type, ev.OK, ev.Err = trace.TxRollback, false, e.Reason
		ev.Detail = e.Reason + " (" + kind + e.Key + ")"
	}
	return true
}
