package ha_test

import (
	"bufio"
	"encoding/binary"
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

func sendAck(nc net.Conn, pos int64) error {
	var b [16]byte
	b[0] = 'A'
	binary.BigEndian.PutUint64(b[8:], uint64(pos))
	_, err := nc.Write(b[:])
	return err
}

// The position a slave sends in `replicate` is a claim, not a durable ack:
// a new link counts toward syncReplicas only from its first ack
// (replica.confirmed). Counted at once, a link that never acks would
// release a held round with 200 although no slave holds it durably (as
// would a follower that sent its unsynced write position after a failed
// fdatasync). Once the link acks the round's end, the round is released.
func TestHandshakePositionIsNotADurableAck(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true,
		ExtraINI: "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=600000\n"})
	// A first link makes the master write its epoch record (epoch 1).
	l1, line := rawLink(t, master.Addr, 0, 0, 0)
	if !strings.HasPrefix(line, "result 200") {
		t.Fatalf("first link: %s", line)
	}
	l1.Close()
	waitFor(t, "link 1 gone", func() bool {
		rs := master.HA.Replicas()
		return len(rs) == 1 && !rs[0].Connected
	})
	c := master.Dial()
	defer c.Close()
	before := master.Store.WrittenPos()
	c.Send("put test 0 4 0 1\r\nheld")
	waitFor(t, "the held put durable on the master", func() bool {
		return master.Store.FlushedPos() == master.Store.WrittenPos() && master.Store.WrittenPos() > before
	})
	if r, err := c.TryReply(300 * time.Millisecond); err == nil {
		t.Fatalf("setup: the put was answered with no slave: %d %s", r.Code, r.Body)
	}
	w := master.Store.WrittenPos()
	l2, line := rawLink(t, master.Addr, 0, w, 1)
	defer l2.Close()
	if !strings.HasPrefix(line, "result 200") {
		t.Fatalf("second link: %s", line)
	}
	// No ack sent on l2 yet.
	if r, err := c.TryReply(2 * time.Second); err == nil {
		t.Fatalf("the held put was answered %d %s although no slave ever acked it durable", r.Code, r.Body)
	}
	if err := sendAck(l2, w); err != nil {
		t.Fatal(err)
	}
	if r, err := c.TryReply(5 * time.Second); err != nil || r.Code != 200 {
		t.Fatalf("after an ack of its end the held put: %+v %v, want 200", r, err)
	}
}
