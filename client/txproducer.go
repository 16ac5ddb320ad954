package client

import (
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/metaqgo/metaq/protocol"
)

// TxState is the outcome of a producer's local transaction.
type TxState int

const (
	// TxUnknown: not decided yet; the broker asks again (Check) later.
	TxUnknown TxState = iota
	// TxCommit makes the message visible to consumers.
	TxCommit
	// TxRollback discards it.
	TxRollback
)

func (s TxState) String() string {
	switch s {
	case TxCommit:
		return "commit"
	case TxRollback:
		return "rollback"
	}
	return "unknown"
}

// TransactionListener ties a message to the producer's local transaction
// (a database row, say).
type TransactionListener interface {
	// ExecuteLocal runs the local transaction after the broker stored the
	// message as a half message (invisible). Its answer is sent to the broker;
	// an error counts as TxUnknown (the broker will Check).
	ExecuteLocal(ctx context.Context, msg *Message) (TxState, error)
	// Check answers the broker's question about a half message whose
	// outcome it never heard (the producer that sent it may have died):
	// look the local transaction up and say whether it committed. msg is
	// the message as sent (topic, partition, tag, keys, own properties and
	// body) with the half message's MsgID and Offset -1. It may be called
	// on any producer of the group, from a goroutine of its own.
	// A Check that panics answers nothing (logged with its stack): the
	// broker asks again one interval later.
	Check(ctx context.Context, msg *Message) TxState
}

// ErrTxNotPending is txend's answer when the broker has no such pending
// half message any more (already finished, or rolled back after too many
// checks).
var ErrTxNotPending = errors.New("metaq client: the half message is not pending on the broker")

// maxConcurrentChecks bounds the Check callbacks running at once; checks
// arriving meanwhile wait for one in a queue of at most maxQueuedChecks half
// messages. Only a check beyond the queue, or one of a message already
// queued or being checked (the broker asked again), is dropped: the broker
// counts every check it sent, answered or not, and rolls the message back
// after transactionCheckMax, so a check dropped because a burst found the
// workers busy — every half message whose outcome was lost comes due at once
// after a crash — would roll back committed local transactions
// (docs/transactions.md).
const (
	maxConcurrentChecks = 16
	maxQueuedChecks     = 1 << 14
)

// checkReq is a check waiting for a worker.
type checkReq struct {
	c  *brokerConn
	id int64
}

// TransactionProducer sends transactional messages with check-back
// (docs/transactions.md): SendInTransaction stores the message as a half
// message, runs ExecuteLocal and sends its outcome; the broker calls back
// (Check) on any live producer of the group when no outcome arrived. Every
// connection of a TransactionProducer announces itself as a producer of its
// group (`producer <group>`), so a producer started after another one died
// receives that one's checks. Safe for concurrent use.
type TransactionProducer struct {
	p     *Producer
	group string
	l     TransactionListener

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed against wg.Add
	closed bool
	wg     sync.WaitGroup // announcements and check workers running

	checkMu  sync.Mutex
	queue    []checkReq     // checks waiting for a worker, in arrival order
	checking map[int64]bool // half messages queued or being checked
	workers  int            // check workers running (at most maxConcurrentChecks)
}

// NewTransactionProducer creates a transaction producer of group (a valid
// group name) with the listener's callbacks.
func NewTransactionProducer(cfg Config, group string, l TransactionListener) (*TransactionProducer, error) {
	if !protocol.ValidName(group) {
		return nil, errors.New("metaq client: invalid producer group " + strconv.Quote(group))
	}
	if l == nil {
		return nil, errors.New("metaq client: a TransactionListener is required")
	}
	tp := &TransactionProducer{group: group, l: l, checking: map[int64]bool{}}
	tp.ctx, tp.cancel = context.WithCancel(context.Background())
	// Held until tp.p is set: connections dialled meanwhile announce
	// themselves from goTracked, which waits for it.
	tp.mu.Lock()
	defer tp.mu.Unlock()
	p, err := newProducer(cfg, func(cc *connConfig) {
		cc.onUp = tp.announce
		cc.onCheck = tp.check
	})
	if err != nil {
		tp.cancel()
		return nil, err
	}
	tp.p = p
	return tp, nil
}

// Producer is the underlying producer (plain sends share its connections).
func (tp *TransactionProducer) Producer() *Producer { return tp.p }

// Close waits for running checks and closes the producer.
func (tp *TransactionProducer) Close() error {
	tp.mu.Lock()
	tp.closed = true
	tp.mu.Unlock()
	tp.cancel()
	tp.wg.Wait()
	return tp.p.Close()
}

