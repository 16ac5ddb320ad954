package ha

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// electionCtl is an in-memory Controller for the election's unit tests: it records what the
// election asks and lets the test set the durable position. (Replication itself is tested with
// real processes in tools/cli.)
type electionCtl struct {
	mu     sync.Mutex
	role   Role
	epoch  int64
	pos    int64
	acked  int64 // AckedPos when above pos (an async-flush master's written, unflushed end)
	master string
	fenced string
	events []string
}

func (c *electionCtl) Role() Role         { c.mu.Lock(); defer c.mu.Unlock(); return c.role }
func (c *electionCtl) Epoch() int64       { c.mu.Lock(); defer c.mu.Unlock(); return c.epoch }
func (c *electionCtl) DurablePos() int64  { c.mu.Lock(); defer c.mu.Unlock(); return c.pos }
func (c *electionCtl) AckedPos() int64    { c.mu.Lock(); defer c.mu.Unlock(); return max(c.pos, c.acked) }
func (c *electionCtl) InSync() bool       { c.mu.Lock(); defer c.mu.Unlock(); return c.fenced == "" }
func (c *electionCtl) MasterAddr() string { c.mu.Lock(); defer c.mu.Unlock(); return c.master }
func (c *electionCtl) Promote(_ context.Context, epoch int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.role, c.epoch, c.master, c.fenced = RoleMaster, max(c.epoch, epoch), "", ""
	c.events = append(c.events, fmt.Sprintf("promote %d", epoch))
	return nil
}
func (c *electionCtl) Demote(_ context.Context, addr string, epoch int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.role, c.epoch, c.master, c.fenced = RoleSlave, epoch, addr, ""
	c.events = append(c.events, fmt.Sprintf("demote %s %d", addr, epoch))
	return nil
}
func (c *electionCtl) Fence(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced == "" {
		c.events = append(c.events, "fence "+reason)
	}
	c.fenced = reason
}
func (c *electionCtl) setPos(p int64)   { c.mu.Lock(); c.pos = p; c.mu.Unlock() }
func (c *electionCtl) setAcked(p int64) { c.mu.Lock(); c.acked = p; c.mu.Unlock() }
func (c *electionCtl) is(role Role, epoch int64, master string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.role == role && c.epoch == epoch && c.master == master && c.fenced == ""
}
func (c *electionCtl) isFenced() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.fenced != "" }
func (c *electionCtl) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.events, "; ")
}

// cutDialer cuts a client off ZooKeeper without closing its session (as a network partition).
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, fmt.Errorf("partitioned")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) setCut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			c.Close()
		}
		d.conns = nil
	}
}

type node struct {
	name string
	addr string
	ctl  *electionCtl
	zk   *zkmeta.Client
	dial *cutDialer
	stop func()
}

func (n *node) kill() {
	if n.stop != nil {
		n.stop()
		n.stop = nil
	}
	n.zk.Close() // ends the session: its ephemeral nodes go at once
}

type testLogger struct{ t testing.TB }

func (l testLogger) Printf(f string, a ...any) { l.t.Logf(f, a...) }

