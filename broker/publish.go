package broker

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
)

// The put path shared by the text protocol's `put` (handlers.go) and
// in-process publishers such as the HTTP gateway (Server.Publish,
// docs/http.md): the same refusals, partition choice, delay rewriting,
// append and counters. Only what needs a connection stays in the
// connection's code: transactions and half messages (the broker must be
// able to ask the producer back), the reply queue and the per-connection
// ordering notes.

// PutError is a refused put: Code is the protocol status MetaQ answers
// with (400 bad input, 403 forbidden, 500 refused or failed, 503 shutting
// down or busy), Msg its text.
type PutError struct {
	Code int
	Msg  string
	// Status is the HTTP status a gateway answers with when the protocol
	// code is too coarse (MetaQ answers 500 for an unknown topic or
	// partition: 404 and 400 over HTTP); 0: derived from Code.
	Status int
}

func (e *PutError) Error() string { return e.Msg }

func putErr(code int, msg string) *PutError { return &PutError{Code: code, Msg: msg} }

// putTopic resolves the topic of a put and applies the refusals that do not
// depend on a connection (system topics, topics not accepted here). Every
// such refusal belongs here so that both put paths apply it.
func (s *Server) putTopic(topic []byte, partition int32) (*topicState, *PutError) {
	if protocol.IsSystemTopic(topic) {
		return nil, putErr(protocol.StatusForbidden, s.putError(topic, partition, "system topics do not accept puts"))
	}
	ts := s.topics.get(topic)
	if ts == nil || !ts.settings.AcceptPublish {
		s.log.Warn("put refused: the topic is not accepted for publishing here", "topic", string(topic))
		return nil, &PutError{Code: protocol.StatusInternalServerError, Status: 404,
			Msg: s.putError(topic, partition, "The server do not accept topic "+string(topic))}
	}
	return ts, nil
}

// putPartition picks the partition of `-1` and checks the range.
func (s *Server) putPartition(ts *topicState, partition int32) (int32, *PutError) {
	if partition == -1 {
		partition = ts.choosePartition()
	}
	if partition < 0 || int(partition) >= ts.settings.NumPartitions {
		return partition, &PutError{Code: protocol.StatusInternalServerError, Status: 400,
			Msg: s.putError([]byte(ts.name), partition, "wrong partition "+strconv.Itoa(int(partition)))}
	}
	return partition, nil
}

// storeRef is the store's handle on ts (store.TopicRef), made at the topic's
// first put: the append finds the partition through it instead of looking the
// topic's name up once more.
func (s *Server) storeRef(ts *topicState) *store.TopicRef {
	r := ts.ref.Load()
	if r == nil {
		r = s.store.TopicRef(ts.name)
		ts.ref.Store(r)
	}
	return r
}

// planDelay rewrites a message carrying delay=<level> or deliverAt=<unix ms>
// into its %SCHEDULE% record (docs/delay.md); buf is scratch space for the
// rewritten message and is returned for reuse.
func (s *Server) planDelay(ts *topicState, m *store.Message, buf []byte) (delayed bool, _ []byte, _ *PutError) {
	d := s.delayService() // nil on a slave (replication_run.go)
	if d == nil || len(m.Properties) == 0 {
		return false, buf, nil
	}
	plan, yes, err := d.PlanFor(m.Properties, 0) // 0: PlanFor reads the clock only for deliverAt
	if err != nil {
		return false, buf, putErr(protocol.StatusBadRequest, s.putError([]byte(ts.name), m.Partition, err.Error()))
	}
	if !yes {
		return false, buf, nil
	}
	*m, buf = delay.ScheduleMessage(m, plan, buf)
	return true, buf, nil
}

// putAppend appends a resolved message (after planDelay); the caller counts
// its bytes (len(m.Data) before the call) on success. In sync-flush mode the caller acknowledges after flush is done; in
// async mode after store.WriteOut.
func (s *Server) putAppend(ts *topicState, m *store.Message) (store.AppendResult, *store.Flush, *PutError) {
	partition := m.Partition
	res, flush, err := s.appendAsync(m)
	if err != nil {
		code := protocol.StatusInternalServerError
		switch {
		case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrBadTopic):
			code = protocol.StatusBadRequest
		case errors.Is(err, store.ErrClosed):
			code = protocol.StatusServiceUnavailable
		default:
			s.log.Error("append failed", "topic", ts.name, "partition", partition, "err", err)
		}
		return res, nil, putErr(code, s.putError([]byte(ts.name), partition, err.Error()))
	}
	return res, flush, nil
}

// topicWritten tells the ZooKeeper registration about a topic written for
// the first time since start.
func (s *Server) topicWritten(ts *topicState) {
	if !ts.notified.Load() && ts.notified.CompareAndSwap(false, true) && s.opts.OnTopic != nil {
		go s.opts.OnTopic(ts.name, ts.settings.NumPartitions)
	}
}

// Message is a message for Publish.
type Message struct {
	Topic     string
	Partition int32 // -1: the broker picks (round robin)
	// Flag is MetaQ's user flag; bit 0 says Data starts with an attribute.
	// Bit 1 (a properties line inside Data) is refused: properties go in
	// Properties.
	Flag int32
	// Properties is a properties line without its "\n" (a URL query string:
	// tag, keys, delay, deliverAt, user properties), as docs/protocol.md
	// describes.
	Properties []byte
	Data       []byte
}

