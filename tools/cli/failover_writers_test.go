package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// What a promoted slave starts (docs/replication.md, "What a promoted slave starts"): real
// broker processes, a real ZooKeeper, kill -9.

// wrPut puts one message (props: URL query string, "" none) and returns the reply.
func wrPut(c *brokertest.Client, topic string, part int, props, data string, opaque int32) protocol.Reply {
	body, flag := data, int32(0)
	if props != "" {
		body, flag = props+"\n"+data, protocol.FlagHasProperties
	}
	c.Send(fmt.Sprintf("put %s %d %d %d %d\r\n%s", topic, part, len(body), flag, opaque, body))
	r, err := c.TryReply(30 * time.Second)
	if err != nil {
		return protocol.Reply{Code: -1, Body: []byte(err.Error())}
	}
	return r
}

// wrPop pops up to max messages of group g (invisible for invMs) and returns data → handle.
func wrPop(t *testing.T, c *brokertest.Client, topic, g string, max int, invMs int) (map[string]string, protocol.Reply) {
	t.Helper()
	c.Send(fmt.Sprintf("pop %s %s %d %d 0 11\r\n", topic, g, max, invMs))
	r, err := c.TryReply(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	if r.Kind != protocol.ReplyValue {
		return out, r
	}
	if err := protocol.PopValue(r.Body, func(attempt int, rec []byte) error {
		m, _, err := protocol.DecodeRecord(rec, 0)
		if err != nil {
			return err
		}
		out[string(m.Data)] = fmt.Sprintf("%s:%d:%d:%d", topic, m.Partition, m.QueueOffset, attempt)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out, r
}

// wrPopAll pops until it has want messages or a pop comes back empty twice in a row.
func wrPopAll(t *testing.T, c *brokertest.Client, topic, g string, want int) map[string]string {
	t.Helper()
	got := map[string]string{}
	empty := 0
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < want && empty < 2 && time.Now().Before(deadline) {
		m, r := wrPop(t, c, topic, g, want, 600000)
		if r.Kind != protocol.ReplyValue && r.Code != 404 {
			t.Fatalf("pop on %s: %d %s", c.Conn.RemoteAddr(), r.Code, r.Body)
		}
		if len(m) == 0 {
			empty++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		empty = 0
		for k, v := range m {
			got[k] = v
		}
	}
	return got
}

// servesAsMaster reports whether the broker at addr has finished its promotion (stats
// replication_role): the election's master node exists a moment before.
func (c *foCluster) servesAsMaster(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.adm.Stats(ctx, addr, "")
	if err != nil {
		return false
	}
	for _, s := range st {
		if s.Key == "replication_role" {
			return s.Value == "master"
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestFailoverPromotedStartsWriters: a half message sent to the master and messages delivered
// (pop) but not acknowledged there are in the replicated log when the master is killed. The
// slave promoted in its place rebuilds its transaction table and starts the delivery service
// from those records, without a restart: it checks the half message back with a producer of its
// group, and delivers again exactly the unacknowledged messages. Then a planned switch back
// (`metaq broker promote 1 m`) demotes that node without a restart (it refuses pop again) and
// promotes the old master, restarted as a slave meanwhile, which does the same from its copy.
func TestFailoverPromotedStartsWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level fault test")
	}
	zk := zktest.StartZooKeeper(t)
	zkConnect := zk.Addr() + foChroot
	c := &foCluster{t: t, fails: map[string]int{}}
	for _, sid := range []int{-1, 0} {
		dir := t.TempDir()
		ini, addr := writeFailoverINI(t, dir, sid, zkConnect)
		b, err := os.ReadFile(ini)
		if err != nil {
			t.Fatal(err)
		}
		// Checks every 200 ms, never rolled back by the count in this test.
		s := strings.Replace(string(b), "[system]\n", "[system]\ntransactionCheckInterval=200\ntransactionCheckMax=100000\n", 1)
		if err := os.WriteFile(ini, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		n := &foNode{t: t, slaveID: sid, dir: dir, ini: ini, addr: addr}
		n.start()
		c.nodes = append(c.nodes, n)
	}
	c.attach(zkConnect)
	g, _ := c.waitGroupComplete(0)
	m, s0 := c.nodes[0], c.nodes[1]
	if g.Master != m.addr {
		t.Fatalf("the configured master did not win the first election: %+v", g)
	}

	// On the master: a half message (nobody answers its checks: its producer is gone), ten
	// messages, all ten delivered to group g, four of them acknowledged.
	mc := brokertest.Dial(t, m.addr)
	hr := wrPut(mc, foTopic, 0, "tx=half&pgroup=orders", "half-1", 1)
	if hr.Code != 200 {
		t.Fatalf("half put: %d %s", hr.Code, hr.Body)
	}
	halfID, _, _, err := protocol.ParsePutResult(hr.Body)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for i := range 10 {
		d := fmt.Sprintf("m%d", i)
		if r := wrPut(mc, foTopic, 0, "", d, int32(10+i)); r.Code != 200 {
			t.Fatalf("put: %d %s", r.Code, r.Body)
		}
		all = append(all, d)
	}
	delivered := wrPopAll(t, mc, foTopic, "g", 10)
	if len(delivered) != 10 {
		t.Fatalf("delivered on the master: %v", sortedKeys(delivered))
	}
	acked := []string{"m1", "m4", "m5", "m8"}
	var hs []string
	for _, d := range acked {
		hs = append(hs, delivered[d])
	}
	data := strings.Join(hs, " ")
	mc.Send(fmt.Sprintf("ack g %d 12\r\n%s", len(data), data))
	if r := mc.Reply(); r.Code != 200 {
		t.Fatalf("ack: %d %s", r.Code, r.Body)
	}
	var unacked []string
	for _, d := range all {
		if !slices.Contains(acked, d) {
			unacked = append(unacked, d)
		}
	}
	mc.Close()

	// kill -9: the slave takes over (the half and the acks are on it: syncReplicas=1).
	m.kill9()
	var ng zkmeta.HAGroup
	waitFor(t, foMaxRoundTO, func() bool {
		ng, _ = c.group()
		return ng.Master == s0.addr && ng.Epoch.Value > g.Epoch.Value && c.servesAsMaster(s0.addr)
	}, "the slave elected and promoted")

	// The new master checks the half message back with a live producer of its group.
	pc := brokertest.Dial(t, s0.addr)
	pc.Send("producer orders 21\r\n")
	if r := pc.Reply(); r.Code != 200 {
		t.Fatalf("producer on the new master: %d %s", r.Code, r.Body)
	}
	for {
		r, err := pc.TryReply(60 * time.Second)
		if err != nil {
			t.Fatalf("no check of half message %d from the promoted slave: %v", halfID, err)
		}
		if r.Kind != protocol.ReplyCheck {
			continue
		}
		id, err := protocol.ParseInt(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if id == halfID {
			break
		}
	}
	// It delivers again what the old master delivered and nobody acknowledged, nothing else.
	sc := brokertest.Dial(t, s0.addr)
	again := wrPopAll(t, sc, foTopic, "g", len(unacked))
	if got := sortedKeys(again); !slices.Equal(got, unacked) {
		t.Fatalf("the promoted slave delivered %v, want the unacknowledged %v", got, unacked)
	}
	sc.Close()

	// The old master comes back as a slave (a put needs one in-sync slave again); the check
	// is answered: the half message is committed on the new master.
	m.start()
	c.waitGroupComplete(ng.Epoch.Value - 1)
	pc.Send(fmt.Sprintf("txend %d commit 22\r\n", halfID))
	for {
		r, err := pc.TryReply(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == protocol.ReplyCheck {
			continue // a check sent before the txend
		}
		if r.Code != 200 {
			t.Fatalf("txend commit on the new master: %d %s", r.Code, r.Body)
		}
		break
	}
	pc.Close()
	want := append(slices.Clone(unacked), "half-1")
	slices.Sort(want)

	// A planned switch makes the old master master again: the node that was promoted is
	// demoted without a restart and the old master, started as a slave (delivery off,
	// transaction table in standby), starts them from its copy of the log.
	out, errs, code := runCLI(t, context.Background(), zkConnect, "", "broker", "promote", "1", "m", "--timeout", "60s")
	if code != 0 {
		t.Fatalf("promote 1 m: exit %d\n%s%s", code, out, errs)
	}
	waitFor(t, foMaxRoundTO, func() bool {
		g2, _ := c.group()
		return g2.Master == m.addr && g2.Epoch.Value > ng.Epoch.Value && c.servesAsMaster(m.addr)
	}, "the old master promoted back")
	dc := brokertest.Dial(t, s0.addr)
	waitFor(t, foMaxRoundTO, func() bool {
		_, r := wrPop(t, dc, foTopic, "g", 1, 1000)
		return r.Code == 503
	}, "the demoted node refusing pop (503)")
	dc.Close()
	bc := brokertest.Dial(t, m.addr)
	back := wrPopAll(t, bc, foTopic, "g", len(want))
	if got := sortedKeys(back); !slices.Equal(got, want) {
		t.Fatalf("the old master, promoted back, delivered %v, want %v", got, want)
	}
	bc.Close()
}