// SendInTransaction sends msg as a half message, runs ExecuteLocal and
// sends its outcome to the broker. It returns the half message's send
// result (Offset -1), the local transaction's state and its error (or the
// error of sending the outcome: the broker then asks Check later). ctx
// bounds the half message's send and is passed to ExecuteLocal; the outcome
// is sent even when ctx has ended by then, within SendTimeout.
func (tp *TransactionProducer) SendInTransaction(ctx context.Context, msg *Message) (SendResult, TxState, error) {
	half := *msg
	half.Properties = make(map[string]string, len(msg.Properties)+2)
	for k, v := range msg.Properties {
		half.Properties[k] = v
	}
	half.Properties["tx"], half.Properties["pgroup"] = "half", tp.group
	res, err := tp.p.Send(ctx, &half)
	if err != nil {
		return res, TxUnknown, err
	}
	msg.MsgID, msg.Partition, msg.Offset = res.MsgID, res.Partition, res.Offset
	state, lerr := tp.l.ExecuteLocal(ctx, msg)
	if lerr != nil {
		return res, TxUnknown, lerr
	}
	if state == TxUnknown {
		return res, state, nil
	}
	// The outcome goes out even when ctx ended during ExecuteLocal (a
	// request deadline that the local transaction used up): the local
	// transaction has committed or rolled back by now, and an outcome left
	// unsent only delays the message to the next check-back (a
	// transactionCheckInterval, 60 s by default). It is bounded by
	// SendTimeout instead, as RocketMQ's producer sends endTransaction under
	// its own timeout (docs/transactions.md).
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tp.p.opts.SendTimeout)
	defer cancel()
	c, err := tp.p.connFor(octx, msg.Topic, res.Partition)
	if err == nil {
		err = tp.end(octx, c, res.MsgID, state)
	}
	return res, state, err
}

// end sends `txend <id> <state>` on c and waits for the answer.
func (tp *TransactionProducer) end(ctx context.Context, c *brokerConn, id int64, state TxState) error {
	cl, err := c.do(ctx, kindOther, tp.p.opts.SendTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendTxEnd(dst, id, state.String(), op)
	})
	if err != nil {
		return err
	}
	defer putCall(cl)
	switch cl.code {
	case protocol.StatusSuccess:
		return nil
	case protocol.StatusNotFound:
		return ErrTxNotPending
	}
	return brokerErr(c.addr, cl.code, cl.body)
}

// goTracked runs f in a goroutine Close waits for (not after Close).
func (tp *TransactionProducer) goTracked(f func()) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return false
	}
	tp.wg.Add(1)
	go func() {
		defer tp.wg.Done()
		f()
	}()
	return true
}

// announce registers a new connection as a live producer of the group.
func (tp *TransactionProducer) announce(c *brokerConn) {
	tp.goTracked(func() { tp.announceOn(c) })
}

func (tp *TransactionProducer) announceOn(c *brokerConn) {
	ctx, cancel := context.WithTimeout(tp.ctx, tp.p.cfg.RequestTimeout)
	defer cancel()
	cl, err := c.do(ctx, kindOther, tp.p.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendProducer(dst, tp.group, op)
	})
	if err != nil {
		if tp.ctx.Err() == nil {
			tp.p.log.Warn("metaq client: announcing the producer group failed; checks reach this producer after its next half message",
				"broker", c.addr, "group", tp.group, "err", err)
		}
		return
	}
	if cl.code != protocol.StatusSuccess {
		tp.p.log.Warn("metaq client: broker refused the producer group", "broker", c.addr, "group", tp.group, "code", cl.code, "body", string(cl.body))
	}
	putCall(cl)
}

// check queues a broker's `check` for a check worker, starting one when
// fewer than maxConcurrentChecks run (on the reader goroutine: it must not
// block).
func (tp *TransactionProducer) check(c *brokerConn, id int64) {
	tp.checkMu.Lock()
	if tp.checking[id] || len(tp.queue) >= maxQueuedChecks {
		tp.checkMu.Unlock()
		return
	}
	tp.checking[id] = true
	tp.queue = append(tp.queue, checkReq{c: c, id: id})
	start := tp.workers < maxConcurrentChecks
	if start {
		tp.workers++
	}
	tp.checkMu.Unlock()
	if start && !tp.goTracked(tp.checkWorker) {
		tp.checkMu.Lock()
		tp.workers-- // closed: nothing is checked any more
		tp.checkMu.Unlock()
	}
}

