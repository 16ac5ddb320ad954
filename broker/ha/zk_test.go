package ha_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A slave without masterAddr finds its master through ZooKeeper
// (/brokers/ids/<id>/master), registers MetaQ's slave nodes
// (ids/<id>/slave<k>, topics/<topic>/<id>-s<k>, never topics-pub) and
// follows; a fenced master answers puts 503 with the reason.
func TestSlaveFindsMasterInZooKeeper(t *testing.T) {
	zkAddr := zktest.Server(t)
	m := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 3})
	s := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 3, ExtraINI: "\n[slave]\nslaveId=1\n"})
	c := m.Dial()
	defer c.Close()
	c.Put("test", 2, "through zookeeper", 1)
	waitFor(t, "the slave caught up", func() bool { return s.Store.FlushedPos() == m.Store.VisiblePos() })

	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	get := func(p string) string {
		d, _, err := zc.Get(context.Background(), p)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(d)
	}
	sport := strconv.Itoa(s.Server.Port())
	waitFor(t, "slave nodes", func() bool {
		return get("/meta/brokers/ids/3/slave1") == "meta://127.0.0.1:"+sport && get("/meta/brokers/topics/test/3-s1") == "4"
	})
	if v := get("/meta/brokers/topics-pub/test/3-s1"); v[0] != '<' {
		t.Fatalf("a slave registered in topics-pub: %q", v)
	}

	m.HA.Fence("lost the ZooKeeper session (test)")
	c.Send("put test 0 1 0 9\r\nx")
	if r := c.Reply(); r.Code != 503 {
		t.Fatalf("put to a fenced master: %d %s", r.Code, r.Body)
	}
}
