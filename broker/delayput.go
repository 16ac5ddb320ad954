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
	res, flush, buf, err := d.Retry(string(cmd.Group), cmd.MsgID, int(cmd.DelayLevel), cmd.Key, c.delayBuf)
	c.delayBuf = buf
	if err != nil {
		code := protocol.StatusInternalServerError
		switch {
		case errors.Is(err, delay.ErrNotFound):
			code = protocol.StatusNotFound
		case errors.Is(err, store.ErrClosed):
			code = protocol.StatusServiceUnavailable
		default:
			c.log.Error("retry failed", "group", string(cmd.Group), "msgId", cmd.MsgID, "err", err)
		}
		c.rq.addResultString(code, "retry of message "+strconv.FormatInt(cmd.MsgID, 10)+" failed: "+err.Error(), cmd.Opaque)
		return
	}
	c.rq.addPut(flush, res.MsgID, 0, -1, cmd.Opaque)
}

// appendDelayStats adds the delay service's figures to `stats` (and, with
// detail, one line per level for `stats delay`).
func (s *Server) appendDelayStats(b []byte, detail bool) []byte {
	d := s.delayService()
	if d == nil {
		return b
	}
	st := d.Stats()
	b = protocol.AppendStatInt(b, "delay_pending", st.Pending())
	b = protocol.AppendStatInt(b, "delay_timer_pending", st.TimerPending)
	b = protocol.AppendStatInt(b, "delay_timer_indexed", st.TimerIndexed)
	b = protocol.AppendStatInt(b, "delay_next_due", st.NextDueMs)
	b = protocol.AppendStatInt(b, "delay_timer_lag_ms", st.TimerLagMs)
	b = protocol.AppendStatInt(b, "delay_late_max_ms", st.LateMaxMs)
	b = protocol.AppendStatInt(b, "delay_delivered", st.Delivered)
	b = protocol.AppendStatInt(b, "delay_retried", st.Retried)
	b = protocol.AppendStatInt(b, "delay_dead_letters", st.DeadLetters)
	b = protocol.AppendStatInt(b, "delay_index_bytes", st.IndexBytes)
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
