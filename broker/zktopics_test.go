package broker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// Issue 12.8: a broker started later with a wildcard section registers the
// topics that already exist in the cluster (and those that appear later),
// so a producer uses it at once. Before, broker 2 got 0 of the messages
// until something put to it directly.
func TestWildcardBrokerJoinsExistingTopics(t *testing.T) {
	zkAddr := zktest.Server(t)
	root := "/meta-join"
	wild := map[string]int{"*": 2}
	b1 := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 1, Topics: wild})
	b1.Dial().Put("orders", 0, "first", 1) // the topic now exists in the cluster (on broker 1)

	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	paths := zc.Paths()
	exists := func(p string) bool { ok, _ := zc.Exists(context.Background(), p); return ok }
	zktest.Eventually(t, 20*time.Second, func() bool { return exists(paths.TopicPubNode("orders", 1, -1)) },
		"orders registered by broker 1")

	b2 := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 2, Topics: wild})
	zktest.Eventually(t, 20*time.Second, func() bool {
		return exists(paths.TopicPubNode("orders", 2, -1)) && exists(paths.BrokerTopicNode("orders", 2, -1)) &&
			exists(paths.TopicSubNode("orders", 2, -1))
	}, "broker 2 registers the existing topic orders")

	// A producer (client/, through ZooKeeper) spreads over both brokers.
	p, err := client.NewProducer(client.Config{ZKConnect: zkAddr, ZKRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	zktest.Eventually(t, 20*time.Second, func() bool {
		parts, err := p.Partitions(ctx, "orders")
		return err == nil && len(parts) == 4
	}, "the producer sees 4 partitions of orders (2 brokers × 2)")
	const n = 200
	perBroker := map[int]int{}
	for i := 0; i < n; i++ {
		res, err := p.Send(ctx, &client.Message{Topic: "orders", Body: []byte("m")})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		perBroker[res.Partition.BrokerID]++
	}
	t.Logf("messages per broker: %v", perBroker)
	if perBroker[2] == 0 || perBroker[1] == 0 {
		t.Fatalf("messages per broker %v: the late broker is not used", perBroker)
	}
	var stored int64
	for part := int32(0); part < 2; part++ {
		stored += b2.Store.MaxOffset("orders", part)
	}
	if stored != int64(perBroker[2]) {
		t.Fatalf("broker 2 stored %d messages of orders, the producer sent it %d", stored, perBroker[2])
	}

	// A topic that appears later on broker 1 is registered by broker 2 too
	// (the watch is re-armed after the first change).
	b1.Dial().Put("payments", 1, "later", 2)
	zktest.Eventually(t, 20*time.Second, func() bool { return exists(paths.TopicPubNode("payments", 2, -1)) },
		"broker 2 registers the new topic payments")
	b1.Dial().Put("refunds", 1, "later still", 3)
	zktest.Eventually(t, 20*time.Second, func() bool { return exists(paths.TopicPubNode("refunds", 2, -1)) },
		"broker 2 registers the new topic refunds")
}

// A broker whose sections do not accept a topic of the cluster does not
// register it.
func TestBrokerSkipsClusterTopicsItDoesNotAccept(t *testing.T) {
	zkAddr := zktest.Server(t)
	root := "/meta-skip"
	b1 := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 1, Topics: map[string]int{"*": 1}})
	b1.Dial().Put("orders", 0, "x", 1)
	b1.Dial().Put("log-app", 0, "x", 2)
	b2 := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 2, Topics: map[string]int{"log-*": 3}})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	paths := zc.Paths()
	zktest.Eventually(t, 20*time.Second, func() bool {
		data, _, err := zc.Get(context.Background(), paths.BrokerTopicNode("log-app", 2, -1))
		return err == nil && string(data) == "3"
	}, "broker 2 registers log-app with its own partition count")
	// log-app was registered from the same list that had orders: orders is
	// not there.
	if ok, _ := zc.Exists(context.Background(), paths.BrokerTopicNode("orders", 2, -1)); ok {
		t.Fatal("broker 2 registered orders, which none of its sections accepts")
	}
	_ = b2
}

// A wildcard section added by a reload (docs/configuration.md, "Reloading")
// follows the cluster's topics as one present at start does: broker 2,
// started with exact sections only, registers the existing topic orders
// once a reload adds [topic=*]. Before, the cluster's topic list was
// followed only when server.ini had a wildcard at start.
func TestReloadedWildcardJoinsExistingTopics(t *testing.T) {
	zkAddr := zktest.Server(t)
	root := "/meta-reload"
	brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 1, Topics: map[string]int{"orders": 2}})
	b2 := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, ZKRoot: root, BrokerID: 2, Topics: map[string]int{"test": 1}})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	paths := zc.Paths()
	exists := func(p string) bool { ok, _ := zc.Exists(context.Background(), p); return ok }
	zktest.Eventually(t, 20*time.Second, func() bool {
		return exists(paths.TopicPubNode("orders", 1, -1)) && exists(paths.TopicPubNode("test", 2, -1))
	},
		"both brokers registered")
	if exists(paths.TopicPubNode("orders", 2, -1)) {
		t.Fatal("broker 2 registered orders before accepting it")
	}
	ini, err := os.ReadFile(b2.Config.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b2.Config.Path, append(ini, "\n[topic=*]\nnumPartitions=3\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b2.ReloadTopics(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, func() bool {
		data, _, err := zc.Get(context.Background(), paths.BrokerTopicNode("orders", 2, -1))
		return err == nil && string(data) == "3"
	}, "broker 2 registers orders after the reload added [topic=*]")
}
