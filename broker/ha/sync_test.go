package ha_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// syncReplicas=1: every acknowledged put is durable on the slave when the
// master answers; with the slave gone, puts are answered 503 (never 200)
// after replicaTimeoutMs; a slave started again rejoins by itself and puts
// succeed again.
func TestSyncReplication(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true, ExtraINI: "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=1500\n"})
	slaveDir := t.TempDir()
	slaveOpts := brokertest.Options{Sync: true, Dir: slaveDir, ExtraINI: slaveINI(0, master.Addr, "")}
	slave := brokertest.RunBroker(t, slaveOpts)
	c := master.Dial()
	defer c.Close()

	// Wait until the slave is in sync (the first puts may be refused
	// while it connects).
	waitFor(t, "a first replicated put", func() bool {
		c.Send("put test 0 2 0 1\r\nhi")
		return c.Reply().Code == 200
	})
	for i := 0; i < 200; i++ {
		data := fmt.Sprintf("m%d", i)
		c.Send(fmt.Sprintf("put test %d %d 0 %d\r\n%s", i%4, len(data), i, data))
		r := c.Reply()
		if r.Code != 200 {
			t.Fatalf("put %d: %d %s", i, r.Code, r.Body)
		}
		// Acknowledged: the slave has it durably.
		var id int64
		fmt.Sscan(strings.Fields(string(r.Body))[0], &id)
		if end := slave.Store.FlushedPos(); end <= id&(1<<48-1) {
			t.Fatalf("put %d acknowledged at %d but the slave is durable only to %d", i, id&(1<<48-1), end)
		}
	}

	slave.Stop()
	waitFor(t, "puts refused once the slave is gone", func() bool {
		c.Send("put test 0 1 0 5\r\nx")
		r := c.Reply()
		if r.Code == 200 {
			t.Fatalf("a put acknowledged with no slave to confirm it: %s", r.Body)
		}
		return r.Code == 503
	})
	slave = brokertest.RunBroker(t, slaveOpts)
	waitFor(t, "puts accepted after the slave rejoined", func() bool {
		c.Send("put test 0 1 0 6\r\ny")
		return c.Reply().Code == 200
	})
}
