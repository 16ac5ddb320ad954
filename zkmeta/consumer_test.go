package zkmeta_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func consumerNames(cs []zkmeta.ConsumerInfo) string {
	var b []string
	for _, c := range cs {
		b = append(b, c.Node+"="+strings.Join(c.Topics, ","))
	}
	return strings.Join(b, " ")
}

// Consumers register, leave, change topics and lose their session; one watch sees every state,
// re-arming itself each time.
func TestConsumerRegistryWatch(t *testing.T) {
	zkAddr := zktest.Server(t)
	w, _ := connect(t, zkAddr)
	a, _ := connect(t, zkAddr)
	b, _ := connect(t, zkAddr)
	ch := w.WatchConsumers(ctxT(t, time.Minute), "billing")
	expect := func(step, want string) {
		t.Helper()
		recv(t, ch, 10*time.Second, step, func(cs []zkmeta.ConsumerInfo) bool { return consumerNames(cs) == want })
	}
	expect("empty group", "")

	c1, err := a.RegisterConsumer(ctxT(t, 5*time.Second), "billing", "c1", []string{"orders"})
	must(t, err)
	wantEphemeral(t, a, "/meta/consumers/billing/ids/billing_c1", "orders")
	expect("c1 joined", "billing_c1=orders")

	_, err = b.RegisterConsumer(ctxT(t, 5*time.Second), "billing", "c2", []string{"orders", "refunds"})
	must(t, err)
	expect("c2 joined", "billing_c1=orders billing_c2=orders,refunds")

	c3, err := a.RegisterConsumer(ctxT(t, 5*time.Second), "billing", "c3", nil)
	must(t, err)
	wantEphemeral(t, a, "/meta/consumers/billing/ids/billing_c3", "")
	expect("c3 joined", "billing_c1=orders billing_c2=orders,refunds billing_c3=")

	must(t, c1.Remove(ctxT(t, 5*time.Second)))
	expect("c1 left", "billing_c2=orders,refunds billing_c3=")

	must(t, c3.Set(ctxT(t, 5*time.Second), zkmeta.FormatTopics([]string{"audit"})))
	expect("c3 changed topics", "billing_c2=orders,refunds billing_c3=audit")

	zktest.ExpireSession(t, b) // c2 vanishes with the session, then is registered again
	expect("c2 back after its session expired", "billing_c2=orders,refunds billing_c3=audit")

	zktest.ExpireSession(t, w) // the watcher's own session: the watch re-arms in the new one
	time.Sleep(200 * time.Millisecond)
	a.Close()
	expect("a closed", "billing_c2=orders,refunds")

	cs, err := b.Consumers(ctxT(t, 5*time.Second), "billing")
	must(t, err)
	if len(cs) != 1 || cs[0].ID != "c2" || cs[0].Node != "billing_c2" || !reflect.DeepEqual(cs[0].Topics, []string{"orders", "refunds"}) {
		t.Fatalf("Consumers() = %+v", cs)
	}
	if _, err := b.RegisterConsumer(ctxT(t, time.Second), "bad group", "x", nil); err == nil {
		t.Error("bad group name accepted")
	}
	if _, err := b.RegisterConsumer(ctxT(t, time.Second), "g", "a/b", nil); err == nil {
		t.Error("bad consumer id accepted")
	}
}

