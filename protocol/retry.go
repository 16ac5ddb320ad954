package protocol

import "strconv"

// retry <group> <msgId> <delayLevel> <opaque> [<reason>]
//
// metaq's consumer give-back (docs/protocol.md, "retry"): the broker re-stores
// message msgId into %RETRY%<group> through the delay levels, or into
// %DLQ%<group>. delayLevel 0 lets the broker pick 3 + reconsumeTimes; a
// negative one sends the message to the dead-letter queue at once. reason is
// an optional URL-escaped text kept with the message (no spaces).
// delayLevel -2 (ResendDeadLetter) resends the dead letter msgId of
// %DLQ%<group> to its original topic, once (docs/delay.md).
func (p *Parser) parseRetry(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpRetry
	if nf != 5 && nf != 6 {
		p.wrongCount(line, nf, "retry <group> <msgId> <delayLevel> <opaque> [<reason>]")
		return
	}
	p.opaqueAt(line, 4)
	p.ix.group = p.nameAt(line, 1, "group")
	c.MsgID = p.num(line, 2, "msgId", 0, maxI64)
	c.DelayLevel = int32(p.num(line, 3, "delayLevel", ResendDeadLetter, 1000))
	if nf == 6 {
		if b := p.f(line, 5); hasCtl(b) {
			p.bad("invalid reason: control byte")
		} else {
			p.ix.key = 5
		}
	}
}

// ResendDeadLetter is the retry delayLevel that resends a dead letter.
const ResendDeadLetter = -2

// SystemTopicPrefix starts every system topic name (%SCHEDULE%, %RETRY%<group>,
// %DLQ%<group>, …): clients cannot put to them.
const SystemTopicPrefix = '%'

// IsSystemTopic reports whether topic is a system topic.
func IsSystemTopic[T string | []byte](topic T) bool {
	return len(topic) > 0 && topic[0] == SystemTopicPrefix
}

// AppendRetry encodes `retry <group> <msgId> <delayLevel> <opaque> [<reason>]`;
// reason is URL-escaped here ("" sends none).
func AppendRetry(dst []byte, group string, msgID int64, delayLevel int, opaque int32, reason string) []byte {
	dst = append(dst, "retry "...)
	dst = append(dst, group...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, msgID, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(delayLevel), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	if reason != "" {
		dst = append(dst, ' ')
		dst = AppendEscaped(dst, reason)
	}
	return append(dst, '\r', '\n')
}
