package client

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// MessageTrace is a message's timeline (docs/trace.md): every trace event
// about it across groups and retries, with the store events of its record
// and of the copies the events name (retry, delay), in time order.
type MessageTrace struct {
	MsgID  int64         `json:"msgId"`
	Topic  string        `json:"topic,omitempty"`
	Broker string        `json:"broker"` // address asked
	Found  bool          `json:"found"`  // the message's record was found
	Events []trace.Event `json:"events"`
	// BadRecords counts %TRACE% records that did not decode.
	BadRecords int `json:"badRecords,omitempty"`
	// Asked is the id asked for when it is a copy of MsgID (a retried or
	// delayed delivery, a committed transactional message).
	Asked int64 `json:"asked,omitempty"`
}

// maxTraceRecords bounds the %TRACE% records read for one message.
const maxTraceRecords = 1000

// Trace returns the timeline of message msgID. The message's trace lives
// on its broker (clients write each event to the broker holding the
// message); addr "" looks that broker up in ZooKeeper. Asked for a copy
// (a retried or delayed delivery, a committed transactional message), it
// returns the timeline of the message the producer sent (Asked = msgID);
// a transactional message's timeline holds the events of its committed
// copy too.
func (a *Admin) Trace(ctx context.Context, addr string, msgID int64) (*MessageTrace, error) {
	bid, _ := protocol.SplitMsgID(msgID)
	if addr == "" {
		var err error
		if addr, err = a.BrokerAddr(ctx, bid); err != nil {
			return nil, err
		}
	}
	mt := &MessageTrace{MsgID: msgID, Broker: addr}
	evs, err := a.traceEvents(ctx, addr, msgID, mt)
	if err != nil {
		return nil, err
	}
	// A copy: its events (and the tx-commit naming it) carry the original's id.
	for _, e := range evs {
		if e.RecordID != 0 && e.RecordID == msgID && e.MsgID >= 0 && e.MsgID != msgID {
			mt.MsgID, mt.Asked = e.MsgID, msgID
			if evs, err = a.traceEvents(ctx, addr, e.MsgID, mt); err != nil {
				return nil, err
			}
			break
		}
	}
	id := mt.MsgID
	// A committed transactional message: its consumers' events are the
	// committed copy's.
	var linked []int64
	for _, e := range evs {
		if e.Type == trace.TxCommit && e.MsgID == id && e.RecordID > 0 && !slices.Contains(linked, e.RecordID) {
			linked = append(linked, e.RecordID)
		}
	}
	for _, c := range linked {
		more, err := a.traceEvents(ctx, addr, c, mt)
		if err != nil {
			return nil, err
		}
		evs = append(evs, more...)
	}
	evs = trace.Select(evs, -1)
	var stores []trace.Event
	m, err := a.QueryID(ctx, addr, id)
	var be *BrokerError
	switch {
	case err == nil:
		mt.Found, mt.Topic = true, m.Topic
		stores = append(stores, storeEventOf(m, id))
	case errors.As(err, &be) && be.Code == protocol.StatusNotFound:
	default:
		return nil, err
	}
	// The copies the events name (a retry topic's record, a delayed
	// message's delivery, a committed transactional message): their records
	// give the broker's side.
	var copies []int64
	for _, e := range evs {
		if e.RecordID != 0 && e.RecordID != id && !slices.Contains(copies, e.RecordID) && len(copies) < 64 {
			copies = append(copies, e.RecordID)
		}
	}
	for _, c := range copies {
		if cm, err := a.QueryID(ctx, addr, c); err == nil {
			se := storeEventOf(cm, id)
			if slices.Contains(linked, c) {
				se.Detail = "committed: visible to consumers"
			}
			stores = append(stores, se)
		}
	}
	for i := range evs { // a committed copy's events are the message's
		if slices.Contains(linked, evs[i].MsgID) {
			evs[i].RecordID, evs[i].MsgID = evs[i].MsgID, id
		}
	}
	evs = append(evs, stores...)
	trace.Sort(evs)
	if mt.Topic == "" || mt.Topic == txHalfTopic {
		for _, e := range evs {
			if (e.Type == trace.Produce || e.Type == trace.TxCommit) && e.Topic != "" {
				mt.Topic = e.Topic
				break
			}
		}
	}
	mt.Events = evs
	return mt, nil
}