func TestPartitionOwners(t *testing.T) {
	zkAddr := zktest.Server(t)
	a, _ := connect(t, zkAddr)
	b, _ := connect(t, zkAddr)
	ctx := ctxT(t, 20*time.Second)
	p := zkmeta.Partition{BrokerID: 1, Partition: 0}
	const path = "/meta/consumers/billing/owners/orders/1-0"

	ok, holder, err := a.ClaimPartition(ctx, "billing", "orders", p, "ca")
	if err != nil || !ok || holder != "billing_ca" {
		t.Fatalf("claim by a: %v %q %v", ok, holder, err)
	}
	wantEphemeral(t, a, path, "billing_ca")
	if ok, holder, err = a.ClaimPartition(ctx, "billing", "orders", p, "ca"); err != nil || !ok {
		t.Fatalf("claim again by a: %v %q %v", ok, holder, err)
	}
	if ok, holder, err = b.ClaimPartition(ctx, "billing", "orders", p, "cb"); err != nil || ok || holder != "billing_ca" {
		t.Fatalf("claim by b: %v %q %v, want false and holder billing_ca", ok, holder, err)
	}
	// Same consumer id, other session (a consumer restarted with a fixed id): not ours either.
	if ok, _, err = b.ClaimPartition(ctx, "billing", "orders", p, "ca"); err != nil || ok {
		t.Fatalf("claim with a's id from b's session: %v %v", ok, err)
	}
	must(t, b.ReleasePartition(ctx, "billing", "orders", p, "cb"))
	must(t, b.ReleasePartition(ctx, "billing", "orders", p, "ca"))
	wantEphemeral(t, a, path, "billing_ca")
	owner, err := b.PartitionOwner(ctx, "billing", "orders", p)
	if err != nil || owner != "billing_ca" {
		t.Fatalf("PartitionOwner = %q %v", owner, err)
	}

	must(t, a.ReleasePartition(ctx, "billing", "orders", p, "ca"))
	wantAbsent(t, a, path)
	if owner, err = b.PartitionOwner(ctx, "billing", "orders", p); err != nil || owner != "" {
		t.Fatalf("PartitionOwner after release = %q %v", owner, err)
	}
	if ok, _, err = b.ClaimPartition(ctx, "billing", "orders", p, "cb"); err != nil || !ok {
		t.Fatalf("claim by b after release: %v %v", ok, err)
	}
	q := zkmeta.Partition{BrokerID: 2, Partition: 3}
	if ok, _, err = a.ClaimPartition(ctx, "billing", "orders", q, "ca"); err != nil || !ok {
		t.Fatalf("claim 2-3 by a: %v %v", ok, err)
	}
	owners, err := a.GroupOwners(ctx, "billing")
	must(t, err)
	want := []zkmeta.PartitionOwner{{Topic: "orders", Partition: p, Owner: "billing_cb"}, {Topic: "orders", Partition: q, Owner: "billing_ca"}}
	if !reflect.DeepEqual(owners, want) {
		t.Fatalf("GroupOwners = %+v", owners)
	}

	// An owner node goes with its session (the consumer rebalances; nobody re-creates it).
	expired := make(chan struct{}, 1)
	b.OnSessionExpired(func() { expired <- struct{}{} })
	zktest.ExpireSession(t, b)
	select {
	case <-expired:
	case <-time.After(5 * time.Second):
		t.Fatal("OnSessionExpired not called")
	}
	zktest.Eventually(t, 5*time.Second, func() bool { return !getNode(t, a, path).exists }, "owner node survived its session")
	if ok, _, err = a.ClaimPartition(ctx, "billing", "orders", p, "ca"); err != nil || !ok {
		t.Fatalf("claim by a after b expired: %v %v", ok, err)
	}
}