// checkWorker answers queued checks until the queue is empty or the
// producer closes.
func (tp *TransactionProducer) checkWorker() {
	for {
		tp.checkMu.Lock()
		if len(tp.queue) == 0 || tp.ctx.Err() != nil {
			tp.workers--
			tp.checkMu.Unlock()
			return
		}
		r := tp.queue[0]
		tp.queue[0] = checkReq{}
		tp.queue = tp.queue[1:]
		tp.checkMu.Unlock()
		tp.checkOne(r.c, r.id)
		tp.checkMu.Lock()
		delete(tp.checking, r.id)
		tp.checkMu.Unlock()
	}
}

// checkOne reads the half message the broker asks about, runs Check and
// sends its answer.
func (tp *TransactionProducer) checkOne(c *brokerConn, id int64) {
	ctx, cancel := context.WithTimeout(tp.ctx, 4*tp.p.cfg.RequestTimeout)
	defer cancel()
	msg, err := tp.readHalf(ctx, c, id)
	if err != nil {
		tp.p.log.Warn("metaq client: cannot read the half message the broker asks about", "broker", c.addr, "msgId", id, "err", err)
		return
	}
	state, ok := tp.callCheck(ctx, msg)
	if !ok {
		return
	}
	if err := tp.end(ctx, c, id, state); err != nil && !errors.Is(err, ErrTxNotPending) {
		tp.p.log.Warn("metaq client: answering a check failed", "broker", c.addr, "msgId", id, "err", err)
	}
}

// callCheck runs the listener's Check; false when it panicked. The panic
// is the listener's (a bug, a lost database): it must not take the
// process down from a goroutine nobody can recover in, and a check left
// unanswered is asked again.
func (tp *TransactionProducer) callCheck(ctx context.Context, msg *Message) (state TxState, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			tp.p.log.Error("metaq client: TransactionListener.Check panicked; the broker asks again later",
				"msgId", msg.MsgID, "panic", r, "stack", string(debug.Stack()))
			ok = false
		}
	}()
	return tp.l.Check(ctx, msg), true
}

// readHalf reads half message id back from c's broker (`queryid`).
func (tp *TransactionProducer) readHalf(ctx context.Context, c *brokerConn, id int64) (*Message, error) {
	cl, err := c.do(ctx, kindGet, tp.p.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendQueryID(dst, id, op)
	})
	if err != nil {
		return nil, err
	}
	defer putCall(cl)
	if !cl.value {
		return nil, brokerErr(c.addr, cl.code, cl.body)
	}
	return halfMessage(cl.body) // the body is the call's own (kindGet): the message may alias it
}

// halfMessage decodes a %TX_HALF% record as read back into the message as
// sent. Its properties start with the broker's `rt=<topic>&rp=<partition>&
// pg=<group>` (broker/tx/records.go), in front of the message's own; the
// prefix is cut off before those are decoded, since an own property of the
// same name would otherwise replace it in the decoded map (and be lost),
// and Check would get that property's value as the message's topic.
func halfMessage(block []byte) (*Message, error) {
	it := protocol.NewRecordIterator(block)
	if !it.Next() {
		if err := it.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("metaq client: the broker answered no record")
	}
	r := it.Record()
	topic, part := "", -1
	for i, key := range [...]string{"rt", "rp", "pg"} {
		k, v, rest := protocol.NextProperty(r.Properties)
		if string(k) != key {
			break
		}
		switch i {
		case 0:
			topic = protocol.Unescape(v)
		case 1:
			part, _ = strconv.Atoi(string(v))
		}
		r.Properties = rest
	}
	m := new(Message)
	d := decoder{brokerID: -1}
	d.decode(m, r)
	if topic != "" {
		m.Topic = topic
	}
	if part >= 0 {
		m.Partition.Partition = part
	}
	delete(m.Properties, "tx") // kept in the record by older brokers
	m.Offset = -1
	return m, nil
}

// handleCheck is the reader's hook for a `check <msgId>` request (body =
// the id in decimal).
func (c *brokerConn) handleCheck(body []byte) {
	f := c.cfg.onCheck
	if f == nil {
		return // not a transaction producer: nothing to answer
	}
	id, err := protocol.ParseInt(body)
	if err != nil {
		return
	}
	f(c, id)
}

// Announce connects to the brokers of topics (ZooKeeper mode connects
// lazily, on the first send) so that this producer receives the checks of
// its group's half messages there even before it sent anything itself.
func (tp *TransactionProducer) Announce(ctx context.Context, topics ...string) error {
	for _, t := range topics {
		if _, err := tp.p.Partitions(ctx, t); err != nil {
			return err
		}
	}
	return nil
}
