package delay

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Dead-letter resend markers (docs/delay.md, "Resending dead letters").
//
// Resending a dead letter appends a copy to its original topic and then a
// marker record to %RESENT%<group> partition 0, whose data is one ASCII line
//
//	v=1&dlq=<dead letter's msgId>&new=<the copy's msgId>
//
// The log order makes it safe: a marker that survives a crash implies its
// copy did. A dead letter with a marker is not resent again (409). The
// markers of a group are read back from the log the first time the group
// resends one of its dead letters after a start and kept in memory (16
// bytes a resent letter), for at most maxResentGroups groups.

// ResentTopic names a group's resend-marker topic.
func ResentTopic(group string) string { return "%RESENT%" + group }

// ErrAlreadyResent: the dead letter was resent before (ResendResult.NewMsgID
// names the copy).
var ErrAlreadyResent = errors.New("dead letter already resent")

// ResendResult tells where a resent dead letter went.
type ResendResult struct {
	store.AppendResult        // the copy
	Topic              string // its original topic
	Partition          int32
	NewMsgID           int64 // for ErrAlreadyResent: the earlier copy
}

// Resend is the broker side of `retry <group> <dlqMsgId> -2 <opaque>`: the
// dead letter msgID of %DLQ%<group> is appended again to the topic it was
// first consumed from (partition chosen by partition, false when this
// broker does not accept the topic), without its retry properties and with
// reconsumeTimes 0, then marked resent. The caller acknowledges it like a
// put (the flush covers the marker, which follows the copy).
func (s *Service) Resend(group string, msgID int64, partition func(topic string) (int32, bool), scratch []byte) (ResendResult, *store.Flush, []byte, error) {
	var out ResendResult
	s.resendMu.Lock()
	defer s.resendMu.Unlock()
	// The letter first: a group that is asked about costs nothing unless
	// it has this dead letter (resentLocked caches the group's markers).
	res, r, err := s.readRecord(msgID)
	if err != nil {
		return out, nil, scratch, err
	}
	defer res.Release()
	if string(r.Topic) != DLQTopic(group) {
		return out, nil, scratch, fmt.Errorf("%w: %d is not a dead letter of group %s", ErrNotFound, msgID, group)
	}
	marks, err := s.resentLocked(group)
	if err != nil {
		return out, nil, scratch, err
	}
	if id, done := marks[msgID]; done {
		out.NewMsgID = id
		return out, nil, scratch, fmt.Errorf("%w: %d as %d", ErrAlreadyResent, msgID, id)
	}
	topic := protocol.Property(r.Properties, PropRetryTopic)
	if !protocol.ValidName(topic) || protocol.IsSystemTopic(topic) {
		return out, nil, scratch, fmt.Errorf("%w: dead letter %d has no original topic", ErrNotFound, msgID)
	}
	part, ok := partition(topic)
	if !ok {
		return out, nil, scratch, fmt.Errorf("%w: topic %s of dead letter %d is not accepted here", ErrNotFound, topic, msgID)
	}
	_, hasOrig := protocol.PropertyRaw(r.Properties, PropOrigMsgID)
	scratch = appendWithout(scratch[:0], r.Properties, isRetryOwned)
	if !hasOrig {
		scratch = appendIntPair(scratch, PropOrigMsgID, r.MsgID)
	}
	m := store.Message{
		Topic: topic, Partition: part, Flag: r.Flag, BornTime: r.BornTime, Data: r.Data, Properties: scratch,
		SysFlag: r.SysFlag &^ (protocol.SysFlagDelayed | protocol.SysFlagRetry | protocol.SysFlagDeadLetter),
	}
	ar, _, err := s.st.AppendAsync(&m)
	if err != nil {
		return out, nil, scratch, err
	}
	line := []byte("v=1&dlq=" + strconv.FormatInt(msgID, 10) + "&new=" + strconv.FormatInt(ar.MsgID, 10))
	mark := store.Message{Topic: ResentTopic(group), Partition: 0, Data: line}
	_, flush, err := s.st.AppendAsync(&mark)
	if err != nil {
		return out, nil, scratch, err
	}
	if marks == nil { // the group's first marker
		marks = map[int64]int64{}
		s.cacheResentLocked(group, marks)
	}
	marks[msgID] = ar.MsgID
	out.AppendResult, out.Topic, out.Partition, out.NewMsgID = ar, topic, part, ar.MsgID
	return out, flush, scratch, nil
}

// maxResentGroups bounds the groups whose markers are kept in memory; a
// group evicted is read back from the log when it resends again.
const maxResentGroups = 1024

// resentLocked returns group's markers, reading them from the log once; nil
// (not cached) when the group has no marker at all.
func (s *Service) resentLocked(group string) (map[int64]int64, error) {
	if m, ok := s.resent[group]; ok {
		return m, nil
	}
	topic := ResentTopic(group)
	hi := s.st.MaxOffset(topic, 0)
	if hi == 0 {
		return nil, nil
	}
	m := map[int64]int64{}
	off := s.st.MinOffset(topic, 0)
	for off < hi {
		res, err := s.st.Read(topic, 0, off, 1<<20, nil)
		if err != nil {
			return nil, err
		}
		if res.Status != store.ReadFound {
			next := res.NextOffset
			if res.Status == store.ReadOffsetTooSmall {
				next = res.MinOffset
			}
			res.Release()
			if next <= off {
				break
			}
			off = next
			continue
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				r, size, derr := protocol.DecodeRecord(buf, 0)
				if derr != nil {
					res.Release()
					return nil, derr
				}
				buf = buf[size:]
				off = r.QueueOffset + 1
				d, ok1 := propInt(r.Data, "dlq")
				n, ok2 := propInt(r.Data, "new")
				if ok1 && ok2 {
					m[d] = n
				}
			}
		}
		res.Release()
	}
	s.cacheResentLocked(group, m)
	return m, nil
}

// cacheResentLocked keeps group's markers, evicting another group's when
// maxResentGroups are kept.
func (s *Service) cacheResentLocked(group string, m map[int64]int64) {
	if s.resent == nil {
		s.resent = map[string]map[int64]int64{}
	}
	if len(s.resent) >= maxResentGroups {
		for g := range s.resent {
			delete(s.resent, g)
			break
		}
	}
	s.resent[group] = m
}
