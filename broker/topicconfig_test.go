package broker_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// onlineTopics connects to the ZooKeeper of a test broker and returns a
// function writing /meta/config/topics/<topic> (docs/zookeeper.md, "Online
// topic configuration").
func onlineTopics(t *testing.T, zkAddr string) (*zkmeta.Client, func(topic, data string)) {
	t.Helper()
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	return zc, func(topic, data string) {
		t.Helper()
		p := zc.Paths().ConfigTopics() + "/" + topic
		if err := zc.EnsurePath(context.Background(), zc.Paths().ConfigTopics()); err != nil {
			t.Fatal(err)
		}
		if err := zc.Put(context.Background(), p, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
}

// putCode is the code of a one-byte put.
func putCode(c *brokertest.Client, topic string, partition int) int {
	c.Send("put " + topic + " " + itoa(partition) + " 1 0 1\r\nx")
	return c.Reply().Code
}

func itoa(n int) string { return strconv.Itoa(n) }

// docs/zookeeper.md: "a node with bad JSON or values out of range is
// ignored (logged); the previous state stays". A topic whose node was
// overwritten with something that does not parse kept being accepted and
// registered with its previous configuration, not dropped.
func TestOnlineTopicBadNodeKeepsPreviousState(t *testing.T) {
	zkAddr := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 1, Topics: map[string]int{"test": 1}})
	zc, write := onlineTopics(t, zkAddr)
	c := b.Dial()
	exists := func(p string) bool { ok, _ := zc.Exists(context.Background(), p); return ok }
	pub := zc.Paths().TopicPubNode("flow", 1, -1)

	write("flow", `{"numPartitions":2}`)
	zktest.Eventually(t, 20*time.Second, func() bool { return exists(pub) && putCode(c, "flow", 1) == 200 },
		"flow accepted and registered")

	for i, bad := range []string{`{"numPartitions":`, `{"numPartitions":0}`, `{"partitions":3}`} {
		write("flow", bad)
		// A marker topic written after the bad node: once it is accepted the
		// broker has applied a state that includes the bad node.
		marker := "marker" + itoa(i)
		write(marker, `{}`)
		zktest.Eventually(t, 20*time.Second, func() bool { return putCode(c, marker, 0) == 200 }, "%s accepted", marker)
		if code := putCode(c, "flow", 1); code != 200 {
			t.Fatalf("after %s: put to flow partition 1 answered %d, want 200 (the previous configuration stays)", bad, code)
		}
		if !exists(pub) {
			t.Fatalf("after %s: flow unregistered", bad)
		}
	}
	// A good value applies again.
	write("flow", `{"numPartitions":1}`)
	zktest.Eventually(t, 20*time.Second, func() bool { return putCode(c, "flow", 1) == 500 && putCode(c, "flow", 0) == 200 },
		"flow back to 1 partition")
}

// A reload applies the topic sections only (docs/configuration.md,
// "Reloading"), but they inherit [system]: a file whose [system] also
// changed (acceptPublish=false, meant for the next restart) made every
// topic without its own acceptPublish refuse puts at once, while the log
// said nothing was applied outside the topic sections. Such a reload is
// refused, naming the keys, and changes nothing.
func TestReloadRefusesStaticChanges(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	ini, err := os.ReadFile(b.Config.Path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(ini), "[system]\n", "[system]\nacceptPublish=false\nmaxConnections=7\n", 1) + "\n[topic=added]\n"
	if err := os.WriteFile(b.Config.Path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	err = b.ReloadTopics()
	if err == nil || !strings.Contains(err.Error(), "[system] acceptPublish") || !strings.Contains(err.Error(), "[system] maxConnections") {
		t.Fatalf("reload with [system] changes: %v, want a refusal naming acceptPublish and maxConnections", err)
	}
	if code := putCode(c, "test", 0); code != 200 {
		t.Fatalf("put to test after the refused reload: %d, want 200", code)
	}
	if code := putCode(c, "added", 0); code != 500 {
		t.Fatalf("put to added after the refused reload: %d, want 500 (nothing applied)", code)
	}
	// With [system] as it runs, the topic sections apply.
	if err := os.WriteFile(b.Config.Path, []byte(string(ini)+"\n[topic=added]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadTopics(); err != nil {
		t.Fatal(err)
	}
	if code := putCode(c, "added", 0); code != 200 {
		t.Fatalf("put to added after the reload: %d, want 200", code)
	}
}

// An online configuration change made while the broker is away from
// ZooKeeper (ZooKeeper restarted; then its session expired) is applied
// once it is back: the watch is re-armed and everything re-read
// (docs/zookeeper.md, "Online topic configuration").
func TestOnlineTopicChangeWhileAway(t *testing.T) {
	zk := zktest.StartZooKeeper(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zk.Addr(), BrokerID: 1, Topics: map[string]int{"test": 1}})
	c := b.Dial()
	_, write := onlineTopics(t, zk.Addr())
	write("flow", `{"numPartitions":1}`)
	zktest.Eventually(t, 20*time.Second, func() bool { return putCode(c, "flow", 0) == 200 }, "flow accepted")

	zk.Stop(t)
	zktest.Eventually(t, 20*time.Second, func() bool { return !b.ZK().Connected() }, "broker disconnected")
	zk.Start(t)
	_, write = onlineTopics(t, zk.Addr()) // a new session: the broker may not be back yet
	write("flow", `{"numPartitions":3}`)
	zktest.Eventually(t, 30*time.Second, func() bool { return putCode(c, "flow", 2) == 200 }, "3 partitions after ZooKeeper came back")

	old := b.ZK().SessionID()
	zktest.ExpireSession(t, b.ZK())
	write("flow", `{"numPartitions":2}`)
	zktest.Eventually(t, 30*time.Second, func() bool {
		return b.ZK().SessionID() != old && putCode(c, "flow", 2) == 500 && putCode(c, "flow", 1) == 200
	}, "2 partitions after the session expiry")
}