func TestOffsets(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	ctx := ctxT(t, 20*time.Second)
	p0 := zkmeta.Partition{BrokerID: 1, Partition: 0}
	p1 := zkmeta.Partition{BrokerID: 1, Partition: 1}
	p2 := zkmeta.Partition{BrokerID: 2, Partition: 0}

	if _, ok, err := c.LoadOffset(ctx, "billing", "orders", p0); ok || err != nil {
		t.Fatalf("LoadOffset of nothing = %v %v", ok, err)
	}
	must(t, c.CommitOffset(ctx, "billing", "orders", p0, zkmeta.Offset{MsgID: 281474976710700, Offset: 456}))
	n := getNode(t, c, "/meta/consumers/billing/offsets/orders/1-0")
	if !n.exists || n.ephemeral || n.data != "281474976710700-456" {
		t.Fatalf("offset node = %+v", n)
	}
	must(t, c.CommitOffset(ctx, "billing", "orders", p0, zkmeta.Offset{MsgID: -1, Offset: 457}))
	if o, ok, err := c.LoadOffset(ctx, "billing", "orders", p0); !ok || err != nil || o != (zkmeta.Offset{MsgID: -1, Offset: 457}) {
		t.Fatalf("LoadOffset = %+v %v %v", o, ok, err)
	}
	if n := getNode(t, c, "/meta/consumers/billing/offsets/orders/1-0"); n.data != "-1-457" {
		t.Fatalf("offset node = %+v", n)
	}
	// MetaQ before 1.4 wrote the plain offset.
	must(t, c.Put(ctx, "/meta/consumers/billing/offsets/orders/1-1", []byte("789")))
	if o, ok, err := c.LoadOffset(ctx, "billing", "orders", p1); !ok || err != nil || o != (zkmeta.Offset{MsgID: -1, Offset: 789}) {
		t.Fatalf("LoadOffset(legacy) = %+v %v %v", o, ok, err)
	}
	must(t, c.Put(ctx, "/meta/consumers/billing/offsets/orders/2-0", []byte("garbage")))
	if _, _, err := c.LoadOffset(ctx, "billing", "orders", p2); err == nil {
		t.Fatal("LoadOffset of garbage: no error")
	}
	must(t, c.CommitOffset(ctx, "billing", "orders", p2, zkmeta.Offset{MsgID: 5, Offset: 6}))
	must(t, c.CommitOffset(ctx, "billing", "audit", p0, zkmeta.Offset{MsgID: 7, Offset: 8}))
	must(t, c.CommitOffset(ctx, "reports", "orders", p0, zkmeta.Offset{MsgID: 9, Offset: 10}))

	offs, err := c.GroupOffsets(ctx, "billing")
	must(t, err)
	want := []zkmeta.PartitionOffset{
		{Topic: "audit", Partition: p0, Offset: zkmeta.Offset{MsgID: 7, Offset: 8}},
		{Topic: "orders", Partition: p0, Offset: zkmeta.Offset{MsgID: -1, Offset: 457}},
		{Topic: "orders", Partition: p1, Offset: zkmeta.Offset{MsgID: -1, Offset: 789}},
		{Topic: "orders", Partition: p2, Offset: zkmeta.Offset{MsgID: 5, Offset: 6}},
	}
	if !reflect.DeepEqual(offs, want) {
		t.Fatalf("GroupOffsets = %+v", offs)
	}
	groups, err := c.Groups(ctx)
	must(t, err)
	if !reflect.DeepEqual(groups, []string{"billing", "reports"}) {
		t.Fatalf("Groups = %v", groups)
	}
	_, err = c.RegisterConsumer(ctx, "billing", "c1", []string{"orders", "audit"})
	must(t, err)
	ok, _, err := c.ClaimPartition(ctx, "billing", "orders", p0, "c1")
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	g, err := c.DescribeGroup(ctx, "billing")
	must(t, err)
	if len(g.Consumers) != 1 || g.Consumers[0].ID != "c1" || len(g.Owners) != 1 || g.Owners[0].Owner != "billing_c1" || len(g.Offsets) != 4 {
		t.Fatalf("DescribeGroup = %+v", g)
	}
	if g, err := c.DescribeGroup(ctx, "nobody"); err != nil || len(g.Consumers)+len(g.Owners)+len(g.Offsets) != 0 {
		t.Fatalf("DescribeGroup(nobody) = %+v %v", g, err)
	}
}

