package ha

// The high watermark (docs/replication.md, "Reads from a slave"). A master
// ships what it has written before it is acknowledged (before its own fsync
// in sync-flush mode, before enough slaves confirmed it under
// syncReplicas), so a slave may hold a round the master can still lose: a
// crash of the master's machine cuts it when the master restarts, a
// failover that elects another slave cuts it on its way back. A consumer
// reading it from the slave would commit an offset past the end of the
// surviving log. So the master carries the position it has acknowledged in
// the stream (the pos field of heartbeat frames, frame.go), and a slave
// serves get, offset, seek, query and the key index only below it
// (store.SetReadLimit): Kafka's high watermark.
//
// What the master has acknowledged (committedPos):
//   - with the sync gate (syncReplicas > 0, sync flush): what is durable
//     here and confirmed by syncReplicas slaves (the gate's quorum), never
//     below where this node became master (its own log up to there is the
//     history it serves);
//   - otherwise what it serves itself (VisiblePos): written (async flush) or
//     durable (sync flush); those puts were answered 200.

// committedPos is the position below which this master has acknowledged
// every record (the high watermark it ships to its slaves).
func (n *Node) committedPos() int64 {
	vis := n.st.VisiblePos()
	if !n.gated() {
		return vis
	}
	return min(vis, max(n.gate.quorum.Load(), n.commitFloor.Load()))
}

// gated: puts are acknowledged only once syncReplicas slaves confirmed them.
func (n *Node) gated() bool { return n.cfg.SyncReplicas > 0 && n.st.SyncFlush() }

// waitCommitted returns a channel closed once committedPos passes pos.
func (n *Node) waitCommitted(pos int64) <-chan struct{} {
	if !n.gated() {
		return n.st.WaitVisible(pos)
	}
	return n.commitWait.Wait(pos, n.committedPos)
}

// CommittedPos is, on a master, the position it has acknowledged (its high
// watermark); on a slave, the position below which it serves reads (its
// master's high watermark as last heard; -1: no limit).
func (n *Node) CommittedPos() int64 {
	if n.Role() == RoleMaster {
		return n.committedPos()
	}
	return n.st.ReadLimit()
}

// limitReads makes this node's store serve only what it serves now until
// its master says more is acknowledged (a node becoming a slave).
func (n *Node) limitReads() { n.st.SetReadLimit(n.st.VisiblePos()) }
