package broker

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// The broker's side of replication (docs/replication.md): a slave refuses
// writes (403 naming the master), a fenced or under-replicated master
// answers them 503; `replicate` hands the connection over to broker/ha; the
// `stats` lines of the replication role.

// refuseWrite answers a write command (put, transaction, txend, retry) that
// this node may not take now; it reports whether it did.
func (c *conn) refuseWrite(cmd *protocol.Command) bool {
	n := c.srv.opts.HA
	if n == nil {
		return false
	}
	code, msg := n.PutRefusal()
	if code == 0 {
		return false
	}
	if cmd.Op == protocol.OpPut {
		c.srv.stats.cmdPut.Add(1)
	}
	c.srv.stats.putFailed.Add(1)
	c.rq.addResultString(code, msg, cmd.Opaque)
	return true
}

// handleReplicate hands the connection to the replication link once the
// replies queued before it are written (conn.serve).
func (c *conn) handleReplicate(cmd *protocol.Command) {
	if c.srv.opts.HA == nil {
		c.rq.addResultString(protocol.StatusServiceUnavailable, "replication is not enabled on this broker", cmd.Opaque)
		return
	}
	c.handoff = &ha.LinkRequest{BrokerID: int(cmd.MaxNum), SlaveID: int(cmd.Partition), Position: cmd.Offset,
		Epoch: cmd.Timestamp, Opaque: cmd.Opaque}
	c.handedOff.Store(true)
	c.quit = true
}

// replyFlushError is the reply to a put whose group commit failed: 503 when
// it is durable here but not replicated (the gate), else 500.
func replyFlushCode(err error) int {
	if errors.Is(err, store.ErrNotReplicated) {
		return protocol.StatusServiceUnavailable
	}
	return protocol.StatusInternalServerError
}

// appendReplicationStats adds the replication lines to `stats`.
func (s *Server) appendReplicationStats(b []byte) []byte {
	n := s.opts.HA
	if n == nil {
		return b
	}
	b = protocol.AppendStat(b, "replication_role", n.Role().String())
	b = protocol.AppendStatInt(b, "replication_epoch", n.Epoch())
	b = protocol.AppendStatInt(b, "replication_durable_position", n.DurablePos())
	// master: what it acknowledged (its high watermark); slave: below what it serves reads
	b = protocol.AppendStatInt(b, "replication_committed_position", n.CommittedPos())
	if f, ok := n.Follower(); ok {
		b = protocol.AppendStatInt(b, "replication_slave_id", int64(n.SlaveID()))
		b = protocol.AppendStat(b, "replication_master", f.Master)
		b = protocol.AppendStat(b, "replication_connected", strconv.FormatBool(f.Connected))
		b = protocol.AppendStat(b, "replication_in_sync", strconv.FormatBool(f.InSync))
		b = protocol.AppendStatInt(b, "replication_lag_bytes", f.LagBytes)
		b = protocol.AppendStatInt(b, "replication_lag_ms", f.Lag.Milliseconds())
		return b
	}
	b = protocol.AppendStat(b, "replication_in_sync", strconv.FormatBool(n.InSync()))
	for _, r := range n.Replicas() {
		k := "replication_slave" + strconv.Itoa(r.SlaveID) + "_"
		b = protocol.AppendStat(b, k+"connected", strconv.FormatBool(r.Connected))
		b = protocol.AppendStat(b, k+"in_sync", strconv.FormatBool(r.InSync))
		b = protocol.AppendStatInt(b, k+"acked_position", r.Acked)
		b = protocol.AppendStatInt(b, k+"lag_bytes", r.LagBytes)
		b = protocol.AppendStatInt(b, k+"lag_ms", r.Lag.Milliseconds())
		b = appendLatencyStats(b, k, r.Latency)
	}
	return b
}

// HA is the node's replication controller (nil when replication is off).
func (s *Server) HA() *ha.Node { return s.opts.HA }

// handOff runs after the connection's goroutines are done: the link takes
// the socket over.
func (c *conn) handOff() {
	req := c.handoff
	_ = c.nc.SetDeadline(time.Time{})
	c.srv.opts.HA.HandOff(c.nc, *req)
}

// appendLatencyStats adds a slave's replication latency (each send's write
// here → durable on the slave, docs/replication.md "The slave's lag"):
// sample count, quantiles and the histogram as "ms:count,…" for merging.
func appendLatencyStats(b []byte, k string, l ha.LagStats) []byte {
	b = protocol.AppendStatInt(b, k+"latency_samples", int64(l.Samples))
	b = protocol.AppendStatInt(b, k+"latency_p50_ms", l.P50)
	b = protocol.AppendStatInt(b, k+"latency_p99_ms", l.P99)
	b = protocol.AppendStatInt(b, k+"latency_p999_ms", l.P999)
	b = protocol.AppendStatInt(b, k+"latency_max_ms", l.Max)
	return protocol.AppendStat(b, k+"latency_hist", l.Hist)
}
