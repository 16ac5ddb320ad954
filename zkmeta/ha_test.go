package zkmeta_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// TestClaimMasterIsAtomic: two nodes claim the same epoch at once; exactly one wins, and the
// winner's master node and the epoch node appear together.
func TestClaimMasterIsAtomic(t *testing.T) {
	srv := zktest.Server(t)
	a, _ := connect(t, srv)
	b, _ := connect(t, srv)
	g, err := a.HAGroup(ctxT(t, 20*time.Second), 7)
	if err != nil {
		t.Fatal(err)
	}
	if g.EpochVersion != -1 || g.Master != "" || g.Epoch.Value != 0 {
		t.Fatalf("empty group: %+v", g)
	}
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		epochs := make([]int64, 2)
		for i, c := range []*zkmeta.Client{a, b} {
			wg.Go(func() {
				epochs[i], errs[i] = c.ClaimMaster(ctxT(t, 20*time.Second), zkmeta.Claim{
					BrokerID: 7, Addr: []string{"127.0.0.1:9001", "127.0.0.1:9002"}[i], Name: []string{"m", "s0"}[i],
					Seen: g.Epoch, SeenVersion: g.EpochVersion,
				})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both claims won", round)
				}
				winner = i
			case errors.Is(err, zkmeta.ErrMasterExists), errors.Is(err, zkmeta.ErrEpochChanged):
			default:
				t.Fatalf("round %d: claim %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won: %v", round, errs)
		}
		want := g.Epoch.Value + 1
		if epochs[winner] != want {
			t.Fatalf("round %d: epoch %d, want %d", round, epochs[winner], want)
		}
		wc := []*zkmeta.Client{a, b}[winner]
		g2, err := b.HAGroup(ctxT(t, 20*time.Second), 7)
		if err != nil {
			t.Fatal(err)
		}
		if g2.Master != []string{"127.0.0.1:9001", "127.0.0.1:9002"}[winner] || g2.MasterOwner != wc.SessionID() ||
			g2.Epoch.Value != want || g2.Epoch.Claimant != []string{"m", "s0"}[winner] {
			t.Fatalf("round %d: after the claim: %+v (winner %d)", round, g2, winner)
		}
		// A claim with the epoch just superseded fails even once the master node is gone.
		if err := wc.ResignMaster(ctxT(t, 20*time.Second), 7); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ClaimMaster(ctxT(t, 20*time.Second), zkmeta.Claim{BrokerID: 7, Addr: "127.0.0.1:9001", Name: "m",
			Seen: g.Epoch, SeenVersion: g.EpochVersion}); !errors.Is(err, zkmeta.ErrEpochChanged) {
			t.Fatalf("round %d: stale claim: %v, want ErrEpochChanged", round, err)
		}
		wantAbsent(t, a, a.Paths().BrokerMaster(7))
		g = g2
	}
}

