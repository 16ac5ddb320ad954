package delay

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// RetryTopic and DLQTopic name a group's retry and dead-letter topics.
func RetryTopic(group string) string { return conf.RetryPrefix + group }
func DLQTopic(group string) string   { return conf.DLQPrefix + group }

// ErrNotFound: the message to give back is not in this broker's log.
var ErrNotFound = errors.New("message not found")

// ErrBadReason: a retry reason that is not URL-escaped text (400).
var ErrBadReason = errors.New("bad reason")

// maxReason is how much of a reason is kept.
const maxReason = 512

// checkReason refuses a reason that could add properties to the record it
// is stored in: the reason is URL-escaped text (docs/protocol.md, "retry"),
// so '&' and '=' are %26 and %3D in it, and control bytes are refused as
// the parser refuses them.
func checkReason(reason []byte) error {
	for _, c := range reason {
		if c == '&' || c == '=' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %.40q: '&', '=' and control bytes must be URL-escaped", ErrBadReason, reason)
		}
	}
	return nil
}

// cutReason keeps the first maxReason bytes of an escaped reason, without
// the half of an escape sequence the cut would leave at the end.
func cutReason(reason []byte) []byte {
	if len(reason) <= maxReason {
		return reason
	}
	reason = reason[:maxReason]
	if i := bytes.LastIndexByte(reason[len(reason)-2:], '%'); i >= 0 {
		reason = reason[:len(reason)-2+i]
	}
	return reason
}

// RetryResult tells where a given-back message went.
type RetryResult struct {
	store.AppendResult
	DeadLetter     bool
	ReconsumeTimes int
	Level          int
	OrigMsgID      int64 // the id its producer was given
	Traced         bool  // its producer traces it (SysFlagTraced, or the _trace property: docs/trace.md)
}