// PublishResult is what a `put` reply carries.
type PublishResult struct {
	MsgID       int64
	Partition   int32
	QueueOffset int64 // -1: delayed (stored in %SCHEDULE%, no offset in its topic yet)
}

// MaxMessageSize is the largest message data a put accepts (maxMessageSize).
func (s *Server) MaxMessageSize() int { return s.opts.MaxMessageSize }

// ReservePutBytes reserves n bytes of the broker-wide budget for put data
// being buffered (maxPendingPutBytes, putbudget.go) before a publisher
// outside the text protocol reads a message into memory; release returns
// them. It waits while the budget is spent, until ctx ends or the broker
// shuts down.
func (s *Server) ReservePutBytes(ctx context.Context, n int64) (release func(), err error) {
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	if err := s.putBudget.acquire(n, deadline, ctx.Done()); err != nil {
		if errors.Is(err, errConnClosed) {
			err = ctx.Err()
		}
		return nil, putErr(protocol.StatusServiceUnavailable, "put data budget: "+err.Error())
	}
	return func() { s.putBudget.release(n) }, nil
}

// Publish stores one message as the text protocol's `put` would, without a
// transaction, and returns once it is acknowledged-safe: durable in
// sync-flush mode, written to the page cache in async mode. Refusals are
// *PutError. ctx bounds only the wait for the group commit; once appended
// the message stays stored even when ctx ends first.
func (s *Server) Publish(ctx context.Context, m *Message) (PublishResult, error) {
	s.stats.cmdPut.Add(1)
	res, sampled, flush, perr := s.publish(m)
	if perr != nil {
		s.stats.putFailed.Add(1)
		return res, perr
	}
	if flush != nil {
		select {
		case <-flush.Done():
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if err := flush.Err(); err != nil {
			s.stats.putFailed.Add(1)
			return res, putErr(replyFlushCode(err), s.putFailedMessage(err)) // 503: not replicated
		}
	} else if err := s.store.WriteOut(); err != nil {
		s.stats.putFailed.Add(1)
		s.log.Error("commit log write failed; put not acknowledged", "puts", 1, "err", err)
		return res, putErr(protocol.StatusInternalServerError, s.putFailedMessage(err))
	}
	s.observePut(sampled)
	return res, nil
}

func (s *Server) publish(m *Message) (PublishResult, int64, *store.Flush, *PutError) {
	res := PublishResult{Partition: m.Partition, QueueOffset: -1}
	if s.shuttingDown.Load() {
		return res, 0, nil, putErr(protocol.StatusServiceUnavailable, "broker shutting down")
	}
	if n := s.opts.HA; n != nil { // a slave, or a fenced master (replication.go)
		if code, msg := n.PutRefusal(); code != 0 {
			return res, 0, nil, putErr(code, msg)
		}
	}
	if !protocol.ValidName(m.Topic) {
		return res, 0, nil, putErr(protocol.StatusBadRequest, "bad topic name "+strconv.Quote(m.Topic))
	}
	ts, perr := s.putTopic([]byte(m.Topic), m.Partition)
	if perr != nil {
		return res, 0, nil, perr
	}
	fail := func(p *PutError) (PublishResult, int64, *store.Flush, *PutError) {
		ts.putFailed.Add(1)
		return res, 0, nil, p
	}
	sampled := s.sampleStart(ts.puts.Add(1))
	partition, perr := s.putPartition(ts, m.Partition)
	res.Partition = partition
	if perr != nil {
		return fail(perr)
	}
	if m.Flag&protocol.FlagHasProperties != 0 {
		return fail(putErr(protocol.StatusBadRequest, "flag bit 1 (properties line in the data) is not accepted here: give the properties separately"))
	}
	if len(m.Properties) > protocol.MaxPropertiesLen {
		return fail(putErr(protocol.StatusBadRequest, protocol.ErrPropertiesTooLong.Error()))
	}
	for _, c := range m.Properties {
		if c < 0x20 || c == 0x7f {
			return fail(putErr(protocol.StatusBadRequest, protocol.ErrBadProperties.Error()))
		}
	}
	msg := store.Message{Topic: ts.name, Partition: partition, Flag: m.Flag, Properties: m.Properties, Data: m.Data}
	if _, half := tx.HalfGroup(msg.Properties); half {
		return fail(putErr(protocol.StatusBadRequest, "half (transactional) messages need a producer connection on the text protocol: tx=half is refused here"))
	}
	delayed, _, perr := s.planDelay(ts, &msg, nil)
	if perr != nil {
		return fail(perr)
	}
	n := len(msg.Data)
	ar, flush, perr := s.putAppend(ts, &msg)
	if perr != nil {
		return fail(perr)
	}
	ts.putBytes.Add(int64(n))
	res.MsgID, res.QueueOffset = ar.MsgID, ar.QueueOffset
	if delayed {
		res.QueueOffset = -1
	}
	s.topicWritten(ts)
	return res, sampled, flush, nil
}
