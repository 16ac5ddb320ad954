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

// The broker registers itself and its topics exactly as DESIGN §5, a
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
