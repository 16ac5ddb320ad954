package broker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// The broker registers itself and its topics exactly as docs/zookeeper.md
// ("The layout") says, a
// wildcard topic on its first put, and unregisters on shutdown.
func TestZooKeeperRegistration(t *testing.T) {
	zkAddr := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{
		ZK:       zkAddr,
		BrokerID: 7,
		Topics:   map[string]int{"orders": 3, "log-*": 2},
	})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	ctx := context.Background()
	get := func(path string) string {
		data, _, err := zc.Get(ctx, path)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(data)
	}
	port := strconv.Itoa(b.Server.Port())
	want := map[string]string{
		"/meta/brokers/ids/7/master":          "meta://127.0.0.1:" + port,
		"/meta/brokers/topics/orders/7-m":     "3",
		"/meta/brokers/topics-pub/orders/7-m": `{"numParts":3,"broker":"7-m"}`,
		"/meta/brokers/topics-sub/orders/7-m": `{"numParts":3,"broker":"7-m"}`,
	}
	zktest.Eventually(t, 10*time.Second, func() bool {
		for p, v := range want {
			if get(p) != v {
				return false
			}
		}
		return true
	}, "broker registration")
	// A topic accepted through a wildcard appears on its first put.
	if got := get("/meta/brokers/topics/log-app/7-m"); got != "<zk: node does not exist>" {
		t.Fatalf("log-app registered before any put: %q", got)
	}
	c := b.Dial()
	c.Put("log-app", 1, "line", 1)
	zktest.Eventually(t, 10*time.Second, func() bool {
		return get("/meta/brokers/topics-pub/log-app/7-m") == `{"numParts":2,"broker":"7-m"}` &&
			get("/meta/brokers/topics/log-app/7-m") == "2"
	}, "wildcard topic registration")
	// Shutdown unregisters.
	b.Stop()
	for p := range want {
		if ok, _ := zc.Exists(ctx, p); ok {
			t.Fatalf("%s still exists after shutdown", p)
		}
	}
}

func masterPath(id int) string { return "/meta/brokers/ids/" + strconv.Itoa(id) + "/master" }

// After a forced session expiry the broker's nodes are back within seconds.
func TestZooKeeperSessionExpiry(t *testing.T) {
	zkAddr := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 3})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	exists := func(p string) bool { ok, _ := zc.Exists(context.Background(), p); return ok }
	zktest.Eventually(t, 10*time.Second, func() bool {
		return exists(masterPath(3)) && exists("/meta/brokers/topics-pub/test/3-m")
	}, "registration")
	old := b.ZK().SessionID()
	zktest.ExpireSession(t, b.ZK())
	zktest.Eventually(t, 15*time.Second, func() bool {
		return b.ZK().SessionID() != old && exists(masterPath(3)) && exists("/meta/brokers/topics-pub/test/3-m")
	}, "re-registration after session expiry")
}

// ZooKeeper restarting under a running broker: clients keep being served,
// and the registration comes back when ZooKeeper does.
func TestZooKeeperRestartWhileServing(t *testing.T) {
	zk := zktest.StartZooKeeper(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zk.Addr(), BrokerID: 4})
	check := func() bool {
		zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zk.Addr(), ConnectionTimeout: 5 * time.Second})
		if err != nil {
			return false
		}
		defer zc.Close()
		ok, _ := zc.Exists(context.Background(), masterPath(4))
		return ok
	}
	zktest.Eventually(t, 15*time.Second, check, "registration")
	c := b.Dial()
	c.Put("test", 0, "before", 1)
	zk.Stop(t)
	// ZooKeeper is gone: puts and gets still work.
	c.Put("test", 0, "during", 2)
	c.Send("get test g 0 0 65536 3\r\n")
	if recs := brokertest.Records(t, c.Reply().Body); len(recs) != 2 {
		t.Fatalf("got %d records while ZooKeeper is down", len(recs))
	}
	zk.Start(t)
	zktest.Eventually(t, 30*time.Second, check, "re-registration after ZooKeeper restart")
	c.Put("test", 0, "after", 4)
}

// A broker restarted while its previous session's node still exists waits
// for it to go away instead of failing, and serves meanwhile.
func TestZooKeeperStaleNodeRestart(t *testing.T) {
	zkAddr := zktest.Server(t)
	stale, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.EnsurePath(context.Background(), "/meta/brokers/ids/5"); err != nil {
		t.Fatal(err)
	}
	if err := stale.CreateEphemeral(context.Background(), masterPath(5), []byte("meta://127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 5})
	b.Dial().Put("test", 0, "serving while waiting", 1)
	stale.Close() // the old session ends
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	want := "meta://127.0.0.1:" + strconv.Itoa(b.Server.Port())
	zktest.Eventually(t, 20*time.Second, func() bool {
		data, _, err := zc.Get(context.Background(), masterPath(5))
		return err == nil && string(data) == want
	}, "registration after the stale node vanished")
}
