package broker

import (
	"strconv"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tracelog"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// The broker's own message-trace events (docs/trace.md), for messages whose
// producer traces them (the _trace property): a give-back stored for
// redelivery or dead-lettered (traceRetry), a delayed or retried message
// delivered to its topic (traceDelivered). They go through Options.Trace, a
// tracelog.Writer that appends batches to %TRACE% through the store.

// TraceEvent queues a broker-side trace event (for instance a push
// delivery of broker/pop: Type trace.Push, MsgID the traced id). It never
// blocks; without a trace writer it does nothing.
func (s *Server) TraceEvent(e *trace.Event) { s.opts.Trace.Emit(e) }

// traceRetry records what the broker did with a give-back.
func (s *Server) traceRetry(group string, recordID int64, res *delay.RetryResult) {
	e := trace.Event{Type: trace.Retried, MsgID: res.OrigMsgID, RecordID: res.MsgID, Topic: conf.ScheduleTopic, Time: res.StoreTime,
		OK: true, Group: group, Broker: s.opts.BrokerID, Partition: res.Level, Offset: -1, Reconsume: res.ReconsumeTimes,
		Detail: "given back (record " + strconv.FormatInt(recordID, 10) + "): redelivered through " + delay.RetryTopic(group) +
			" after delay level " + strconv.Itoa(res.Level)}
	if res.DeadLetter {
		e.Type, e.Topic, e.Partition, e.Offset = trace.DeadLetter, delay.DLQTopic(group), 0, res.QueueOffset
		e.Detail = "given back (record " + strconv.FormatInt(recordID, 10) + "): stored as a dead letter"
	}
	s.opts.Trace.Emit(&e)
}

// traceDelivered is the delay service's OnDelivered: a traced delayed (or
// retried) message reached its topic.
func traceDelivered(w *tracelog.Writer, brokerID int) func(r *protocol.Record, m *store.Message, res store.AppendResult) {
	return func(r *protocol.Record, m *store.Message, res store.AppendResult) {
		if !tracelog.Traced(r.SysFlag, r.Properties) {
			return
		}
		orig := r.MsgID
		if v, ok := protocol.PropertyRaw(r.Properties, delay.PropOrigMsgID); ok {
			if id, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				orig = id
			}
		}
		e := trace.Event{Type: trace.Delivered, MsgID: orig, RecordID: res.MsgID, Topic: m.Topic, Time: res.StoreTime, OK: true,
			Broker: brokerID, Partition: int(m.Partition), Offset: res.QueueOffset, Reconsume: int(m.ReconsumeTimes), Size: len(m.Data),
			Detail: "due: appended to its topic (scheduled record " + strconv.FormatInt(r.MsgID, 10) + ")"}
		w.Emit(&e)
	}
}

// brokerHost names the broker in its trace events.
func brokerHost(c *conf.Config) string {
	h := c.System.HostName
	if h == "" {
		h = "broker"
	}
	return h + " (broker " + strconv.Itoa(c.System.BrokerID) + ")"
}
