package ha_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// rawLink opens a replication link by hand and returns the connection
// after the handshake's reply line.
func rawLink(t *testing.T, addr string, slaveID int, pos, epoch int64) (net.Conn, string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(nc, "replicate 0 %d %d %d 1\r\n", slaveID, pos, epoch)
	br := bufio.NewReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return nc, strings.TrimSpace(line)
}

// The master keeps one replica record per slave id, shared by every link of
// that id (node.go replicas, stream.go ServeLink). A slave that reconnects
// before the master noticed that its previous link died (a half-open TCP
// connection after a partition) gets a new link that replaces the old one:
// the old link's teardown must not mark the live slave disconnected (with
// syncReplicas=1 every put would be answered 503 for as long as the new
// link lasts).
func TestStaleLinkTeardownKeepsLiveSlave(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true,
		ExtraINI: "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=1000\n"})
	// The old link of slave 0, still open on the master.
	old, line := rawLink(t, master.Addr, 0, 0, 0)
	if !strings.HasPrefix(line, "result 200") {
		t.Fatalf("old link: %s", line)
	}
	// Slave 0 reconnects (a real follower).
	slave := brokertest.RunBroker(t, brokertest.Options{Sync: true, ExtraINI: slaveINI(0, master.Addr, "")})
	c := master.Dial()
	defer c.Close()
	waitFor(t, "a replicated put", func() bool {
		c.Send("put test 0 2 0 1\r\nhi")
		return c.Reply().Code == 200
	})
	// Now the master notices that the old link is gone.
	old.Close()
	time.Sleep(300 * time.Millisecond)
	if !slave.HA.InSync() {
		t.Log("the slave says it is not in sync")
	}
	for _, ri := range master.HA.Replicas() {
		t.Logf("replica %+v", ri)
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		c.Send(fmt.Sprintf("put test 0 1 0 %d\r\nz", 10+i))
		if r := c.Reply(); r.Code != 200 {
			rs := master.HA.Replicas()
			t.Fatalf("put %d with slave 0 linked, acking and in sync (durable %d, master visible %d): %d %s; master's view %+v",
				i, slave.Store.FlushedPos(), master.Store.VisiblePos(), r.Code, r.Body, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
