package protocol

// Commands of transactional messages (docs/transactions.md).

// txend <msgId> commit|rollback|unknown <opaque>: the outcome of a half
// message. The action is in Command.Key.
func (p *Parser) parseTxEnd(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpTxEnd
	if nf != 4 {
		p.wrongCount(line, nf, "txend <msgId> commit|rollback|unknown <opaque>")
		return
	}
	p.opaqueAt(line, 3)
	c.MsgID = p.num(line, 1, "msgId", 0, maxI64)
	switch a := p.f(line, 2); {
	case eqFold(a, "commit"), eqFold(a, "rollback"), eqFold(a, "unknown"):
		p.ix.key = 2
	default:
		p.bad("invalid txend action " + quoteField(a) + ": want commit, rollback or unknown")
	}
}

// producer <group> <opaque>: the connection is a live producer of group (it
// may receive `check` requests for the group's half messages).
func (p *Parser) parseProducer(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpProducer
	if nf != 3 {
		p.wrongCount(line, nf, "producer <group> <opaque>")
		return
	}
	p.opaqueAt(line, 2)
	p.ix.group = p.nameAt(line, 1, "group")
}

// parseCheckLine parses the broker's `check <msgId> <opaque>` request as
// seen by a client's reply reader: Body is the id (decimal, a copy; read it
// with ParseInt).
func parseCheckLine(line, id, opaque []byte) (Reply, int, error) {
	if v, ok := parseInt64(id); !ok || v < 0 {
		return Reply{}, 0, replyErr(line, "bad check message id")
	}
	op, ok := parseInt32(opaque)
	if !ok {
		return Reply{}, 0, replyErr(line, "bad opaque")
	}
	return Reply{Kind: ReplyCheck, Code: StatusSuccess, Opaque: op, Body: append([]byte(nil), id...)}, 0, nil
}
