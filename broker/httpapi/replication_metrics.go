package httpapi

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaqgo/metaq/broker"
)

// Replication metrics (docs/replication.md, docs/observability.md): on a
// master one series per slave it has seen, on a slave its own link.
var (
	dReplLagBytes = desc("metaq_replication_slave_lag_bytes", "Commit-log bytes a slave has not confirmed durable (master: per slave; slave: its own).", "slave")
	dReplLagSec   = desc("metaq_replication_slave_lag_seconds", "How long the oldest byte a slave has not confirmed has waited.", "slave")
	dReplInSync   = desc("metaq_replication_slave_in_sync", "1 while the slave is within slaveMaxDelayInMills of its master.", "slave")
	dReplMaster   = desc("metaq_replication_is_master", "1 on the master of the broker group, 0 on a slave.")
	dReplEpoch    = desc("metaq_replication_epoch", "Epoch this node serves under (0: never elected).")
)

type replicationCollector struct{ b *broker.Broker }

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dReplLagBytes, dReplLagSec, dReplInSync, dReplMaster, dReplEpoch} {
		ch <- d
	}
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.b.HA
	if n == nil {
		return
	}
	gauge(ch, dReplEpoch, float64(n.Epoch()))
	if f, ok := n.Follower(); ok {
		gauge(ch, dReplMaster, 0)
		k := strconv.Itoa(n.SlaveID())
		gauge(ch, dReplLagBytes, float64(f.LagBytes), k)
		gauge(ch, dReplLagSec, f.Lag.Seconds(), k)
		gauge(ch, dReplInSync, b2f(f.InSync), k)
		return
	}
	gauge(ch, dReplMaster, 1)
	for _, r := range n.Replicas() {
		k := strconv.Itoa(r.SlaveID)
		gauge(ch, dReplLagBytes, float64(r.LagBytes), k)
		gauge(ch, dReplLagSec, r.Lag.Seconds(), k)
		gauge(ch, dReplInSync, b2f(r.InSync), k)
	}
}
