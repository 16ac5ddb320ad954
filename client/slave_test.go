package client

import (
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A consumer reads from the slave while its broker's master is gone and
// from the master again once it is back, each message once.
func TestConsumerSlaveFallback(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	master := cl.brokers[1]
	slave := brokertest.RunBroker(t, brokertest.Options{ZK: cl.zk, BrokerID: 1, Topics: cl.topics,
		Logger: testLogger().With("broker", "1-s0"), ExtraINI: "\n[slave]\nslaveId=0\n"})
	p := cl.producer()
	sendN(t, p, "orders", "a", 20)
	admin, err := NewAdmin(Config{ZKConnect: cl.zk, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	zktest.Eventually(t, 15*time.Second, func() bool {
		n := int64(0)
		for part := range 2 {
			o, err := admin.MaxOffset(ctxT(t, 5*time.Second), slave.Addr, "orders", part)
			if err != nil {
				return false
			}
			n += o
		}
		return n == 20
	}, "the slave serves the 20 messages")

	col0, col := newCollector(), newCollector()
	c0 := cl.consumer("g0", "orders", "*", col0.handler) // reads from the master, then the slave
	col0.waitDistinct(t, 20, 20*time.Second)
	master.Stop()
	c := cl.consumer("g", "orders", "*", col.handler)
	col.waitDistinct(t, 20, 20*time.Second) // from the slave
	keys := []partKey{{"orders", Partition{BrokerID: 1, Partition: 0}}, {"orders", Partition{BrokerID: 1, Partition: 1}}}
	for _, k := range keys {
		zktest.Eventually(t, 10*time.Second, func() bool { return c0.addrOf(k) == slave.Addr }, "c0 on the slave")
		if a := c.addrOf(k); a != slave.Addr {
			t.Fatalf("%s read from %q, not the slave %s", k.p, a, slave.Addr)
		}
	}

	m2 := cl.start(1, func(o *brokertest.Options) { o.Dir = master.Dir })
	zktest.Eventually(t, 15*time.Second, func() bool {
		return c.addrOf(keys[0]) == m2.Addr && c.addrOf(keys[1]) == m2.Addr &&
			c0.addrOf(keys[0]) == m2.Addr && c0.addrOf(keys[1]) == m2.Addr
	}, "back on the master")
	sendN(t, p, "orders", "b", 20)
	col.waitDistinct(t, 40, 20*time.Second)
	col0.waitDistinct(t, 40, 20*time.Second)
	for _, g := range []string{"g0", "g"} {
		zktest.Eventually(t, 10*time.Second, func() bool {
			sum := int64(0)
			for _, o := range cl.committed(g, "orders") {
				sum += o.Offset
			}
			return sum == 40
		}, "%s committed 40", g)
	}
	for _, cc := range []*collector{col0, col} {
		if cc.count() != cc.distinct() {
			t.Fatalf("%d deliveries of %d messages", cc.count(), cc.distinct())
		}
	}
}
