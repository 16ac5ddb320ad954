package broker

import (
	"errors"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// tracePut stores a client's batch of trace events in %TRACE% — the one
// system topic that takes client puts (docs/trace.md). The batch must be a
// valid trace record (trace.Validate) whose properties line holds only
// `keys`; partition 0 or -1; no transaction. Anything else is 400.
func (c *conn) tracePut(cmd *protocol.Command) {
	s := c.srv
	ts := s.topics.get(cmd.Topic)
	if ts == nil || !ts.settings.AcceptPublish {
		c.failPut(nil, protocol.StatusForbidden, s.putError(cmd.Topic, cmd.Partition, "system topics do not accept puts"), cmd.Opaque)
		return
	}
	ts.puts.Add(1)
	if len(cmd.TxKey) > 0 || (cmd.Partition != 0 && cmd.Partition != -1) {
		c.failPut(ts, protocol.StatusBadRequest, s.putError(cmd.Topic, cmd.Partition, "trace records go to partition 0, outside transactions"), cmd.Opaque)
		return
	}
	props, data, flag, err := protocol.SplitProperties(cmd.Flag, cmd.Data)
	if err == nil && flag&protocol.FlagHasAttribute != 0 {
		err = errors.New("trace records carry no attribute")
	}
	for p := props; err == nil && len(p) > 0; {
		var k []byte
		k, _, p = protocol.NextProperty(p)
		if string(k) != protocol.PropKeys {
			err = errors.New("a trace record's only property is keys")
		}
	}
	if err == nil {
		err = trace.Validate(data)
	}
	if err != nil {
		c.failPut(ts, protocol.StatusBadRequest, s.putError(cmd.Topic, 0, err.Error()), cmd.Opaque)
		return
	}
	msg := store.Message{Topic: ts.name, Partition: 0, Flag: flag, Properties: props, Data: data}
	res, flush, err := s.appendAsync(&msg)
	if err != nil {
		code := protocol.StatusInternalServerError
		switch {
		case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrBadTopic):
			code = protocol.StatusBadRequest
		case errors.Is(err, store.ErrClosed):
			code = protocol.StatusServiceUnavailable
		default:
			c.log.Error("append failed", "topic", ts.name, "err", err)
		}
		c.failPut(ts, code, s.putError(cmd.Topic, 0, err.Error()), cmd.Opaque)
		return
	}
	ts.putBytes.Add(int64(len(data)))
	c.rq.addPut(flush, res.MsgID, 0, res.QueueOffset, cmd.Opaque)
	c.own.note(ts, 0, res.QueueOffset, flush)
	if !ts.notified.Load() && ts.notified.CompareAndSwap(false, true) && s.opts.OnTopic != nil {
		go s.opts.OnTopic(ts.name, ts.settings.NumPartitions)
	}
}

// handleTrace: `trace on|off <opaque>`. From `trace on` the connection's
// puts are stored with protocol.SysFlagTraced: the broker writes its own
// trace events for them (docs/trace.md) at no cost on the put path (a
// traced message stays a plain one).
func (c *conn) handleTrace(cmd *protocol.Command) {
	c.traceMark = 0
	if cmd.Count == 1 {
		c.traceMark = protocol.SysFlagTraced
	}
	c.rq.addResultString(protocol.StatusSuccess, "", cmd.Opaque)
}