// Producers' and consumers' views of a topic follow brokers joining, leaving and changing.
func TestWatchPartitions(t *testing.T) {
	zkAddr := zktest.Server(t)
	w, _ := connect(t, zkAddr)
	c1, _ := connect(t, zkAddr)
	c2, _ := connect(t, zkAddr)
	ctx := ctxT(t, time.Minute)
	pub := w.WatchPartitions(ctx, "orders", zkmeta.Publish)
	sub := w.WatchPartitions(ctx, "orders", zkmeta.Subscribe)
	brokers := w.WatchBrokers(ctx)
	str := func(tp zkmeta.TopicPartitions) string {
		var s []string
		for _, p := range tp.Partitions {
			s = append(s, p.String()+"@"+tp.Brokers[p.BrokerID].Master)
		}
		return strings.Join(s, " ")
	}
	expect := func(ch <-chan zkmeta.TopicPartitions, step, want string) {
		t.Helper()
		recv(t, ch, 10*time.Second, step, func(tp zkmeta.TopicPartitions) bool { return str(tp) == want })
	}
	expect(pub, "no broker", "")
	expect(sub, "no broker", "")
	recv(t, brokers, 5*time.Second, "no broker", func(b []zkmeta.BrokerInfo) bool { return len(b) == 0 })

	r1 := newRegistry(t, c1, zkmeta.MasterBroker(1, "h1", 8123))
	must(t, r1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(2)))
	must(t, r1.Register(ctx))
	expect(pub, "broker 1", "1-0@h1:8123 1-1@h1:8123")
	expect(sub, "broker 1", "1-0@h1:8123 1-1@h1:8123")

	r2 := newRegistry(t, c2, zkmeta.MasterBroker(2, "h2", 8123))
	must(t, r2.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	must(t, r2.Register(ctx))
	expect(pub, "broker 2 joined", "1-0@h1:8123 1-1@h1:8123 2-0@h2:8123")
	recv(t, brokers, 5*time.Second, "two brokers", func(b []zkmeta.BrokerInfo) bool {
		return len(b) == 2 && b[0].Master == "h1:8123" && b[1].Master == "h2:8123"
	})

	must(t, r1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(3)))
	expect(pub, "broker 1 grew", "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123 2-0@h2:8123")
	expect(sub, "broker 1 grew", "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123 2-0@h2:8123")

	// A slave of broker 1: consumers may read it, producers never write to it.
	s1 := newRegistry(t, c2, zkmeta.SlaveBroker(1, 0, "h1s", 8123))
	must(t, s1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(3)))
	must(t, s1.Register(ctx))
	got := recv(t, sub, 10*time.Second, "slave", func(tp zkmeta.TopicPartitions) bool { return tp.Brokers[1].Slaves[0] == "h1s:8123" })
	if str(got) != "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123 2-0@h2:8123" {
		t.Fatalf("subscribe with a slave = %s", str(got))
	}
	recv(t, brokers, 5*time.Second, "slave listed", func(b []zkmeta.BrokerInfo) bool {
		return len(b) == 2 && reflect.DeepEqual(b[0].Slaves, map[int]string{0: "h1s:8123"})
	})

	must(t, r2.Unregister(ctx))
	expect(pub, "broker 2 left", "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123")
	must(t, r1.RegisterTopic("orders", zkmeta.TopicConfig{NumPartitions: 3, AcceptSubscribe: true}))
	expect(pub, "broker 1 stopped accepting puts", "")
	expect(sub, "subscribe unaffected", "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123")

	zktest.ExpireSession(t, w) // the watches re-arm in the new session
	must(t, r1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	expect(pub, "after the watcher's session expired", "1-0@h1:8123")

	// Subscribers see the union of the master's and the slaves' partitions (as MetaQ): the
	// slave still has 3.
	if tp, err := w.Partitions(ctx, "orders", zkmeta.Subscribe); err != nil || str(tp) != "1-0@h1:8123 1-1@h1:8123 1-2@h1:8123" {
		t.Fatalf("Partitions = %+v %v", tp, err)
	}
	must(t, s1.RegisterTopic("orders", zkmeta.DefaultTopicConfig(1)))
	expect(sub, "slave shrank too", "1-0@h1:8123")
	tp, err := w.Partitions(ctx, "orders", zkmeta.Subscribe)
	must(t, err)
	if str(tp) != "1-0@h1:8123" || tp.Kind != zkmeta.Subscribe || tp.Topic != "orders" || tp.Brokers[1].Slaves[0] != "h1s:8123" {
		t.Fatalf("Partitions = %+v", tp)
	}
}

func TestWatchChildrenAndData(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	ctx, cancel := context.WithCancel(context.Background())
	kids := c.WatchChildren(ctx, "/a/b")
	data := c.WatchData(ctx, "/a/b")
	recv(t, kids, 5*time.Second, "missing", func(k []string) bool { return k == nil })
	recv(t, data, 5*time.Second, "missing", func(d []byte) bool { return d == nil })
	must(t, c.EnsurePath(ctx, "/a/b"))
	recv(t, kids, 5*time.Second, "created", func(k []string) bool { return k != nil && len(k) == 0 })
	recv(t, data, 5*time.Second, "created", func(d []byte) bool { return d != nil && len(d) == 0 })
	for i, want := range []string{"x", "x y", "x y z"} {
		must(t, c.Put(ctx, "/a/b/"+strings.Fields(want)[i], nil))
		recv(t, kids, 5*time.Second, want, func(k []string) bool { return strings.Join(k, " ") == want })
		must(t, c.Set(ctx, "/a/b", []byte(want)))
		recv(t, data, 5*time.Second, want, func(d []byte) bool { return string(d) == want })
	}
	must(t, c.DeleteTree(ctx, "/a/b"))
	recv(t, kids, 5*time.Second, "deleted", func(k []string) bool { return k == nil })
	recv(t, data, 5*time.Second, "deleted", func(d []byte) bool { return d == nil })
	cancel()
	recv(t, closedAfter(kids), 5*time.Second, "closed on cancel", func(bool) bool { return true })
}

