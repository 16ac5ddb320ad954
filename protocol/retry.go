package protocol

// retry <group> <msgId> <delayLevel> <opaque> [<reason>]
//
// metaq's consumer give-back (docs/protocol.md, "retry"): the broker re-stores
// message msgId into %RETRY%<group> through the delay levels, or into
// %DLQ%<group>. delayLevel 0 lets the broker pick 3 + reconsumeTimes; a
// negative one sends the message to the dead-letter queue at once. reason is
// an optional URL-escaped text kept with the message (no spaces).
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
	c.DelayLevel = int32(p.num(line, 3, "delayLevel", -1, 1000))
	if nf == 6 {
		if b := p.f(line, 5); hasCtl(b) {
			p.bad("invalid reason: control byte")
		} else {
			p.ix.key = 5
		}
	}
}

// SystemTopicPrefix starts every system topic name (%SCHEDULE%, %RETRY%<group>,
// %DLQ%<group>, …): clients cannot put to them.
const SystemTopicPrefix = '%'

// IsSystemTopic reports whether topic is a system topic.
func IsSystemTopic[T string | []byte](topic T) bool {
	return len(topic) > 0 && topic[0] == SystemTopicPrefix
}
