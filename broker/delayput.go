package broker

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/metaqgo/metaq/broker/auth"
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
	if code, msg := c.retryDenied(cmd); code != 0 {
		c.rq.addResultString(code, msg, cmd.Opaque)
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

// retryDenied is the check of a retry or a resend beyond the group's
// (authorize): the message they copy is named by its id, so its topic is
// read from the log here. A retry copies the message into the group's
// %RETRY%/%DLQ% topics, which the group may read: it needs subscribe on
// the message's original topic — its own, or for a record of the group's
// %RETRY%<group>/%DLQ%<group> the one its retryTopic property names —
// (another system topic: admins only). A resend appends the dead letter to
// its original topic: it needs publish there (docs/security.md). code 0:
// allowed (or nothing to check: the delay service answers for a record
// that is not there, or not a dead letter of the group).
func (c *conn) retryDenied(cmd *protocol.Command) (code int, msg string) {
	a := c.srv.opts.Auth
	if a == nil || a.Unrestricted(c.user) {
		return 0, ""
	}
	rd, err := c.srv.store.ReadByID(cmd.MsgID)
	if err == nil && rd.Count == 0 {
		rd.Release()
		err = store.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: %d", delay.ErrNotFound, cmd.MsgID)
		}
		what := "retry of message " + strconv.FormatInt(cmd.MsgID, 10) + " failed: "
		if cmd.DelayLevel == protocol.ResendDeadLetter {
			what = ""
		}
		return c.retryErrCode(err, "reading the message to retry", cmd), what + err.Error()
	}
	defer rd.Release()
	r, _, err := protocol.DecodeRecord(rd.Bufs[0], 0)
	if err != nil {
		return c.retryErrCode(err, "reading the message to retry", cmd), err.Error()
	}
	group := string(cmd.Group)
	own := string(r.Topic) == delay.RetryTopic(group) || string(r.Topic) == delay.DLQTopic(group)
	var reason string
	if cmd.DelayLevel == protocol.ResendDeadLetter {
		if string(r.Topic) != delay.DLQTopic(group) {
			return 0, "" // not a dead letter of the group: the delay service answers 404
		}
		reason = c.denied(cmd.Op, auth.OpPublish, []byte(protocol.Property(r.Properties, delay.PropRetryTopic)), nil)
	} else {
		orig := r.Topic
		if t := protocol.Property(r.Properties, delay.PropRetryTopic); own && t != "" {
			orig = []byte(t)
		}
		reason = c.denied(cmd.Op, auth.OpSubscribe, orig, cmd.Group)
	}
	if reason != "" {
		return protocol.StatusForbidden, reason
	}
	return 0, ""
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
