package ha_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// A put held at the sync gate (no slave confirms it; replicaTimeoutMs is far
// away) is answered 503 as soon as the master is fenced, with the fence's
// reason (ErrFenced), and the next put is refused before it is stored.
func TestSyncGateFencedAnswersHeldPuts(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true, ExtraINI: "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=600000\n"})
	c := master.Dial()
	defer c.Close()
	c.Send("put test 0 4 0 1\r\nheld")
	// The put is durable locally, so its round is at the gate (or about to
	// be: a fence before Hold fails it in Hold).
	waitFor(t, "the held put durable on the master", func() bool { return master.Store.FlushedPos() > 0 })
	master.HA.Fence("test: session lost")
	r, err := c.TryReply(60 * time.Second)
	if err != nil {
		t.Fatalf("the held put was not answered after the fence: %v", err)
	}
	if r.Code != 503 || !strings.Contains(string(r.Body), "test: session lost") {
		t.Fatalf("held put after a fence: %d %s, want 503 naming the fence", r.Code, r.Body)
	}
	c.Send("put test 0 4 0 2\r\nnext")
	if r := c.Reply(); r.Code != 503 || !strings.Contains(string(r.Body), "fenced") {
		t.Fatalf("put on a fenced master: %d %s, want 503 fenced", r.Code, r.Body)
	}
}

// A put held at the sync gate is answered 503 when the master is demoted
// (ErrNotMaster), and puts after it are refused with 403 naming the new
// master.
func TestSyncGateDemotedAnswersHeldPuts(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true, ExtraINI: "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=600000\n"})
	c := master.Dial()
	defer c.Close()
	c.Send("put test 0 4 0 1\r\nheld")
	waitFor(t, "the held put durable on the master", func() bool { return master.Store.FlushedPos() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Nobody listens there: the follower keeps retrying in the background.
	if err := master.HA.Demote(ctx, "127.0.0.1:1", 7); err != nil {
		t.Fatal(err)
	}
	r, err := c.TryReply(60 * time.Second)
	if err != nil {
		t.Fatalf("the held put was not answered after the demotion: %v", err)
	}
	if r.Code != 503 || !strings.Contains(string(r.Body), "no longer the master") {
		t.Fatalf("held put after a demotion: %d %s, want 503 no longer the master", r.Code, r.Body)
	}
	c.Send("put test 0 4 0 2\r\nnext")
	if r := c.Reply(); r.Code != 403 || !strings.Contains(string(r.Body), "127.0.0.1:1") {
		t.Fatalf("put on a demoted master: %d %s, want 403 naming the master", r.Code, r.Body)
	}
}