// txHalfTopic holds half messages (docs/transactions.md).
const txHalfTopic = "%TX_HALF%"

// traceEvents reads the events about message id (as the traced id or as
// the record an event is about) from the %TRACE% records of its bucket
// key.
func (a *Admin) traceEvents(ctx context.Context, addr string, id int64, mt *MessageTrace) ([]trace.Event, error) {
	recs, err := a.QueryKey(ctx, addr, trace.Topic, trace.BucketKey(id), maxTraceRecords)
	if err != nil {
		return nil, err
	}
	var evs []trace.Event
	for i := range recs {
		d, err := trace.Decode(recs[i].Body)
		if err != nil {
			mt.BadRecords++
			continue
		}
		for _, e := range d {
			if e.MsgID == id || (e.RecordID != 0 && e.RecordID == id && e.MsgID >= 0) {
				evs = append(evs, e)
			}
		}
	}
	return trace.Select(evs, -1), nil
}

// TraceKey returns the timelines of topic's messages carrying key, asking
// each broker at addrs: the messages are found through the trace records'
// keys and the topic's own key index (newest maxNum, by msgId).
func (a *Admin) TraceKey(ctx context.Context, addrs []string, topic, key string, maxNum int) ([]*MessageTrace, error) {
	if maxNum <= 0 {
		maxNum = 32
	}
	var out []*MessageTrace
	var errs []error
	for _, addr := range addrs {
		var ids []int64
		recs, err := a.QueryKey(ctx, addr, trace.Topic, key, maxTraceRecords)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range recs {
			evs, err := trace.Decode(recs[i].Body)
			if err != nil {
				continue
			}
			for _, e := range evs {
				if e.MsgID >= 0 && e.Topic == topic && slices.Contains(strings.Fields(e.Keys), key) && !slices.Contains(ids, e.MsgID) {
					ids = append(ids, e.MsgID)
				}
			}
		}
		if msgs, err := a.QueryKey(ctx, addr, topic, key, maxNum); err == nil {
			for i := range msgs {
				if id := origID(&msgs[i]); !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		slices.Sort(ids)
		if len(ids) > maxNum {
			ids = ids[len(ids)-maxNum:]
		}
		for _, id := range ids {
			mt, err := a.Trace(ctx, addr, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, mt)
		}
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// origID is the id a message's producer was given (a copy's origMsgId).
func origID(m *Message) int64 {
	if s, ok := m.Properties[PropOrigMsgID]; ok {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id >= 0 {
			return id
		}
	}
	return m.MsgID
}

// storeEventOf is the store event of a received record, for message msgID
// (the record itself or a copy of it).
func storeEventOf(m *Message, msgID int64) trace.Event {
	e := trace.Event{Type: trace.Store, MsgID: msgID, Topic: m.Topic, Tag: m.Tag, Time: m.StoreTime.UnixMilli(), OK: true,
		Broker: m.Partition.BrokerID, Partition: m.Partition.Partition, Offset: m.Offset, Reconsume: m.ReconsumeTimes,
		Size: len(m.Body), Keys: strings.Join(m.Keys, " ")}
	if m.MsgID != msgID {
		e.RecordID = m.MsgID
	}
	switch {
	case m.Topic == "%SCHEDULE%":
		e.Offset = -1
		e.Detail = "scheduled: delivered to " + m.Properties["realTopic"] + " when due"
	case strings.HasPrefix(m.Topic, "%RETRY%"):
		e.Detail = "stored for redelivery"
	case strings.HasPrefix(m.Topic, "%DLQ%"):
		e.Detail = "dead letter"
	case m.Topic == txHalfTopic:
		e.Detail = "half message: invisible until committed"
		if rt := m.Properties["rt"]; rt != "" {
			e.Detail += " to " + rt
		}
	case m.MsgID != msgID:
		e.Detail = "delivered copy"
	}
	if !m.BornTime.IsZero() && m.BornTime.Before(m.StoreTime) && m.MsgID == msgID {
		e.Detail = strings.TrimSpace(e.Detail + " born " + m.StoreTime.Sub(m.BornTime).String() + " before")
	}
	return e
}