// TestClaimChecksReplicaVersions: a replica whose published state changed after the election
// read it makes the claim fail, so nobody becomes master on a stale comparison.
func TestClaimChecksReplicaVersions(t *testing.T) {
	srv := zktest.Server(t)
	a, _ := connect(t, srv)
	b, _ := connect(t, srv)
	nb, err := b.PublishReplica(3, zkmeta.ReplicaState{Name: "s1", Addr: "127.0.0.1:9102", SlaveID: 1, Role: "slave", Epoch: 0, Pos: 100, InSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.Wait(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	reps, err := a.ReadReplicas(ctxT(t, 20*time.Second), 3)
	if err != nil || len(reps) != 1 || reps[0].Name != "s1" || reps[0].Pos != 100 || !reps[0].InSync || reps[0].Owner != b.SessionID() {
		t.Fatalf("replicas: %+v %v", reps, err)
	}
	g, err := a.HAGroup(ctxT(t, 20*time.Second), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Replicas) != 1 || g.Replicas[0] != "s1" {
		t.Fatalf("group replicas %v", g.Replicas)
	}
	if err := nb.Set(ctxT(t, 20*time.Second), zkmeta.ReplicaState{Name: "s1", Addr: "127.0.0.1:9102", SlaveID: 1, Role: "slave", Pos: 200, InSync: true}.Encode()); err != nil {
		t.Fatal(err)
	}
	claim := zkmeta.Claim{BrokerID: 3, Addr: "127.0.0.1:9101", Name: "s0", Seen: g.Epoch, SeenVersion: g.EpochVersion, Checked: reps}
	if _, err := a.ClaimMaster(ctxT(t, 20*time.Second), claim); !errors.Is(err, zkmeta.ErrEpochChanged) {
		t.Fatalf("claim over a changed replica: %v", err)
	}
	wantAbsent(t, a, a.Paths().BrokerMaster(3))
	wantAbsent(t, a, a.Paths().HAEpochNode(3)) // nothing of the multi-op was applied
	reps, _ = a.ReadReplicas(ctxT(t, 20*time.Second), 3)
	claim.Checked = reps
	if e, err := a.ClaimMaster(ctxT(t, 20*time.Second), claim); err != nil || e != 1 {
		t.Fatalf("claim after re-reading: %d %v", e, err)
	}
	wantEphemeral(t, a, a.Paths().BrokerMaster(3), "meta://127.0.0.1:9101")
}

// TestElectionNodesAcrossSessionExpiry: the master node of a claim is *not* re-created after its
// session expired (the election decides again), the replica node is; a watch on the group sees
// the master vanish and is re-armed after the watcher's own session expired.
func TestElectionNodesAcrossSessionExpiry(t *testing.T) {
	srv := zktest.Server(t)
	m, _ := connect(t, srv)
	w, _ := connect(t, srv)
	rep, err := m.PublishReplica(5, zkmeta.ReplicaState{Name: "m", Addr: "127.0.0.1:9201", SlaveID: -1, Role: "master", Epoch: 1, Pos: 10, InSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ClaimMaster(ctxT(t, 20*time.Second), zkmeta.Claim{BrokerID: 5, Addr: "127.0.0.1:9201", Name: "m", SeenVersion: -1}); err != nil {
		t.Fatal(err)
	}
	watchCtx := ctxT(t, 2*time.Minute)
	ch := w.WatchHAGroup(watchCtx, 5)
	recv(t, ch, 30*time.Second, "master seen", func(g zkmeta.HAGroup) bool {
		return g.Master == "127.0.0.1:9201" && g.MasterOwner == m.SessionID() && g.Epoch.Value == 1 && len(g.Replicas) == 1
	})

	old := zktest.ExpireSession(t, m)
	recv(t, ch, 30*time.Second, "master vanished", func(g zkmeta.HAGroup) bool { return g.Master == "" && g.Epoch.Value == 1 })
	zktest.Eventually(t, 30*time.Second, func() bool { return m.SessionID() != old && rep.Registered() }, "replica node re-created in the new session")
	time.Sleep(300 * time.Millisecond) // give a wrong re-creation of the master node a chance to show
	wantAbsent(t, m, m.Paths().BrokerMaster(5))
	recv(t, ch, 30*time.Second, "replica back", func(g zkmeta.HAGroup) bool { return len(g.Replicas) == 1 })

	// The watcher's own session expires: its watch comes back by itself and sees the next claim.
	wold := zktest.ExpireSession(t, w)
	zktest.Eventually(t, 30*time.Second, func() bool { return w.SessionID() != wold && w.Connected() }, "watcher's new session")
	g, err := m.HAGroup(ctxT(t, 20*time.Second), 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ClaimMaster(ctxT(t, 20*time.Second), zkmeta.Claim{BrokerID: 5, Addr: "127.0.0.1:9201", Name: "m", Seen: g.Epoch, SeenVersion: g.EpochVersion}); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, 30*time.Second, "second claim through a re-armed watch", func(g zkmeta.HAGroup) bool {
		return g.Master == "127.0.0.1:9201" && g.Epoch.Value == 2 && g.Epoch.Claimant == "m"
	})
}

func TestParseEpochAndReplicaState(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want zkmeta.Epoch
		ok   bool
	}{
		{"3 s0", zkmeta.Epoch{Value: 3, Claimant: "s0"}, true},
		{"12", zkmeta.Epoch{Value: 12}, true},
		{"1 m", zkmeta.Epoch{Value: 1, Claimant: "m"}, true},
		{"", zkmeta.Epoch{}, false},
		{"-1 s0", zkmeta.Epoch{}, false},
		{"1 x", zkmeta.Epoch{}, false},
		{"1 s-1", zkmeta.Epoch{}, false},
		{"1 s0 extra", zkmeta.Epoch{}, false},
	} {
		got, err := zkmeta.ParseEpoch([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseEpoch(%q) = %+v, %v", tc.in, got, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%q round-trips as %q", tc.in, got.String())
		}
	}
	s := zkmeta.ReplicaState{Name: "s2", Addr: "10.0.0.1:8123", SlaveID: 2, Role: "slave", Epoch: 4, Pos: 1 << 40, InSync: true}
	got, err := zkmeta.ParseReplicaState("s2", s.Encode())
	if err != nil || got != s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "{", `{"addr":"x"}`, `{"addr":"h:1","pos":-1}`} {
		if _, err := zkmeta.ParseReplicaState("s0", []byte(bad)); err == nil {
			t.Errorf("ParseReplicaState(%q) accepted", bad)
		}
	}
}

func FuzzParseEpoch(f *testing.F) {
	for _, s := range []string{"3 s0", "0", "1 m", "9223372036854775807 s999999999", " 1  s1 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := zkmeta.ParseEpoch(b)
		if err != nil {
			return
		}
		again, err := zkmeta.ParseEpoch([]byte(e.String()))
		if err != nil || again != e {
			t.Fatalf("%q → %+v → %q → %+v %v", b, e, e.String(), again, err)
		}
	})
}

func FuzzParseReplicaState(f *testing.F) {
	f.Add([]byte(`{"addr":"127.0.0.1:8123","slaveId":0,"role":"slave","epoch":2,"pos":4096,"inSync":true}`))
	f.Add([]byte(`{"addr":"[::1]:1","pos":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := zkmeta.ParseReplicaState("s0", b)
		if err != nil {
			return
		}
		again, err := zkmeta.ParseReplicaState("s0", s.Encode())
		if err != nil || again != s {
			t.Fatalf("%q → %+v → %+v %v", b, s, again, err)
		}
	})
}

// TestElectedRegistry: a master's registry under autoFailover never creates the master node
// itself (neither at start nor after a session expiry); it takes over the node a claim created
// in its session and registers the topic nodes only while it holds it.
func TestElectedRegistry(t *testing.T) {
	srv := zktest.Server(t)
	c, _ := connect(t, srv)
	reg, err := zkmeta.NewElectedBrokerRegistry(c, zkmeta.MasterBroker(4, "127.0.0.1", 9401))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	p := c.Paths()
	wantAbsent(t, c, p.BrokerMaster(4))
	wantAbsent(t, c, p.TopicPubNode("orders", 4, -1))
	claim := func() {
		t.Helper()
		g, err := c.HAGroup(ctxT(t, 20*time.Second), 4)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimMaster(ctxT(t, 20*time.Second), zkmeta.Claim{BrokerID: 4, Addr: "127.0.0.1:9401", Name: "m",
			Seen: g.Epoch, SeenVersion: g.EpochVersion}); err != nil {
			t.Fatal(err)
		}
		if err := reg.Wait(ctxT(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		wantEphemeral(t, c, p.BrokerMaster(4), "meta://127.0.0.1:9401")
		wantEphemeral(t, c, p.TopicPubNode("orders", 4, -1), `{"numParts":2,"broker":"4-m"}`)
	}
	claim()
	old := zktest.ExpireSession(t, c)
	zktest.Eventually(t, 30*time.Second, func() bool { return c.SessionID() != old && c.Connected() }, "new session")
	time.Sleep(500 * time.Millisecond) // a wrong re-creation would show by now
	wantAbsent(t, c, p.BrokerMaster(4))
	wantAbsent(t, c, p.TopicPubNode("orders", 4, -1))
	if reg.Registered() {
		t.Fatal("registered without the master node")
	}
	claim() // won again: everything comes back
	if err := reg.Unregister(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, c, p.BrokerMaster(4)) // a graceful stop resigns at once
}
