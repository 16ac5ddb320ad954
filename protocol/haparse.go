package protocol

// replicate <brokerId> <slaveId> <position> <epoch> <opaque>: a slave asks
// its master for the commit log from position; after a `result 200` the
// connection carries replication frames (docs/replication.md, "The link").
// Fields: MaxNum = brokerId, Partition = slaveId, Offset = position,
// Timestamp = epoch.
func (p *Parser) parseReplicate(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpReplicate
	if nf != 6 {
		p.wrongCount(line, nf, "replicate <brokerId> <slaveId> <position> <epoch> <opaque>")
		return
	}
	p.opaqueAt(line, 5)
	c.MaxNum = int32(p.num(line, 1, "brokerId", 0, maxI32))
	c.Partition = int32(p.num(line, 2, "slaveId", 0, maxI32))
	c.Offset = p.num(line, 3, "position", 0, maxI64)
	c.Timestamp = p.num(line, 4, "epoch", 0, maxI64)
}