// Retry is the broker side of `retry <group> <msgId> <delayLevel>`: the
// message is stored again with reconsumeTimes+1, through delay level
// delayLevel (0: 3 + reconsumeTimes, RocketMQ's ladder 10s, 30s, 1m, …)
// into %RETRY%<group> partition 0; once it has come back
// MaxReconsumeTimes times, or when delayLevel < 0, it goes to
// %DLQ%<group> at once. Its properties keep the first topic (retryTopic)
// and the first id (origMsgId) and gain reason, which is URL-escaped text
// as on the wire (ErrBadReason when it holds '&', '=' or control bytes).
// A record of a system topic other than a retry or dead-letter topic, or a
// transaction half, is ErrNotFound. The caller acknowledges the retry like
// a put (flush in sync mode; WriteOut in async mode).
func (s *Service) Retry(group string, msgID int64, delayLevel int, reason []byte, scratch []byte) (RetryResult, *store.Flush, []byte, error) {
	var out RetryResult
	if err := checkReason(reason); err != nil {
		return out, nil, scratch, err
	}
	res, r, err := s.readRecord(msgID)
	if err != nil {
		return out, nil, scratch, err
	}
	defer res.Release()
	origTopic := string(r.Topic)
	if t := protocol.Property(r.Properties, PropRetryTopic); t != "" && protocol.IsSystemTopic(origTopic) {
		origTopic = t
	}
	if string(r.Topic) == scheduleTopic {
		return out, nil, scratch, fmt.Errorf("%w: %d is a delayed message not yet delivered", ErrNotFound, msgID)
	}
	// Only messages a consumer can have been given are given back: a record
	// of any other system topic (a transaction half, possibly rolled back,
	// the transaction log, resend markers, %POP% state) or a half message
	// is not a message to this group (docs/delay.md, "Retry and dead letters").
	if protocol.IsSystemTopic(r.Topic) && !isRetryOrDLQ(string(r.Topic)) || r.SysFlag&protocol.SysFlagTxPrepared != 0 {
		return out, nil, scratch, fmt.Errorf("%w: %d is not a message that can be given back", ErrNotFound, msgID)
	}
	_, hasOrig := protocol.PropertyRaw(r.Properties, PropOrigMsgID)
	scratch = appendWithout(scratch[:0], r.Properties, isRetryOwned)
	scratch = appendStringPair(scratch, PropRetryTopic, origTopic)
	if !hasOrig {
		scratch = appendIntPair(scratch, PropOrigMsgID, r.MsgID)
	}
	if len(reason) > 0 {
		scratch = appendPair(scratch, PropReason, cutReason(reason))
	}
	times := int(r.ReconsumeTimes)
	out.ReconsumeTimes = times + 1
	out.OrigMsgID = r.MsgID
	if id, ok := propInt(r.Properties, PropOrigMsgID); ok {
		out.OrigMsgID = id
	}
	out.Traced = r.SysFlag&protocol.SysFlagTraced != 0
	if !out.Traced && len(r.Properties) > 0 {
		_, out.Traced = protocol.PropertyRaw(r.Properties, "_trace") // the mark of earlier clients
	}
	m := store.Message{
		Flag: r.Flag, BornTime: r.BornTime, ReconsumeTimes: uint16(min(times+1, 65535)), Data: r.Data,
		SysFlag: (r.SysFlag &^ protocol.SysFlagDelayed) | protocol.SysFlagRetry,
	}
	if delayLevel < 0 || times >= s.cfg.MaxReconsumeTimes {
		if len(reason) == 0 {
			reason := "maxReconsumeTimes"
			if delayLevel < 0 {
				reason = "consumer"
			}
			scratch = appendPair(scratch, PropReason, []byte(reason))
		}
		m.Topic, m.Partition = DLQTopic(group), 0
		m.SysFlag |= protocol.SysFlagDeadLetter
		m.Properties = scratch
		out.DeadLetter = true
		s.deadLet.Add(1)
	} else {
		level := delayLevel
		if level == 0 {
			level = 3 + times
		}
		level = min(max(level, 1), len(s.levels))
		out.Level = level
		scratch = appendStringPair(scratch, PropRealTopic, RetryTopic(group))
		scratch = appendPair(scratch, PropRealPartition, []byte{'0'})
		m.Topic, m.Partition = scheduleTopic, int32(level)
		m.SysFlag |= protocol.SysFlagDelayed
		m.Properties = scratch
		s.retried.Add(1)
	}
	ar, flush, err := s.st.AppendAsync(&m)
	if err != nil {
		return out, nil, scratch, err
	}
	out.AppendResult = ar
	if out.DeadLetter {
		s.announce(m.Topic)
	}
	return out, flush, scratch, nil
}

// readRecord reads the record msgID of this broker's log (ErrNotFound
// when there is none); the caller releases res, which r aliases.
func (s *Service) readRecord(msgID int64) (*store.ReadResult, protocol.Record, error) {
	res, err := s.st.ReadByID(msgID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Record{}, fmt.Errorf("%w: %d", ErrNotFound, msgID)
	}
	if err != nil {
		return nil, protocol.Record{}, err
	}
	if res.Count == 0 {
		res.Release()
		return nil, protocol.Record{}, fmt.Errorf("%w: %d", ErrNotFound, msgID)
	}
	r, _, err := protocol.DecodeRecord(res.Bufs[0], 0)
	if err != nil {
		res.Release()
		return nil, protocol.Record{}, err
	}
	return res, r, nil
}

// isRetryOrDLQ reports whether topic is a group's retry or dead-letter
// topic: the system topics whose messages consumers read and give back.
func isRetryOrDLQ(topic string) bool {
	return len(topic) > len(conf.RetryPrefix) && strings.HasPrefix(topic, conf.RetryPrefix) ||
		len(topic) > len(conf.DLQPrefix) && strings.HasPrefix(topic, conf.DLQPrefix)
}

// isRetryOwned reports the keys a retried or resent message does not keep
// from its record: routing, delay and the retry properties (set anew).
func isRetryOwned(k []byte) bool {
	return isRouting(k) || string(k) == PropDelay || string(k) == PropDeliverAt ||
		string(k) == PropRetryTopic || string(k) == PropReason
}

// LevelDelayMs is the wait of level n (1-based), clamped to the ladder.
func (s *Service) LevelDelayMs(n int) int64 {
	n = min(max(n, 1), len(s.levels))
	return s.levels[n-1].Milliseconds()
}
