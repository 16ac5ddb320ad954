package zkmeta_test

import (
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

var update = flag.Bool("update", false, "rewrite testdata/layout.golden")

// buildSampleLayout registers a small cluster: two brokers, a slave, a consumer group.
func buildSampleLayout(t *testing.T, zkAddr string) *zkmeta.Client {
	t.Helper()
	c1, _ := connect(t, zkAddr)
	c2, _ := connect(t, zkAddr)
	ctx := ctxT(t, 20*time.Second)

	m1 := newRegistry(t, c1, zkmeta.MasterBroker(1, "10.0.0.1", 8123))
	must(t, m1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(4)))
	must(t, m1.RegisterTopic("logs", zkmeta.TopicConfig{NumPartitions: 2, AcceptPublish: true}))
	must(t, m1.Register(ctx))
	s1 := newRegistry(t, c2, zkmeta.SlaveBroker(1, 0, "10.0.0.11", 8123))
	must(t, s1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(4)))
	must(t, s1.Register(ctx))
	m2 := newRegistry(t, c2, zkmeta.MasterBroker(2, "10.0.0.2", 8123))
	must(t, m2.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)))
	must(t, m2.Register(ctx))

	_, err := c1.RegisterConsumer(ctx, "billing", "host-1-1700000000000-1", []string{"orders", "logs"})
	must(t, err)
	ok, _, err := c1.ClaimPartition(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 1, Partition: 0}, "host-1-1700000000000-1")
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	must(t, c1.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 1, Partition: 0}, zkmeta.Offset{MsgID: 281474976710656, Offset: 5}))
	must(t, c1.Put(ctx, "/meta/consumers/billing/offsets/orders/2-1", []byte("7"))) // MetaQ < 1.4
	return c1
}

// The tree metaq writes, compared with testdata/layout.golden: once as read by zkmeta, once as
// read by zkCli.sh (scripts/zk-dump.sh), so the layout is what ZooKeeper's own tools show.
func TestLayoutGolden(t *testing.T) {
	t.Parallel()
	zkAddr := zktest.Server(t)
	c := buildSampleLayout(t, zkAddr)
	nodes, err := c.Dump(ctxT(t, 10*time.Second), "/meta")
	must(t, err)
	got := zkmeta.FormatDump(nodes)
	const golden = "testdata/layout.golden"
	if *update {
		must(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	wantB, err := os.ReadFile(golden)
	must(t, err)
	want := string(wantB)
	if got != want {
		t.Fatalf("zkmeta dump differs from %s:\n--- got\n%s--- want\n%s", golden, got, want)
	}

	if _, err := os.Stat("/usr/share/zookeeper/bin/zkCli.sh"); err != nil {
		t.Skip("zkCli.sh not installed: skipping the zkCli.sh half")
	}
	server := strings.Split(strings.SplitN(zkAddr, "/", 2)[0], ",")[0]
	cmd := exec.Command("bash", "../scripts/zk-dump.sh", c.Chroot()+"/meta")
	cmd.Env = append(os.Environ(), "ZK_SERVER="+server)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zk-dump.sh: %v\n%s", err, stderr.String())
	}
	cli := strings.ReplaceAll(string(out), " "+c.Chroot()+"/", " /")
	if cli != want {
		t.Fatalf("zkCli.sh dump differs from %s:\n--- zk-dump.sh\n%s--- want\n%s", golden, cli, want)
	}
}

// The connect string's chroot and zk.zkRoot combine; "/" as root puts the layout at the top.
func TestChrootAndRoot(t *testing.T) {
	base := zktest.Server(t)
	baseChroot := base[strings.IndexByte(base, '/'):]
	for _, tc := range []struct{ suffix, root, want string }{
		{"/deep/er", "x/y/", "/deep/er/x/y/brokers/ids/1/master"},
		{"", "/", "/brokers/ids/1/master"},
		{"/c", "", "/c/meta/brokers/ids/1/master"},
	} {
		c, _ := connect(t, base+tc.suffix, func(cfg *zkmeta.Config) { cfg.Root = tc.root })
		r := newRegistry(t, c, zkmeta.MasterBroker(1, "h", 1))
		must(t, r.Register(ctxT(t, 10*time.Second)))
		ok, _, err := c.Conn().Exists(baseChroot + tc.want)
		if err != nil || !ok {
			t.Errorf("chroot %q root %q: %s missing (%v)", tc.suffix, tc.root, baseChroot+tc.want, err)
		}
		bs, err := c.Brokers(ctxT(t, 5*time.Second))
		if err != nil || len(bs) != 1 || bs[0].Master != "h:1" {
			t.Errorf("chroot %q root %q: Brokers = %+v %v", tc.suffix, tc.root, bs, err)
		}
		c.Close()
	}
}

// Close is quick and clean even when ZooKeeper never answered; everything fails with ErrClosed
// afterwards.
func TestCloseWithoutServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	lg := newTestLog(t)
	c, err := zkmeta.New(zkmeta.Config{ConnectString: addr + "/x", SessionTimeout: 2 * time.Second, Logger: lg})
	must(t, err)
	n, err := c.Ephemeral("/a", []byte("1"))
	must(t, err)
	w := c.WatchChildren(ctxT(t, time.Minute), "/")
	r := newRegistry(t, c, zkmeta.MasterBroker(1, "h", 1))
	must(t, r.Start())
	time.Sleep(300 * time.Millisecond)

	// Close must not wait for a server that never answers (a reconnect loop):
	// the 30 s bound only catches a hang, it is not a timing assertion.
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked while no server answers")
	}
	c.Close() // idempotent
	if c.State() != zkmeta.StateClosed {
		t.Errorf("State() = %s", c.State())
	}
	if _, ok := <-w; ok {
		t.Error("watch channel not closed by Close")
	}
	if err := n.Wait(ctxT(t, time.Second)); !errors.Is(err, zkmeta.ErrClosed) {
		t.Errorf("Wait after Close = %v", err)
	}
	if _, _, err := c.Get(ctxT(t, time.Second), "/a"); !errors.Is(err, zkmeta.ErrClosed) {
		t.Errorf("Get after Close = %v", err)
	}
	if _, err := c.Ephemeral("/b", nil); !errors.Is(err, zkmeta.ErrClosed) {
		t.Errorf("Ephemeral after Close = %v", err)
	}
	if _, ok := <-c.WatchBrokers(ctxT(t, time.Second)); ok {
		t.Error("watch after Close delivered a value")
	}
	if _, err := zkmeta.New(zkmeta.Config{}); err == nil {
		t.Error("New without servers: no error")
	}
}
