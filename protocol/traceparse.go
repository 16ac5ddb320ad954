package protocol

import "strconv"

// trace on|off <opaque> (metaq, docs/protocol.md "trace"): from now on the
// broker stores the connection's puts (put, mput, puts inside a
// transaction, half messages) with SysFlagTraced, so that it writes its own
// message-trace events for them (docs/trace.md). A traced producer sends it
// first on every connection; the reply is `result 200 0 <opaque>`.

// parseTrace parses `trace on|off <opaque>` into Count (1 = on, 0 = off).
func (p *Parser) parseTrace(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpTrace
	if nf != 3 {
		p.wrongCount(line, nf, "trace on|off <opaque>")
		return
	}
	p.opaqueAt(line, 2)
	switch v := p.f(line, 1); {
	case eqFold(v, "on"):
		c.Count = 1
	case eqFold(v, "off"):
		c.Count = 0
	default:
		p.bad("invalid trace mode " + quoteField(v) + ": want on or off")
	}
}

// AppendTrace encodes `trace on|off <opaque>\r\n`.
func AppendTrace(dst []byte, on bool, opaque int32) []byte {
	if on {
		dst = append(dst, "trace on "...)
	} else {
		dst = append(dst, "trace off "...)
	}
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	return append(dst, "\r\n"...)
}
