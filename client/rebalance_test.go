package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A partition given up in a rebalance while ZooKeeper is unreachable keeps
// its owner node until the release gets through: once ZooKeeper is back
// (the session survived) the release is retried, and the new owner claims
// the partition. Before, the release failed once and the node stayed for
// the life of the session: the new owner waited for it forever and the
// partition was consumed by nobody.
func TestReleaseRetriedAfterZooKeeperOutage(t *testing.T) {
	z := zktest.StartZooKeeper(t)
	cl := &cluster{t: t, zk: z.Addr() + "/release", brokers: map[int]*brokertest.Broker{}, topics: map[string]int{"orders": 2}}
	cl.start(1)
	p := cl.producer()
	p0, p1 := Partition{BrokerID: 1, Partition: 0}, Partition{BrokerID: 1, Partition: 1}
	short := func(cfg *Config) { cfg.RequestTimeout = time.Second }

	// c1's handler holds the first message of partition 1 until its ctx is
	// cancelled (the rebalance that gives the partition to c2), then waits
	// until the test stopped ZooKeeper.
	holding := make(chan struct{})
	cancelled := make(chan struct{})
	resume := make(chan struct{})
	var held atomic.Bool
	col := newCollector()
	h1 := func(ctx context.Context, m *Message) error {
		if m.Partition == p1 && held.CompareAndSwap(false, true) {
			close(holding)
			<-ctx.Done()
			close(cancelled)
			<-resume
			return ctx.Err()
		}
		return col.handler(ctx, m)
	}
	c1 := cl.consumer("g", "orders", "*", h1, short)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 assigned both")
	if _, err := p.SendToPartition(ctxT(t, 10*time.Second), &Message{Topic: "orders", Body: []byte("held")}, p1); err != nil {
		t.Fatal(err)
	}
	<-holding

	// c2's node name sorts after c1's: it gets partition 1.
	c2 := cl.consumer("g", "orders", "*", col.handler, short)
	<-cancelled
	z.Stop(t)
	close(resume) // c1 now commits and releases partition 1 without ZooKeeper
	zktest.Eventually(t, 20*time.Second, func() bool { return len(c1.Assigned()["orders"]) == 1 }, "c1 gave partition 1 up")
	z.Start(t)

	zktest.Eventually(t, 30*time.Second, func() bool {
		a1, a2 := c1.Assigned()["orders"], c2.Assigned()["orders"]
		return len(a1) == 1 && a1[0] == p0 && len(a2) == 1 && a2[0] == p1
	}, "c2 claims partition 1 once ZooKeeper is back (c1 %v, c2 %v)", c1.Assigned(), c2.Assigned())
	col.waitDistinct(t, 1, 10*time.Second) // the held message, redelivered to c2
}
