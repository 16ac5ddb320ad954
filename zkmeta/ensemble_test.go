package zkmeta_test

import (
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// TestEnsembleSurvivesOneMember runs a real 3-member ensemble (scripts/zk.sh with ZK_ENSEMBLE=3),
// registers a broker, kills the member the broker's session is connected to (SIGKILL), and
// checks that the session survives (no expiry: the client moves to another member), the broker
// node stays, writes and watches go on; then the killed member rejoins and a second one may go.
func TestEnsembleSurvivesOneMember(t *testing.T) {
	ens := zktest.StartEnsemble(t, 3)
	c, lg := connect(t, ens.Addr()+"/ens-test", func(cfg *zkmeta.Config) { cfg.SessionTimeout = 4 * time.Second })
	reg, err := zkmeta.NewBrokerRegistry(c, zkmeta.MasterBroker(1, "127.0.0.1", 8123))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	watched := c.WatchBrokers(ctxT(t, 2*time.Minute))
	<-watched // the current state
	sid := c.SessionID()

	killed := memberOf(t, ens, c)
	t.Logf("session 0x%x is on member %d (%s); killing it", sid, killed, ens.MemberAddr(killed))
	ens.Kill(t, killed)

	// The client reconnects to a surviving member within the session timeout: same session.
	if err := c.Put(ctxT(t, 60*time.Second), "/meta/probe", []byte("after-kill")); err != nil {
		t.Fatalf("write after killing member %d: %v", killed, err)
	}
	if c.SessionID() != sid {
		t.Fatalf("session changed from 0x%x to 0x%x: losing one member must not expire sessions", sid, c.SessionID())
	}
	if now := memberOf(t, ens, c); now == killed {
		t.Fatalf("still on the killed member %d", killed)
	}
	if ok, err := c.Exists(ctxT(t, 30*time.Second), c.Paths().BrokerMaster(1)); err != nil || !ok {
		t.Fatalf("broker node after losing a member: %v %v", ok, err)
	}
	// A watch armed before the loss still fires.
	reg2, err := zkmeta.NewBrokerRegistry(c, zkmeta.MasterBroker(2, "127.0.0.1", 8124))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg2.Register(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(60 * time.Second)
	for seen := false; !seen; {
		select {
		case bs := <-watched:
			seen = len(bs) == 2
		case <-deadline:
			t.Fatal("the broker watch did not report broker 2 after a member's loss")
		}
	}

	// The member comes back and rejoins; then another one (not ours) may go as well.
	ens.Start(t, killed)
	zktest.Eventually(t, 60*time.Second, func() bool { return ens.Mode(killed) != "" }, "member %d rejoining", killed)
	other := 1
	for other == killed || other == memberOf(t, ens, c) {
		other++
	}
	ens.Stop(t, other)
	if err := c.Put(ctxT(t, 60*time.Second), "/meta/probe", []byte("after-second-loss")); err != nil {
		t.Fatalf("write with member %d down: %v", other, err)
	}
	d, _, err := c.Get(ctxT(t, 30*time.Second), "/meta/probe")
	if err != nil || string(d) != "after-second-loss" {
		t.Fatalf("read back %q %v", d, err)
	}
	if c.SessionID() != sid || lg.contains("expired") {
		t.Fatalf("the session expired during member losses (0x%x → 0x%x)", sid, c.SessionID())
	}
}

// memberOf finds the member a client's session is connected to.
func memberOf(t *testing.T, ens *zktest.Ensemble, c *zkmeta.Client) int {
	t.Helper()
	var server string
	zktest.Eventually(t, 30*time.Second, func() bool {
		_, _, server = c.SessionCredentials()
		return server != ""
	}, "a session server")
	for i := 1; i <= ens.N; i++ {
		if strings.HasSuffix(server, ":"+strings.Split(ens.MemberAddr(i), ":")[1]) {
			return i
		}
	}
	t.Fatalf("session server %q is no member of %s", server, ens.Addr())
	return 0
}