func startNode(t *testing.T, srv string, slaveID int, port int, session time.Duration) *node {
	t.Helper()
	n := &node{name: zkmeta.ReplicaName(slaveID), addr: fmt.Sprintf("127.0.0.1:%d", port), ctl: &electionCtl{role: RoleSlave}, dial: &cutDialer{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zk, err := zkmeta.Connect(ctx, zkmeta.Config{ConnectString: srv, SessionTimeout: session, Logger: testLogger{t}, Dialer: n.dial.dial})
	if err != nil {
		t.Fatal(err)
	}
	n.zk = zk
	lg := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", n.name)
	stop, err := StartElection(ElectionConfig{ZK: zk, BrokerID: 1, SlaveID: slaveID, Addr: n.addr, Controller: n.ctl, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	n.stop = stop
	t.Cleanup(n.kill)
	return n
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	zktest.Eventually(t, 60*time.Second, cond, "%s", what)
}

// TestElectionFirstMasterThenFailover: a fresh group elects its configured master (epoch 1);
// when the master's session ends, the slave with the highest durable position wins epoch 2 and
// the other follows it; the claim and the epoch are in ZooKeeper.
func TestElectionFirstMasterThenFailover(t *testing.T) {
	srv := zktest.Server(t)
	m := startNode(t, srv, -1, 9001, 4*time.Second)
	s0 := startNode(t, srv, 0, 9002, 4*time.Second)
	s1 := startNode(t, srv, 1, 9003, 4*time.Second)
	waitFor(t, "m master of epoch 1", func() bool { return m.ctl.is(RoleMaster, 1, "") })
	waitFor(t, "slaves follow m", func() bool {
		return s0.ctl.is(RoleSlave, 1, m.addr) && s1.ctl.is(RoleSlave, 1, m.addr)
	})

	// Replication moved s1 further than s0; the master dies.
	s0.ctl.setPos(1000)
	s1.ctl.setPos(1500)
	m.ctl.setPos(1500)
	time.Sleep(2 * publishEvery) // positions published (not needed for correctness: elections wait for final states)
	m.kill()
	waitFor(t, "s1 master of epoch 2", func() bool { return s1.ctl.is(RoleMaster, 2, "") })
	waitFor(t, "s0 follows s1", func() bool { return s0.ctl.is(RoleSlave, 2, s1.addr) })
	g, err := s0.zk.HAGroup(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.Master != s1.addr || g.Epoch.Value != 2 || g.Epoch.Claimant != "s1" || g.MasterOwner != s1.zk.SessionID() {
		t.Fatalf("group after failover: %+v", g)
	}

	// The former master comes back (same configuration, its log still at epoch 1): it follows.
	m2 := startNode(t, srv, -1, 9001, 4*time.Second)
	m2.ctl.mu.Lock()
	m2.ctl.epoch, m2.ctl.pos = 1, 1600 // it had an unacknowledged tail
	m2.ctl.mu.Unlock()
	waitFor(t, "former master follows s1", func() bool { return m2.ctl.is(RoleSlave, 2, s1.addr) })

	// s1 dies too: s0 and the former master remain, both now in epoch 2's history; the one
	// further ahead wins epoch 3.
	s0.ctl.setPos(2000)
	m2.ctl.setPos(2100)
	s1.kill()
	waitFor(t, "former master master of epoch 3", func() bool { return m2.ctl.is(RoleMaster, 3, "") })
	waitFor(t, "s0 follows it", func() bool { return s0.ctl.is(RoleSlave, 3, m2.addr) })
}

// TestElectionFencesPartitionedMaster: a master cut off ZooKeeper fences itself at once (before
// its session expires and before another node is elected), a slave takes over after the
// session expired, and the former master, back in ZooKeeper, follows it.
func TestElectionFencesPartitionedMaster(t *testing.T) {
	srv := zktest.Server(t)
	m := startNode(t, srv, -1, 9101, 3*time.Second)
	s0 := startNode(t, srv, 0, 9102, 3*time.Second)
	waitFor(t, "m master", func() bool { return m.ctl.is(RoleMaster, 1, "") })
	waitFor(t, "s0 follows", func() bool { return s0.ctl.is(RoleSlave, 1, m.addr) })

	m.dial.setCut(true)
	waitFor(t, "m fenced", m.ctl.isFenced)
	fencedAt := time.Now()
	if s0.ctl.Role() != RoleSlave {
		t.Fatalf("s0 was promoted before the old master fenced: %s", s0.ctl.log())
	}
	waitFor(t, "s0 master of epoch 2", func() bool { return s0.ctl.is(RoleMaster, 2, "") })
	t.Logf("fenced, then %s later a new master", time.Since(fencedAt).Round(time.Millisecond))
	if !m.ctl.isFenced() || m.ctl.Role() != RoleMaster {
		t.Fatalf("the partitioned master is not fenced: %s", m.ctl.log())
	}
	m.dial.setCut(false)
	waitFor(t, "old master follows s0", func() bool { return m.ctl.is(RoleSlave, 2, s0.addr) })
	if ev := m.ctl.log(); !strings.Contains(ev, "fence lost the ZooKeeper connection") {
		t.Fatalf("events of the old master: %s", ev)
	}
}

// TestElectionSessionExpiryWhileConnected: the master's session expires under it (as after a
// long GC pause): it fences, does not re-create the master node by itself, and either wins the
// new election (it is still the most complete) or follows.
func TestElectionSessionExpiryWhileConnected(t *testing.T) {
	srv := zktest.Server(t)
	m := startNode(t, srv, -1, 9201, 3*time.Second)
	s0 := startNode(t, srv, 0, 9202, 3*time.Second)
	waitFor(t, "m master", func() bool { return m.ctl.is(RoleMaster, 1, "") })
	waitFor(t, "s0 follows", func() bool { return s0.ctl.is(RoleSlave, 1, m.addr) })
	s0.ctl.setPos(500)
	m.ctl.setPos(400) // the slave is ahead (the master's last flush is later): s0 must win
	time.Sleep(2 * publishEvery)
	zktest.ExpireSession(t, m.zk)
	waitFor(t, "s0 master of epoch 2", func() bool { return s0.ctl.is(RoleMaster, 2, "") })
	waitFor(t, "m follows s0", func() bool { return m.ctl.is(RoleSlave, 2, s0.addr) })
	if ev := m.ctl.log(); !strings.Contains(ev, "fence") || !strings.Contains(ev, "demote 127.0.0.1:9202 2") {
		t.Fatalf("old master's events: %s", ev)
	}
}

// TestElectionPlannedSwitch: `metaq broker promote` writes the promote node; the master fences,
// waits for the target to reach its position, resigns; the target wins and clears the node.
func TestElectionPlannedSwitch(t *testing.T) {
	srv := zktest.Server(t)
	m := startNode(t, srv, -1, 9301, 4*time.Second)
	s0 := startNode(t, srv, 0, 9302, 4*time.Second)
	s1 := startNode(t, srv, 1, 9303, 4*time.Second)
	waitFor(t, "m master", func() bool { return m.ctl.is(RoleMaster, 1, "") })
	waitFor(t, "slaves follow", func() bool { return s0.ctl.is(RoleSlave, 1, m.addr) && s1.ctl.is(RoleSlave, 1, m.addr) })
	m.ctl.setPos(800)
	s0.ctl.setPos(700)
	s1.ctl.setPos(800)
	if err := m.zk.RequestPromotion(context.Background(), 1, "s0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m paused", m.ctl.isFenced)
	time.Sleep(3 * publishEvery)
	if !m.ctl.isFenced() || m.ctl.Role() != RoleMaster || s0.ctl.Role() != RoleSlave {
		t.Fatalf("switched before the target caught up: m %s / s0 %s", m.ctl.log(), s0.ctl.log())
	}
	s0.ctl.setPos(800) // caught up; s1 is as far, but the switch names s0
	waitFor(t, "s0 master of epoch 2", func() bool { return s0.ctl.is(RoleMaster, 2, "") })
	waitFor(t, "m and s1 follow s0", func() bool { return m.ctl.is(RoleSlave, 2, s0.addr) && s1.ctl.is(RoleSlave, 2, s0.addr) })
	waitFor(t, "promote node cleared", func() bool {
		g, err := s1.zk.HAGroup(context.Background(), 1)
		return err == nil && g.Promote == ""
	})
}

// TestElectionPlannedSwitchWaitsForAcknowledged: an async-flush master answers a put once
// written, before its fsync: a planned switch waits until the target holds what the master
// acknowledged (AckedPos), not only what the master has flushed (DurablePos).
func TestElectionPlannedSwitchWaitsForAcknowledged(t *testing.T) {
	srv := zktest.Server(t)
	m := startNode(t, srv, -1, 9401, 4*time.Second)
	s0 := startNode(t, srv, 0, 9402, 4*time.Second)
	waitFor(t, "m master", func() bool { return m.ctl.is(RoleMaster, 1, "") })
	waitFor(t, "s0 follows", func() bool { return s0.ctl.is(RoleSlave, 1, m.addr) })
	m.ctl.setPos(800)   // flushed
	m.ctl.setAcked(900) // written and answered 200, flushed later
	s0.ctl.setPos(800)
	if err := m.zk.RequestPromotion(context.Background(), 1, "s0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m paused", m.ctl.isFenced)
	time.Sleep(3 * publishEvery)
	if !m.ctl.isFenced() || m.ctl.Role() != RoleMaster || s0.ctl.Role() != RoleSlave {
		t.Fatalf("switched before the target held the acknowledged puts: m %s / s0 %s", m.ctl.log(), s0.ctl.log())
	}
	s0.ctl.setPos(900)
	waitFor(t, "s0 master of epoch 2", func() bool { return s0.ctl.is(RoleMaster, 2, "") })
	waitFor(t, "m follows s0", func() bool { return m.ctl.is(RoleSlave, 2, s0.addr) })
}

func TestRank(t *testing.T) {
	r := func(name string, slave int, epoch, pos int64) zkmeta.ReplicaState {
		return zkmeta.ReplicaState{Name: name, SlaveID: slave, Epoch: epoch, Pos: pos, Addr: "h:1"}
	}
	for _, tc := range []struct {
		name string
		reps []zkmeta.ReplicaState
		g    zkmeta.HAGroup
		want string
	}{
		{"fresh group: configured master", []zkmeta.ReplicaState{r("s0", 0, 0, 10), r("m", -1, 0, 0), r("s1", 1, 0, 0)}, zkmeta.HAGroup{EpochVersion: -1}, "m"},
		{"fresh group: only the configured master", []zkmeta.ReplicaState{r("s0", 0, 0, 10), r("s1", 1, 0, 0)}, zkmeta.HAGroup{EpochVersion: -1}, ""},
		{"highest position", []zkmeta.ReplicaState{r("s0", 0, 3, 10), r("s1", 1, 3, 20)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3}}, "s1"},
		{"tie: lowest slave", []zkmeta.ReplicaState{r("s1", 1, 3, 20), r("s0", 0, 3, 20)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3}}, "s0"},
		{"tie: switch target", []zkmeta.ReplicaState{r("s0", 0, 3, 20), r("s1", 1, 3, 20)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3}, Promote: "s1"}, "s1"},
		{"older history never wins", []zkmeta.ReplicaState{r("m", -1, 2, 999), r("s1", 1, 3, 20)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3}}, "s1"},
		{"newest history all down", []zkmeta.ReplicaState{r("m", -1, 2, 999)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3, Claimant: "s0"}}, ""},
		{"claimant never recorded its epoch", []zkmeta.ReplicaState{r("s0", 0, 2, 50), r("m", -1, 2, 40)}, zkmeta.HAGroup{Epoch: zkmeta.Epoch{Value: 3, Claimant: "s0"}}, "s0"},
		{"ZooKeeper lost its data", []zkmeta.ReplicaState{r("s0", 0, 5, 50), r("m", -1, 4, 90)}, zkmeta.HAGroup{EpochVersion: -1}, "s0"},
	} {
		got, why := rank(tc.reps, tc.g)
		name := ""
		if got != nil {
			name = got.Name
		}
		if name != tc.want {
			t.Errorf("%s: got %q (%s), want %q", tc.name, name, why, tc.want)
		}
	}
}
