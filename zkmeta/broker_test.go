package zkmeta_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func newRegistry(t testing.TB, c *zkmeta.Client, b zkmeta.Broker) *zkmeta.BrokerRegistry {
	t.Helper()
	r, err := zkmeta.NewBrokerRegistry(c, b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every node a master and a slave register, byte for byte as docs/zookeeper.md ("The layout").
func TestBrokerRegistrationContents(t *testing.T) {
	zkAddr := zktest.Server(t)
	c, _ := connect(t, zkAddr)
	p := c.Paths()

	r := newRegistry(t, c, zkmeta.MasterBroker(1, "127.0.0.1", 8123))
	must(t, r.RegisterTopic("orders", zkmeta.DefaultTopicConfig(4)))
	must(t, r.RegisterTopic("logs", zkmeta.TopicConfig{NumPartitions: 2, AcceptPublish: true}))
	must(t, r.RegisterTopic("audit", zkmeta.TopicConfig{NumPartitions: 1, AcceptSubscribe: true}))
	if err := r.Register(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !r.Registered() {
		t.Fatal("Registered() = false after Register")
	}
	wantEphemeral(t, c, "/meta/brokers/ids/1/master", "meta://127.0.0.1:8123")
	wantEphemeral(t, c, "/meta/brokers/topics/orders/1-m", "4")
	wantEphemeral(t, c, "/meta/brokers/topics-pub/orders/1-m", `{"numParts":4,"broker":"1-m"}`)
	wantEphemeral(t, c, "/meta/brokers/topics-sub/orders/1-m", `{"numParts":4,"broker":"1-m"}`)
	wantEphemeral(t, c, "/meta/brokers/topics/logs/1-m", "2")
	wantEphemeral(t, c, "/meta/brokers/topics-pub/logs/1-m", `{"numParts":2,"broker":"1-m"}`)
	wantAbsent(t, c, "/meta/brokers/topics-sub/logs/1-m")
	wantEphemeral(t, c, "/meta/brokers/topics/audit/1-m", "1")
	wantAbsent(t, c, "/meta/brokers/topics-pub/audit/1-m")
	wantEphemeral(t, c, "/meta/brokers/topics-sub/audit/1-m", `{"numParts":1,"broker":"1-m"}`)
	for _, dir := range []string{"/meta", "/meta/brokers", "/meta/brokers/ids", "/meta/brokers/ids/1", "/meta/brokers/topics/orders", p.TopicPub("orders")} {
		if n := getNode(t, c, dir); !n.exists || n.ephemeral || n.data != "" {
			t.Errorf("%s: %+v, want a persistent node with empty data", dir, n)
		}
	}
	if got := r.Topics(); len(got) != 3 || got[0] != "audit" {
		t.Errorf("Topics() = %v", got)
	}

	// A slave: slave<n> node, -s<n> topic nodes, never topics-pub.
	c2, _ := connect(t, zkAddr)
	s := newRegistry(t, c2, zkmeta.SlaveBroker(1, 0, "127.0.0.1", 8124))
	must(t, s.RegisterTopic("orders", zkmeta.DefaultTopicConfig(4)))
	if err := s.Register(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantEphemeral(t, c2, "/meta/brokers/ids/1/slave0", "meta://127.0.0.1:8124")
	wantEphemeral(t, c2, "/meta/brokers/topics/orders/1-s0", "4")
	wantEphemeral(t, c2, "/meta/brokers/topics-sub/orders/1-s0", `{"numParts":4,"broker":"1-s0"}`)
	wantAbsent(t, c2, "/meta/brokers/topics-pub/orders/1-s0")

	// Unregister removes topics, then the broker node; Start registers everything again.
	if err := r.Unregister(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, c, "/meta/brokers/ids/1/master")
	wantAbsent(t, c, "/meta/brokers/topics/orders/1-m")
	wantAbsent(t, c, "/meta/brokers/topics-sub/audit/1-m")
	wantEphemeral(t, c2, "/meta/brokers/ids/1/slave0", "meta://127.0.0.1:8124")
	if err := r.Register(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantEphemeral(t, c, "/meta/brokers/topics-pub/orders/1-m", `{"numParts":4,"broker":"1-m"}`)

	if _, err := zkmeta.NewBrokerRegistry(c, zkmeta.MasterBroker(-1, "h", 1)); err == nil {
		t.Error("negative broker id accepted")
	}
	if _, err := zkmeta.NewBrokerRegistry(c, zkmeta.MasterBroker(1, "", 1)); err == nil {
		t.Error("empty host accepted")
	}
	if err := r.RegisterTopic("bad/topic", zkmeta.DefaultTopicConfig(1)); err == nil {
		t.Error("bad topic name accepted")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A topic accepted through a wildcard registers on its first put, at any time; its
// configuration can change; it can go away.
func TestTopicRegistrationAtRuntime(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	r := newRegistry(t, c, zkmeta.MasterBroker(5, "broker5.example", 8123))
	must(t, r.Register(ctxT(t, 10*time.Second)))
	wantEphemeral(t, c, "/meta/brokers/ids/5/master", "meta://broker5.example:8123")
	wantAbsent(t, c, "/meta/brokers/topics")

	// RegisterTopic must not block (the broker calls it on a put; checked with ZooKeeper down
	// in TestZooKeeperRestart, without a clock); WaitTopic waits.
	must(t, r.RegisterTopic("wild.1", zkmeta.DefaultTopicConfig(3)))
	must(t, r.WaitTopic(ctxT(t, 10*time.Second), "wild.1"))
	wantEphemeral(t, c, "/meta/brokers/topics/wild.1/5-m", "3")
	wantEphemeral(t, c, "/meta/brokers/topics-pub/wild.1/5-m", `{"numParts":3,"broker":"5-m"}`)
	wantEphemeral(t, c, "/meta/brokers/topics-sub/wild.1/5-m", `{"numParts":3,"broker":"5-m"}`)

	// Again with the same configuration: nothing to do.
	must(t, r.RegisterTopic("wild.1", zkmeta.DefaultTopicConfig(3)))

	// More partitions, and no more publishing.
	must(t, r.RegisterTopic("wild.1", zkmeta.TopicConfig{NumPartitions: 8, AcceptSubscribe: true}))
	must(t, r.WaitTopic(ctxT(t, 10*time.Second), "wild.1"))
	zktest.Eventually(t, 5*time.Second, func() bool { return !getNode(t, c, "/meta/brokers/topics-pub/wild.1/5-m").exists },
		"topics-pub node still there after AcceptPublish=false")
	wantEphemeral(t, c, "/meta/brokers/topics/wild.1/5-m", "8")
	wantEphemeral(t, c, "/meta/brokers/topics-sub/wild.1/5-m", `{"numParts":8,"broker":"5-m"}`)
	if cfg, ok := r.Topic("wild.1"); !ok || cfg.NumPartitions != 8 || cfg.AcceptPublish {
		t.Errorf("Topic() = %+v %v", cfg, ok)
	}

	must(t, r.UnregisterTopic(ctxT(t, 10*time.Second), "wild.1"))
	wantAbsent(t, c, "/meta/brokers/topics/wild.1/5-m")
	wantAbsent(t, c, "/meta/brokers/topics-sub/wild.1/5-m")
	wantEphemeral(t, c, "/meta/brokers/ids/5/master", "meta://broker5.example:8123")
	if len(r.Topics()) != 0 {
		t.Errorf("Topics() = %v", r.Topics())
	}
}

// A forced session expiry: every node is back, owned by the new session, within seconds.
func TestSessionExpiryReRegisters(t *testing.T) {
	c, lg := connect(t, zktest.Server(t))
	expired := make(chan struct{}, 4)
	reconnected := make(chan bool, 4)
	c.OnSessionExpired(func() { expired <- struct{}{} })
	c.OnReconnected(func(newSession bool) { reconnected <- newSession })

	r := newRegistry(t, c, zkmeta.MasterBroker(2, "127.0.0.1", 8200))
	must(t, r.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)))
	must(t, r.Register(ctxT(t, 10*time.Second)))
	consumer, err := c.RegisterConsumer(ctxT(t, 10*time.Second), "billing", "c1", []string{"orders"})
	must(t, err)
	ok, _, err := c.ClaimPartition(ctxT(t, 10*time.Second), "billing", "orders", zkmeta.Partition{BrokerID: 2, Partition: 0}, "c1")
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}

	for round := 1; round <= 2; round++ {
		old := c.SessionID()
		start := time.Now()
		zktest.ExpireSession(t, c)
		zktest.Eventually(t, 10*time.Second, func() bool {
			return c.SessionID() != old && r.Registered() && consumer.Registered()
		}, "round %d: not re-registered after session expiry", round)
		t.Logf("round %d: re-registered in %s (session 0x%x → 0x%x)", round, time.Since(start), old, c.SessionID())
		wantEphemeral(t, c, "/meta/brokers/ids/2/master", "meta://127.0.0.1:8200")
		wantEphemeral(t, c, "/meta/brokers/topics/orders/2-m", "2")
		wantEphemeral(t, c, "/meta/brokers/topics-pub/orders/2-m", `{"numParts":2,"broker":"2-m"}`)
		wantEphemeral(t, c, "/meta/brokers/topics-sub/orders/2-m", `{"numParts":2,"broker":"2-m"}`)
		wantEphemeral(t, c, "/meta/consumers/billing/ids/billing_c1", "orders")
		// Owner nodes are not ours to re-create: the consumer rebalances on OnSessionExpired.
		wantAbsent(t, c, "/meta/consumers/billing/owners/orders/2-0")
		select {
		case <-expired:
		case <-time.After(5 * time.Second):
			t.Fatal("OnSessionExpired not called")
		}
		select {
		case ns := <-reconnected:
			if !ns {
				t.Error("OnReconnected(newSession=false) after an expiry")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("OnReconnected not called")
		}
	}
	if !lg.contains("expired") {
		t.Error("expiry not logged")
	}
}

// Two brokers registering side by side; producers and consumers see both.
func TestTwoBrokers(t *testing.T) {
	zkAddr := zktest.Server(t)
	c1, _ := connect(t, zkAddr)
	c2, _ := connect(t, zkAddr)
	r1 := newRegistry(t, c1, zkmeta.MasterBroker(1, "127.0.0.1", 8123))
	r2 := newRegistry(t, c2, zkmeta.MasterBroker(2, "127.0.0.1", 8124))
	must(t, r1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)))
	must(t, r2.RegisterTopic("orders", zkmeta.DefaultTopicConfig(3)))
	errs := make(chan error, 2)
	go func() { errs <- r1.Register(ctxT(t, 10*time.Second)) }()
	go func() { errs <- r2.Register(ctxT(t, 10*time.Second)) }()
	must(t, <-errs)
	must(t, <-errs)

	brokers, err := c1.Brokers(ctxT(t, 5*time.Second))
	must(t, err)
	if len(brokers) != 2 || brokers[0].ID != 1 || brokers[0].Master != "127.0.0.1:8123" || brokers[1].Master != "127.0.0.1:8124" {
		t.Fatalf("Brokers() = %+v", brokers)
	}
	for _, kind := range []zkmeta.PartitionKind{zkmeta.Publish, zkmeta.Subscribe} {
		tp, err := c2.Partitions(ctxT(t, 5*time.Second), "orders", kind)
		must(t, err)
		want := []zkmeta.Partition{{BrokerID: 1, Partition: 0}, {BrokerID: 1, Partition: 1}, {BrokerID: 2, Partition: 0}, {BrokerID: 2, Partition: 1}, {BrokerID: 2, Partition: 2}}
		if !equalParts(tp.Partitions, want) || tp.Brokers[1].Master != "127.0.0.1:8123" || tp.Brokers[2].Master != "127.0.0.1:8124" {
			t.Fatalf("%s partitions = %+v", kind, tp)
		}
	}
	topics, err := c1.Topics(ctxT(t, 5*time.Second))
	must(t, err)
	if len(topics) != 1 || topics[0] != "orders" {
		t.Fatalf("Topics() = %v", topics)
	}
}

func equalParts(a, b []zkmeta.Partition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A broker restarted faster than its old session expired: the new registry waits for the old
// ephemeral node to vanish instead of failing.
func TestStaleNodeRestart(t *testing.T) {
	t.Parallel()
	zkAddr := zktest.Server(t)
	d := &freezableDialer{}
	old, _ := connect(t, zkAddr, func(c *zkmeta.Config) { c.Dialer = d.dial; c.SessionTimeout = 2 * time.Second })
	r1 := newRegistry(t, old, zkmeta.MasterBroker(7, "127.0.0.1", 8123))
	must(t, r1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	must(t, r1.Register(ctxT(t, 10*time.Second)))
	oldSession := old.SessionID()
	d.freeze() // the old process "dies": its session lives on until the server expires it

	c, lg := connect(t, zkAddr, func(c *zkmeta.Config) { c.StaleNodeWait = 20 * time.Second })
	r2 := newRegistry(t, c, zkmeta.MasterBroker(7, "127.0.0.1", 8123))
	must(t, r2.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	start := time.Now()
	if err := r2.Register(ctxT(t, 25*time.Second)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	waited := time.Since(start)
	t.Logf("waited %s for session 0x%x to expire", waited, oldSession)
	if waited < 500*time.Millisecond {
		t.Errorf("registered after %s: the old session's node cannot have expired yet", waited)
	}
	if !lg.contains("still held by ZooKeeper session") {
		t.Error("the wait was not logged")
	}
	wantEphemeral(t, c, "/meta/brokers/ids/7/master", "meta://127.0.0.1:8123")
	wantEphemeral(t, c, "/meta/brokers/topics-pub/orders/7-m", `{"numParts":1,"broker":"7-m"}`)
}

// Two live brokers with one id: the second reports a ConflictError after StaleNodeWait, keeps
// trying, and registers once the first is gone.
func TestStaleNodeConflict(t *testing.T) {
	t.Parallel()
	zkAddr := zktest.Server(t)
	first, _ := connect(t, zkAddr)
	r1 := newRegistry(t, first, zkmeta.MasterBroker(3, "10.0.0.1", 8123))
	must(t, r1.Register(ctxT(t, 10*time.Second)))

	c, _ := connect(t, zkAddr, func(c *zkmeta.Config) { c.StaleNodeWait = time.Second })
	r2 := newRegistry(t, c, zkmeta.MasterBroker(3, "10.0.0.2", 8123))
	must(t, r2.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	start := time.Now()
	err := r2.Register(ctxT(t, 10*time.Second))
	var ce *zkmeta.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, zk.ErrNodeExists) || ce.Holder != first.SessionID() {
		t.Fatalf("Register = %v, want a ConflictError naming session 0x%x", err, first.SessionID())
	}
	// Not before StaleNodeWait (a lower bound cannot be broken by a slow machine; the upper
	// one is Register's 10 s context: a ConflictError proves it came first).
	if d := time.Since(start); d < time.Second {
		t.Errorf("conflict reported after %s, before StaleNodeWait (1s)", d)
	}
	wantAbsent(t, c, "/meta/brokers/topics/orders/3-m") // topics wait for the broker node
	if n := getNode(t, c, "/meta/brokers/ids/3/master"); n.data != "meta://10.0.0.1:8123" {
		t.Fatalf("first broker's node changed: %+v", n)
	}

	first.Close()
	must(t, r2.Wait(ctxT(t, 10*time.Second)))
	wantEphemeral(t, c, "/meta/brokers/ids/3/master", "meta://10.0.0.2:8123")
	wantEphemeral(t, c, "/meta/brokers/topics/orders/3-m", "1")
}

// ZooKeeper restarts under a running registry: the nodes survive (the session is restored) or
// are re-created (a wiped server means a new session); topics registered while ZooKeeper was
// down appear when it is back; nothing fails for the caller.
func TestZooKeeperRestart(t *testing.T) {
	t.Parallel()
	z := zktest.StartZooKeeper(t)
	c, lg := connect(t, z.Addr()+"/restart", func(c *zkmeta.Config) { c.SessionTimeout = 2 * time.Second })
	r := newRegistry(t, c, zkmeta.MasterBroker(1, "127.0.0.1", 8123))
	must(t, r.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)))
	must(t, r.Register(ctxT(t, 10*time.Second)))
	watch := c.WatchBrokers(ctxT(t, time.Minute))
	recv(t, watch, 5*time.Second, "broker 1", func(b []zkmeta.BrokerInfo) bool { return len(b) == 1 })

	z.Stop(t)
	zktest.Eventually(t, 10*time.Second, func() bool { return !c.Connected() }, "client still connected after ZooKeeper stopped")
	start := time.Now()
	// Must not fail nor block: it returns while ZooKeeper is still down (a blocking call would
	// wait for ZooKeeper, which comes back only after this).
	registered := make(chan error, 1)
	go func() { registered <- r.RegisterTopic("late", zkmeta.DefaultTopicConfig(1)) }()
	select {
	case err := <-registered:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("RegisterTopic blocked while ZooKeeper was down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if err := c.Put(ctx, "/x", []byte("1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put while ZooKeeper is down = %v, want the context's deadline", err)
	}
	cancel()
	time.Sleep(time.Second)

	oldSession := c.SessionID()
	z.Start(t)
	zktest.Eventually(t, 15*time.Second, func() bool { return c.Connected() && r.Registered() }, "not registered after ZooKeeper came back")
	t.Logf("registered again %s after the restart (session 0x%x → 0x%x)", time.Since(start), oldSession, c.SessionID())
	wantEphemeral(t, c, "/meta/brokers/ids/1/master", "meta://127.0.0.1:8123")
	wantEphemeral(t, c, "/meta/brokers/topics/late/1-m", "1")
	wantEphemeral(t, c, "/meta/brokers/topics-sub/orders/1-m", `{"numParts":2,"broker":"1-m"}`)

	// A server that lost its data: the old session is unknown, so the client gets a new one and
	// re-creates everything, chroot included.
	oldSession = c.SessionID()
	z.Stop(t)
	z.Wipe(t)
	z.Start(t)
	zktest.Eventually(t, 15*time.Second, func() bool { return c.Connected() && c.SessionID() != oldSession && r.Registered() },
		"not re-registered on a wiped ZooKeeper")
	wantEphemeral(t, c, "/meta/brokers/ids/1/master", "meta://127.0.0.1:8123")
	wantEphemeral(t, c, "/meta/brokers/topics-pub/late/1-m", `{"numParts":1,"broker":"1-m"}`)
	recv(t, watch, 10*time.Second, "broker 1 after the wipe", func(b []zkmeta.BrokerInfo) bool { return len(b) == 1 })
	must(t, c.Put(ctxT(t, 5*time.Second), "/x", []byte("1")))
	if !lg.contains("unreachable") {
		t.Error("the outage was not logged")
	}
}

// ZooKeeper down when the broker starts: New returns at once, registration happens when it
// comes up; Connect gives up after ConnectionTimeout.
func TestZooKeeperDownAtStart(t *testing.T) {
	t.Parallel()
	z := zktest.StartZooKeeper(t)
	z.Stop(t)

	lg := newTestLog(t)
	start := time.Now()
	// A 30 s context: ErrNotConnected (not the context's error) means ConnectionTimeout ended it.
	_, err := zkmeta.Connect(ctxT(t, 30*time.Second), zkmeta.Config{ConnectString: z.Addr(), SessionTimeout: 2 * time.Second,
		ConnectionTimeout: 700 * time.Millisecond, Logger: lg})
	if !errors.Is(err, zkmeta.ErrNotConnected) {
		t.Fatalf("Connect to a stopped ZooKeeper = %v", err)
	}
	t.Logf("Connect gave up after %s (ConnectionTimeout 700ms)", time.Since(start))

	c, err := zkmeta.New(zkmeta.Config{ConnectString: z.Addr(), SessionTimeout: 2 * time.Second, Logger: lg})
	must(t, err)
	t.Cleanup(c.Close)
	r := newRegistry(t, c, zkmeta.MasterBroker(4, "127.0.0.1", 8123))
	must(t, r.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	must(t, r.Start())
	if c.Connected() || r.Registered() {
		t.Fatal("connected to a stopped ZooKeeper?")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v", err)
	}
	cancel()
	time.Sleep(1500 * time.Millisecond)
	z.Start(t)
	must(t, r.Wait(ctxT(t, 15*time.Second)))
	wantEphemeral(t, c, "/meta/brokers/ids/4/master", "meta://127.0.0.1:8123")
	wantEphemeral(t, c, "/meta/brokers/topics/orders/4-m", "1")
	if !lg.contains("unreachable") || !lg.contains("reachable again") {
		t.Error("the outage was not logged")
	}
}
