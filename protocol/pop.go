package protocol

import (
	"bytes"
	"strconv"
)

// Broker-managed delivery commands (docs/push.md, docs/protocol.md).

// Limits of pop.
const (
	PopMaxCount     = 1024
	PopMinInvisible = 100
	PopMaxInvisible = 12 * 3600 * 1000
)

// pop <topic> <group> <max> <invisibleMs> <maxWaitMs> <opaque> [<tags> [<where>]]
func (p *Parser) parsePop(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpPop
	if nf < 7 || nf > 9 {
		p.wrongCount(line, nf, "pop <topic> <group> <max> <invisibleMs> <maxWaitMs> <opaque> [<tags> [<where>]]")
		return
	}
	p.opaqueAt(line, 6)
	p.ix.topic = p.nameAt(line, 1, "topic")
	p.ix.group = p.nameAt(line, 2, "group")
	c.Count = int32(p.num(line, 3, "max", 1, PopMaxCount))
	c.Millis = p.num(line, 4, "invisibleMs", PopMinInvisible, PopMaxInvisible)
	c.MaxWaitMs = p.num(line, 5, "maxWaitMs", 0, maxI32)
	if nf >= 8 {
		p.ix.tags = 7
	}
	if nf == 9 {
		p.ix.where = 8
	}
}

// parseFinish parses the four commands that end or change a delivery:
//
//	ack     <group> <handle>|<len> <opaque>
//	reject  <group> <handle>|<len> <opaque>
//	release <group> <delayMs> <handle>|<len> <opaque>
//	extend  <group> <invisibleMs> <handle>|<len> <opaque>
//
// A handle always holds ':'; a decimal number in its place is the length of
// a data block that follows the line, holding handles separated by spaces
// or line breaks (many in one command).
func (p *Parser) parseFinish(line []byte, nf int, name []byte) (lineAction, error) {
	c := &p.cmd
	want, usage := 4, ""
	switch {
	case eqFold(name, "ack"):
		c.Op, usage = OpAck, "ack <group> <handle>|<len> <opaque>"
	case eqFold(name, "reject"):
		c.Op, usage = OpReject, "reject <group> <handle>|<len> <opaque>"
	case eqFold(name, "release"):
		c.Op, want, usage = OpRelease, 5, "release <group> <delayMs> <handle>|<len> <opaque>"
	default:
		c.Op, want, usage = OpExtend, 5, "extend <group> <invisibleMs> <handle>|<len> <opaque>"
	}
	if nf != want {
		// A wrong count with a length where the handle would be still
		// announces data: skip it so the stream stays framed.
		if nf >= want-1 && nf <= MaxFields {
			if n, ok := parseInt64(p.f(line, want-2)); ok && n >= 0 && n <= int64(p.maxMessageSize()) {
				p.dataLen = int(n)
				p.wrongCount(line, nf, usage)
				return actData, nil
			}
		}
		p.wrongCount(line, nf, usage)
		return actDeliver, nil
	}
	p.opaqueAt(line, want-1)
	p.ix.group = p.nameAt(line, 1, "group")
	if want == 5 {
		lo := int64(0)
		if c.Op == OpExtend {
			lo = PopMinInvisible
		}
		c.Millis = p.num(line, 2, "milliseconds", lo, PopMaxInvisible)
	}
	h := p.f(line, want-2)
	if bytes.IndexByte(h, ':') >= 0 {
		p.ix.key = uint8(want - 2)
		return actDeliver, nil
	}
	n, ok := parseInt64(h)
	if !ok || n < 0 {
		p.bad("invalid handle " + quoteField(h) + ": want <topic>:<partition>:<offset>:<attempt> or a data length")
		return actDeliver, nil
	}
	if max := p.maxMessageSize(); n > int64(max) {
		return 0, p.fatal("data length "+strconv.FormatInt(n, 10)+" exceeds maxMessageSize "+strconv.Itoa(max), c.Opaque, c.HasOpaque)
	}
	p.dataLen = int(n)
	return actData, nil
}

// NextHandle splits the next handle off a handle list (spaces, tabs, CR
// and LF separate them); ok is false at the end.
func NextHandle(list []byte) (h, rest []byte, ok bool) {
	i := 0
	for i < len(list) && isSep(list[i]) {
		i++
	}
	if i == len(list) {
		return nil, nil, false
	}
	j := i
	for j < len(list) && !isSep(list[j]) {
		j++
	}
	return list[i:j], list[j:], true
}

func isSep(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// AppendPop encodes a pop request.
func AppendPop(dst []byte, topic, group string, max int, invisibleMs, maxWaitMs int64, opaque int32, tags, whereEscaped string) []byte {
	dst = append(dst, "pop "...)
	dst = append(dst, topic...)
	dst = append(dst, ' ')
	dst = append(dst, group...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(max), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, invisibleMs, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, maxWaitMs, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	if tags != "" || whereEscaped != "" {
		if tags == "" {
			tags = "*"
		}
		dst = append(dst, ' ')
		dst = append(dst, tags...)
		if whereEscaped != "" {
			dst = append(dst, ' ')
			dst = append(dst, whereEscaped...)
		}
	}
	return append(dst, "\r\n"...)
}

// AppendFinish encodes ack, release, reject or extend (op) of the handles
// (each `<topic>:<partition>:<offset>:<attempt>`, joined by spaces) with a
// data block; millis is the delay (release) or invisibility (extend).
func AppendFinish(dst []byte, op Op, group string, millis int64, handles []byte, opaque int32) []byte {
	dst = append(dst, op.String()...)
	dst = append(dst, ' ')
	dst = append(dst, group...)
	if op == OpRelease || op == OpExtend {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, millis, 10)
	}
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(handles)), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	dst = append(dst, "\r\n"...)
	return append(dst, handles...)
}

// PopValue walks the body of a pop reply: a run of deliveries, each a
// 4-byte big-endian attempt followed by one record (docs/protocol.md). fn
// gets the attempt and the record; an error stops the walk.
func PopValue(body []byte, fn func(attempt int, rec []byte) error) error {
	for len(body) > 0 {
		if len(body) < 4+RecordOverhead {
			return errShortPop
		}
		attempt := int(be32(body))
		n := int(be32(body[4:]))
		if n < RecordOverhead || 4+n > len(body) {
			return errShortPop
		}
		if err := fn(attempt, body[4:4+n]); err != nil {
			return err
		}
		body = body[4+n:]
	}
	return nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

var errShortPop = &Error{Code: StatusBadRequest, Msg: "truncated pop reply"}
