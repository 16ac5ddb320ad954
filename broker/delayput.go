package broker

import (
	"errors"
	"strconv"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// delayPut rewrites a put carrying delay=<level> or deliverAt=<unix ms>
// into its %SCHEDULE% record (docs/delay.md). ok is false when the put was
// refused (the reply is queued).
func (c *conn) delayPut(ts *topicState, m *store.Message, opaque int32) (delayed, ok bool) {
	delayed, buf, perr := c.srv.planDelay(ts, m, c.delayBuf) // publish.go
	c.delayBuf = buf
	if perr != nil {
		c.failPut(ts, perr.Code, perr.Msg, opaque)
		return false, false
	}
	return delayed, true
}

// handleRetry answers `retry <group> <msgId> <delayLevel> <opaque> [<reason>]`
// with `result 200 <msgId> <partition> -1` once the message is stored
// again (in sync-flush mode once durable), body = the new record's id,
// partition 0 of the retry (or dead-letter) topic and -1.
func (c *conn) handleRetry(cmd *protocol.Command) {
	s := c.srv
	d := s.delayService()
	if d == nil {
		c.rq.addResultString(protocol.StatusServiceUnavailable, "retry is not enabled on this broker", cmd.Opaque)
		return
	}
	if cmd.DelayLevel == protocol.ResendDeadLetter {
		c.handleResend(d, cmd)
		return
	}
	res, flush, buf, err := d.Retry(string(cmd.Group), cmd.MsgID, int(cmd.DelayLevel), cmd.Key, c.delayBuf)
	c.delayBuf = buf
	if err != nil {
		c.rq.addResultString(c.retryErrCode(err, "retry failed", cmd), "retry of message "+strconv.FormatInt(cmd.MsgID, 10)+" failed: "+err.Error(), cmd.Opaque)
		return
	}
	c.rq.addPut(flush, res.MsgID, 0, -1, cmd.Opaque)
	if res.Traced && s.opts.Trace != nil {
		s.traceRetry(string(cmd.Group), cmd.MsgID, &res) // traceemit.go
	}
}

// handleResend answers `retry <group> <dlqMsgId> -2 <opaque>`: the dead
// letter goes back to its original topic once; `result 200 <newMsgId>
// <partition> <offset>`, 409 when it was resent before (body names the
// copy), 404 when it is not a dead letter of the group.
func (c *conn) handleResend(d *delay.Service, cmd *protocol.Command) {
	part := func(topic string) (int32, bool) {
		ts := c.srv.topics.get([]byte(topic))
		if ts == nil {
			return 0, false
		}
		return ts.choosePartition(), true
	}
	res, flush, buf, err := d.Resend(string(cmd.Group), cmd.MsgID, part, c.delayBuf)
	c.delayBuf = buf
	if err != nil {
		c.rq.addResultString(c.retryErrCode(err, "dead letter resend failed", cmd), err.Error(), cmd.Opaque)
		return
	}
	c.rq.addPut(flush, res.MsgID, res.Partition, res.QueueOffset, cmd.Opaque)
}

// retryErrCode is the reply code of a failed retry or resend (logged
// when it is the broker's fault).
func (c *conn) retryErrCode(err error, what string, cmd *protocol.Command) int {
	switch {
	case errors.Is(err, delay.ErrAlreadyResent):
		return protocol.StatusConflict
	case errors.Is(err, delay.ErrNotFound):
		return protocol.StatusNotFound
	case errors.Is(err, delay.ErrBadReason):
		return protocol.StatusBadRequest
	case errors.Is(err, store.ErrClosed):
		return protocol.StatusServiceUnavailable
	}
	c.log.Error(what, "group", string(cmd.Group), "msgId", cmd.MsgID, "err", err)
	return protocol.StatusInternalServerError
}

// appendDelayStats adds the delay service's figures to `stats` (and, with
// detail, one line per level for `stats delay`).
func (s *Server) appendDelayStats(b []byte, detail bool) []byte {
	d := s.delayService()
	if d == nil {
		return b
	}
	st := d.Stats()
	b = protocol.AppendStatInts(b,
		protocol.IntStat{Key: "delay_pending", V: st.Pending()},
		protocol.IntStat{Key: "delay_timer_pending", V: st.TimerPending},
		protocol.IntStat{Key: "delay_timer_indexed", V: st.TimerIndexed},
		protocol.IntStat{Key: "delay_next_due", V: st.NextDueMs},
		protocol.IntStat{Key: "delay_timer_lag_ms", V: st.TimerLagMs},
		protocol.IntStat{Key: "delay_late_max_ms", V: st.LateMaxMs},
		protocol.IntStat{Key: "delay_delivered", V: st.Delivered},
		protocol.IntStat{Key: "delay_retried", V: st.Retried},
		protocol.IntStat{Key: "delay_dead_letters", V: st.DeadLetters},
		protocol.IntStat{Key: "delay_rolled", V: st.Rolled},
		protocol.IntStat{Key: "delay_index_bytes", V: st.IndexBytes})
	if detail {
		for i, n := range st.LevelPending {
			b = protocol.AppendStatInt(b, "delay_level_"+strconv.Itoa(i+1)+"_pending", n)
		}
		for i, l := range d.Levels() {
			b = protocol.AppendStat(b, "delay_level_"+strconv.Itoa(i+1), l.String())
		}
	}
	return b
}
