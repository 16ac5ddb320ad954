package broker

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
)

// Transactions on a connection (docs/transactions.md): the `transaction`
// command, puts with a txKey, half messages, txend, producer, and the
// broker's `check` requests, which the writer sends like a reply.

// openTx opens the transaction table (rebuilt from the commit log).
func (s *Server) openTx() error {
	cfg := s.opts.Tx
	cfg.Store, cfg.BrokerID = s.store, s.opts.BrokerID
	cfg.CallerWritesOut = true // conn.writeOut, once per batch of commands read
	// The trace events of traced half messages (tracetxpop.go).
	cfg.OnEvent = s.txTraceHook()
	if d := s.opts.Delay; d != nil && cfg.Schedule == nil {
		cfg.Schedule = func(m *store.Message) (store.Message, bool, error) {
			plan, ok, err := d.PlanFor(m.Properties, time.Now().UnixMilli())
			if err != nil || !ok {
				return store.Message{}, false, err
			}
			out, _ := delay.ScheduleMessage(m, plan, nil)
			return out, true, nil
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	m, err := tx.Open(cfg)
	if err != nil {
		return errors.New("broker: recovering transactions: " + err.Error())
	}
	s.tx = m
	return nil
}

// TxStats returns the transaction counters.
func (s *Server) TxStats() tx.Stats { return s.tx.Stats() }

// Tx is the broker's transaction table.
func (s *Server) Tx() *tx.Manager { return s.tx }

// checkOpaque numbers the broker's check requests (clients ignore it: they
// answer with a txend of their own).
var checkOpaque atomic.Int32

// isSystemTopic reports whether a topic is one of the broker's own (`%…%`):
// clients may read them, never put to them.
func isSystemTopic(name string) bool { return len(name) > 1 && name[0] == '%' }

func (c *conn) session() *tx.Session {
	if c.txs == nil {
		c.txs = c.srv.tx.NewSession(c)
	}
	return c.txs
}

// closeTx rolls back the connection's local transactions and removes it from
// its producer groups.
func (c *conn) closeTx() {
	if c.txs != nil {
		c.txs.Close()
	}
}

// SendCheck queues the broker's `check <msgId> <opaque>` request on this
// connection (tx.Prober). It never blocks; a dead connection refuses.
func (c *conn) SendCheck(msgID int64) bool {
	select {
	case <-c.dead:
		return false
	case <-c.stop:
		return false
	default:
	}
	ok := false
	c.enqueue(func(q *outQueue) {
		start := len(q.arena)
		q.arena = protocol.AppendCheck(q.arena, msgID, checkOpaque.Add(1)&0x7fffffff)
		q.replies = append(q.replies, reply{kind: replyRaw, bodyStart: start, bodyEnd: len(q.arena)})
		q.bytes += len(q.arena) - start
		ok = true
	})
	return ok
}

// txReply queues the reply of a transaction command or txend.
func (c *conn) txReply(res tx.Result, err error, opaque int32) {
	var xe *tx.XAError
	var br *tx.BadRequest
	switch {
	case err == nil:
		if res.NoReply {
			return
		}
		r := resultReply(&c.rq, protocol.StatusSuccess, res.Body, opaque)
		r.flush = res.Flush
		r.needsWriteOut = res.Appended
		c.rq.replies = append(c.rq.replies, r)
		c.rq.bytes += replyHeaderEstimate
	case errors.As(err, &xe):
		c.rq.addResultString(protocol.StatusInternalServerError, xe.Error(), opaque)
	case errors.As(err, &br):
		c.rq.addResultString(protocol.StatusBadRequest, br.Msg, opaque)
	case errors.Is(err, tx.ErrNotFound):
		c.rq.addResultString(protocol.StatusNotFound, err.Error(), opaque)
	case errors.Is(err, tx.ErrBusy), errors.Is(err, tx.ErrClosed), errors.Is(err, store.ErrClosed):
		c.rq.addResultString(protocol.StatusServiceUnavailable, err.Error(), opaque)
	default:
		c.rq.addResultString(protocol.StatusInternalServerError, err.Error(), opaque)
	}
}

// handleTransaction: transaction <txKey> <sessionId> <type> [<timeoutS>] [<uq>] <opaque>.
func (c *conn) handleTransaction(cmd *protocol.Command) {
	a := cmd.Args // txKey, sessionId, type, [timeout], [uq], opaque
	var timeout int
	var uq string
	switch len(a) {
	case 5:
		if isDigits(a[3]) {
			timeout, _ = strconv.Atoi(string(a[3]))
		} else {
			uq = string(a[3])
		}
	case 6:
		if !isDigits(a[3]) {
			c.rq.addResultString(protocol.StatusBadRequest, "invalid transaction timeout "+strconv.Quote(string(a[3])), cmd.Opaque)
			return
		}
		timeout, _ = strconv.Atoi(string(a[3]))
		uq = string(a[4])
	}
	key, typ := string(a[0]), string(a[2])
	if r := c.xaDenied(a[0], typ); r != "" { // txowner.go
		c.rq.addResultString(protocol.StatusForbidden, r, cmd.Opaque)
		return
	}
	res, err := c.srv.tx.CommandAs(c.session(), c.xaUser(), key, typ, timeout, uq)
	c.txReply(res, err, cmd.Opaque)
}

func isDigits(b []byte) bool {
	if len(b) == 0 || len(b) > 9 {
		return false
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}

// txPut is a put with a txKey (held until the transaction commits), or a put
// to a system topic (refused).
func (c *conn) txPut(ts *topicState, cmd *protocol.Command) {
	s := c.srv
	if isSystemTopic(ts.name) {
		c.failPut(ts, protocol.StatusForbidden, s.putError(cmd.Topic, cmd.Partition, "system topics do not accept puts"), cmd.Opaque)
		return
	}
	if cmd.Partition == -1 {
		c.failPut(ts, protocol.StatusInternalServerError, "Invalid partition for transaction command:-1", cmd.Opaque)
		return
	}
	if cmd.Partition < 0 || int(cmd.Partition) >= ts.settings.NumPartitions {
		c.failPut(ts, protocol.StatusInternalServerError,
			s.putError(cmd.Topic, cmd.Partition, "wrong partition "+strconv.Itoa(int(cmd.Partition))), cmd.Opaque)
		return
	}
	props, data, flag, err := protocol.SplitProperties(cmd.Flag, cmd.Data)
	if err != nil {
		c.failPut(ts, protocol.StatusBadRequest, err.Error(), cmd.Opaque)
		return
	}
	msg := store.Message{Topic: ts.name, Partition: cmd.Partition, Flag: flag, Properties: props, Data: data, SysFlag: c.traceMark}
	if r := c.xaDenied(cmd.TxKey, ""); r != "" { // txowner.go
		c.failPut(ts, protocol.StatusForbidden, r, cmd.Opaque)
		return
	}
	if !c.delayPropsOK(ts, &msg, cmd.Opaque) {
		return
	}
	id, err := s.tx.Put(c.session(), cmd.TxKey, &msg)
	if err != nil {
		var br *tx.BadRequest
		code := protocol.StatusInternalServerError
		switch {
		case errors.As(err, &br):
			code = protocol.StatusBadRequest
		case errors.Is(err, tx.ErrBusy):
			code = protocol.StatusServiceUnavailable
		}
		c.failPut(ts, code, err.Error(), cmd.Opaque)
		return
	}
	ts.putBytes.Add(int64(len(data)))
	c.rq.addPut(nil, id, cmd.Partition, -1, cmd.Opaque)
}

// delayPropsOK refuses (400) a transactional put whose delay properties
// the delay service could not honour at commit.
func (c *conn) delayPropsOK(ts *topicState, msg *store.Message, opaque int32) bool {
	d := c.srv.opts.Delay
	if d == nil || !tx.MayDelay(msg.Properties) {
		return true
	}
	if _, _, err := d.PlanFor(msg.Properties, time.Now().UnixMilli()); err != nil {
		c.failPut(ts, protocol.StatusBadRequest, c.srv.putError([]byte(ts.name), msg.Partition, err.Error()), opaque)
		return false
	}
	return true
}

// halfPut stores a put with `tx=half&pgroup=<G>` as a half message (rawGrp:
// the property's raw value).
func (c *conn) halfPut(ts *topicState, rawGrp []byte, msg *store.Message, opaque int32) {
	s := c.srv
	sess := c.session()
	grp := sess.GroupName(rawGrp)
	if grp == "" || !protocol.ValidName(grp) {
		c.failPut(ts, protocol.StatusBadRequest, "a half message (tx=half) needs pgroup=<producer group>, a valid group name", opaque)
		return
	}
	// The put makes the connection a producer of grp (the target of its
	// checks), as `producer <grp>` does: it needs the same right.
	if r := c.denied(protocol.OpPut, auth.OpGroup, nil, []byte(grp)); r != "" {
		c.failPut(ts, protocol.StatusForbidden, r, opaque)
		return
	}
	if !c.delayPropsOK(ts, msg, opaque) {
		return
	}
	res, flush, err := s.tx.PutHalf(sess, grp, msg)
	if err != nil {
		code := protocol.StatusInternalServerError
		var br *tx.BadRequest
		if errors.Is(err, tx.ErrBusy) || errors.Is(err, store.ErrClosed) {
			code = protocol.StatusServiceUnavailable
		} else if errors.Is(err, store.ErrMessageTooLarge) || errors.As(err, &br) {
			code = protocol.StatusBadRequest
		}
		c.failPut(ts, code, s.putError([]byte(ts.name), msg.Partition, err.Error()), opaque)
		return
	}
	ts.putBytes.Add(int64(len(msg.Data)))
	c.rq.addPut(flush, res.MsgID, msg.Partition, -1, opaque)
}

// handleTxEnd: txend <msgId> commit|rollback|unknown <opaque>. A commit or
// rollback is not appended at once: the txends of one read batch are
// appended together when the batch ends (endTxBatch, from writeOut), as one
// run with one op record (broker/tx, end.go). The reply is reserved now, in
// its place among the batch's replies, and filled in then.
func (c *conn) handleTxEnd(cmd *protocol.Command) {
	a, _ := tx.ParseAction(cmd.Key)
	if code, msg := c.txEndDenied(cmd.MsgID, a); code != 0 {
		c.rq.addResultString(code, msg, cmd.Opaque) // in its place among the batch's replies
		return
	}
	c.txEnds.reqs = append(c.txEnds.reqs, tx.EndReq{ID: cmd.MsgID, Action: a})
	c.txEnds.replies = append(c.txEnds.replies, len(c.rq.replies))
	c.rq.replies = append(c.rq.replies, reply{kind: replyResult, code: protocol.StatusSuccess, opaque: cmd.Opaque})
	c.rq.bytes += replyHeaderEstimate
}

// The first three properties of a half message's %TX_HALF% record:
// rt=<real topic>&rp=<real partition>&pg=<producer group>
// (docs/transactions.md, "State in the commit log").
const (
	halfPropTopic = "rt"
	halfPropPart  = "rp"
	halfPropGroup = "pg"
)

// txEndDenied checks a txend of a user who is not an admin: the half
// message's record is read from the log by its id, and ending it needs
// the right on its producer group (it is the group's message, as a check
// of it goes to the group's producers), a commit also publish on its real
// topic (docs/security.md). code 0: allowed; 404 when id is no half
// message, 403 with the reason when the user may not end it.
func (c *conn) txEndDenied(id int64, act tx.Action) (code int, msg string) {
	a := c.srv.opts.Auth
	if a == nil || a.Unrestricted(c.user) {
		return 0, ""
	}
	notFound := "no pending half message " + strconv.FormatInt(id, 10) + " (finished already, or unknown)"
	rd, err := c.srv.store.ReadByID(id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return protocol.StatusNotFound, notFound
	case errors.Is(err, store.ErrClosed):
		return protocol.StatusServiceUnavailable, err.Error()
	case err != nil:
		return protocol.StatusInternalServerError, err.Error()
	}
	defer rd.Release()
	if rd.Count == 0 {
		return protocol.StatusNotFound, notFound
	}
	r, _, err := protocol.DecodeRecord(rd.Bufs[0], 0)
	if err != nil {
		return protocol.StatusInternalServerError, err.Error()
	}
	if string(r.Topic) != tx.HalfTopic {
		return protocol.StatusNotFound, notFound
	}
	k1, rt, rest := protocol.NextProperty(r.Properties)
	k2, _, rest := protocol.NextProperty(rest)
	k3, pg, _ := protocol.NextProperty(rest)
	if string(k1) != halfPropTopic || string(k2) != halfPropPart || string(k3) != halfPropGroup {
		return protocol.StatusNotFound, notFound // a prepared XA transaction's message (xid=): no half message
	}
	if r := c.denied(protocol.OpTxEnd, auth.OpGroup, nil, []byte(protocol.Unescape(pg))); r != "" {
		return protocol.StatusForbidden, r
	}
	if act == tx.Commit {
		if r := c.denied(protocol.OpTxEnd, auth.OpPublish, []byte(protocol.Unescape(rt)), nil); r != "" {
			return protocol.StatusForbidden, r
		}
	}
	return 0, ""
}

// txEndBatch is the txends read in the current batch and the indexes of
// their reserved replies in conn.rq.
type txEndBatch struct {
	reqs    []tx.EndReq
	replies []int
}

func (b *txEndBatch) pending() bool { return len(b.reqs) > 0 }

// endTxBatch appends the outcomes of the batch's txends and fills in their
// replies.
func (c *conn) endTxBatch() {
	b := &c.txEnds
	if len(b.reqs) == 0 {
		return
	}
	c.srv.tx.EndBatch(c.session(), b.reqs)
	for i := range b.reqs {
		r := &b.reqs[i]
		rp := &c.rq.replies[b.replies[i]]
		switch {
		case r.Err == nil:
			rp.flush, rp.needsWriteOut = r.Flush, r.Appended
		case errors.Is(r.Err, tx.ErrNotFound):
			*rp = resultReply(&c.rq, protocol.StatusNotFound,
				"no pending half message "+strconv.FormatInt(r.ID, 10)+" (finished already, or unknown)", rp.opaque)
		case errors.Is(r.Err, store.ErrClosed):
			*rp = resultReply(&c.rq, protocol.StatusServiceUnavailable, r.Err.Error(), rp.opaque)
		default:
			*rp = resultReply(&c.rq, protocol.StatusInternalServerError, r.Err.Error(), rp.opaque)
		}
	}
	clear(b.reqs) // drop the flush references
	b.reqs, b.replies = b.reqs[:0], b.replies[:0]
}

// handleProducer: producer <group> <opaque> makes the connection a live
// producer of the group (a target of its half messages' checks).
func (c *conn) handleProducer(cmd *protocol.Command) {
	c.srv.tx.RegisterProducer(c.session(), string(cmd.Group))
	c.rq.addResultString(protocol.StatusSuccess, "", cmd.Opaque)
}

// appendTxStats renders metaq's transaction counters for `stats`.
func appendTxStats(b []byte, st tx.Stats) []byte {
	b = protocol.AppendStatInt(b, "tx_open", int64(st.Open))
	b = protocol.AppendStatInt(b, "tx_prepared", int64(st.Prepared))
	b = protocol.AppendStatInt(b, "tx_held_bytes", st.HeldBytes)
	b = protocol.AppendStatInt(b, "tx_timed_out", st.TimedOut)
	b = protocol.AppendStatInt(b, "tx_half_pending", int64(st.PendingHalf))
	b = protocol.AppendStatInt(b, "tx_checks_sent", st.ChecksSent)
	b = protocol.AppendStatInt(b, "tx_check_rollbacks", st.CheckRollbacks)
	return b
}