// closedAfter turns "ch was closed" into a value.
func closedAfter[T any](ch <-chan T) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		for range ch {
		}
		out <- true
	}()
	return out
}

// CommitOffsets writes every offset or none: a consumer's commit between the
// read of the versions and the multi fails the whole write, and leaves that
// consumer's value (docs/operations.md, offsets reset).
func TestCommitOffsetsAllOrNothing(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	ctx := ctxT(t, 20*time.Second)
	p0 := zkmeta.Partition{BrokerID: 1, Partition: 0}
	p1 := zkmeta.Partition{BrokerID: 1, Partition: 1}
	p2 := zkmeta.Partition{BrokerID: 2, Partition: 0}
	must(t, c.CommitOffset(ctx, "g", "orders", p0, zkmeta.Offset{MsgID: -1, Offset: 100}))
	must(t, c.CommitOffset(ctx, "g", "orders", p1, zkmeta.Offset{MsgID: -1, Offset: 200}))
	load := func(p zkmeta.Partition) (int64, bool) {
		o, ok, err := c.LoadOffset(ctx, "g", "orders", p)
		if err != nil {
			t.Fatal(err)
		}
		return o.Offset, ok
	}
	ws := []zkmeta.OffsetWrite{
		{Topic: "orders", Partition: p0, Offset: zkmeta.Offset{MsgID: -1, Offset: 0}},
		{Topic: "orders", Partition: p1, Offset: zkmeta.Offset{MsgID: -1, Offset: 0}},
		{Topic: "orders", Partition: p2, Offset: zkmeta.Offset{MsgID: -1, Offset: 0}}, // no node yet
	}
	zkmeta.SetBeforeOffsetsMulti(c, func() {
		must(t, c.CommitOffset(ctx, "g", "orders", p1, zkmeta.Offset{MsgID: -1, Offset: 201})) // a consumer's commit
	})
	if n, err := c.CommitOffsets(ctx, "g", ws); !errors.Is(err, zk.ErrBadVersion) || n != 0 {
		t.Fatalf("CommitOffsets over a concurrent commit: %d applied, %v, want 0, %v", n, err, zk.ErrBadVersion)
	}
	if o0, _ := load(p0); o0 != 100 {
		t.Fatalf("1-0 at %d after a failed CommitOffsets, want 100 (untouched)", o0)
	}
	if o1, _ := load(p1); o1 != 201 {
		t.Fatalf("1-1 at %d, want the consumer's 201", o1)
	}
	if _, ok := load(p2); ok {
		t.Fatal("2-0 created by a failed CommitOffsets")
	}
	zkmeta.SetBeforeOffsetsMulti(c, nil)
	if n, err := c.CommitOffsets(ctx, "g", ws); err != nil || n != len(ws) {
		t.Fatalf("CommitOffsets: %d applied, %v", n, err)
	}
	for _, p := range []zkmeta.Partition{p0, p1, p2} {
		if o, ok := load(p); !ok || o != 0 {
			t.Fatalf("%s at %d (%v), want 0", p, o, ok)
		}
	}
}

// SetVersion writes only on the version read: an edit made since is not
// overwritten (topics alter's read-modify-write).
func TestSetVersion(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	ctx := ctxT(t, 20*time.Second)
	must(t, c.Put(ctx, "/meta/config/topics/t", []byte("a")))
	_, st, err := c.Get(ctx, "/meta/config/topics/t")
	must(t, err)
	must(t, c.Put(ctx, "/meta/config/topics/t", []byte("b"))) // someone else's edit
	if err := c.SetVersion(ctx, "/meta/config/topics/t", []byte("a+"), st.Version); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("SetVersion on a stale version: %v, want %v", err, zk.ErrBadVersion)
	}
	_, st, err = c.Get(ctx, "/meta/config/topics/t")
	must(t, err)
	must(t, c.SetVersion(ctx, "/meta/config/topics/t", []byte("b+"), st.Version))
	if d, _, err := c.Get(ctx, "/meta/config/topics/t"); err != nil || string(d) != "b+" {
		t.Fatalf("after SetVersion: %q %v", d, err)
	}
}
