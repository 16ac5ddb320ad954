package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A partition given up in a rebalance while ZooKeeper is unreachable keeps
// its owner node until the release gets through: once ZooKeeper is back
// (the session survived) the release is retried, and the new owner claims
// the partition. Before, the release failed once and the node stayed for
// the life of the session: the new owner waited for it forever and the
// partition was consumed by nobody.
func TestReleaseRetriedAfterZooKeeperOutage(t *testing.T) {
	z := zktest.StartZooKeeper(t)
	cl := &cluster{t: t, zk: z.Addr() + "/release", brokers: map[int]*brokertest.Broker{}, topics: map[string]int{"orders": 2}}
	cl.start(1)
	p := cl.producer()
	p0, p1 := Partition{BrokerID: 1, Partition: 0}, Partition{BrokerID: 1, Partition: 1}
	short := func(cfg *Config) { cfg.RequestTimeout = time.Second }

	// c1's handler holds the first message of partition 1 until its ctx is
	// cancelled (the rebalance that gives the partition to c2), then waits
	// until the test stopped ZooKeeper.
	holding := make(chan struct{})
	cancelled := make(chan struct{})
	resume := make(chan struct{})
	var held atomic.Bool
	col := newCollector()
	h1 := func(ctx context.Context, m *Message) error {
		if m.Partition == p1 && held.CompareAndSwap(false, true) {
			close(holding)
			<-ctx.Done()
			close(cancelled)
			<-resume
			return ctx.Err()
		}
		return col.handler(ctx, m)
	}
	c1 := cl.consumer("g", "orders", "*", h1, short)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 assigned both")
	if _, err := p.SendToPartition(ctxT(t, 10*time.Second), &Message{Topic: "orders", Body: []byte("held")}, p1); err != nil {
		t.Fatal(err)
	}
	<-holding

	// c2's node name sorts after c1's: it gets partition 1.
	c2 := cl.consumer("g", "orders", "*", col.handler, short)
	<-cancelled
	z.Stop(t)
	close(resume) // c1 now commits and releases partition 1 without ZooKeeper
	zktest.Eventually(t, 20*time.Second, func() bool { return len(c1.Assigned()["orders"]) == 1 }, "c1 gave partition 1 up")
	z.Start(t)

	zktest.Eventually(t, 30*time.Second, func() bool {
		a1, a2 := c1.Assigned()["orders"], c2.Assigned()["orders"]
		return len(a1) == 1 && a1[0] == p0 && len(a2) == 1 && a2[0] == p1
	}, "c2 claims partition 1 once ZooKeeper is back (c1 %v, c2 %v)", c1.Assigned(), c2.Assigned())
	col.waitDistinct(t, 1, 10*time.Second) // the held message, redelivered to c2
}

// bufferedStore is an OffsetStore that keeps commits until Flush (the
// OffsetStore contract allows it: a store writing to a remote system in
// batches). Consumers of one group share its backing. Each Flush checks
// that the consumer still owns every partition it flushes: a commit made
// durable after the owner node was released can come too late for the
// partition's next owner, which loads the older offset and delivers again.
type bufferedStore struct {
	backing *memOffsetStore
	zc      interface {
		PartitionOwner(ctx context.Context, group, topic string, p Partition) (string, error)
	}
	group string
	owner atomic.Pointer[string] // <group>_<consumer id>

	mu      sync.Mutex
	pending map[partKey]Offset
	late    []string // partitions flushed after their release
}

func (s *bufferedStore) Load(ctx context.Context, topic string, p Partition) (Offset, bool, error) {
	return s.backing.Load(ctx, topic, p)
}

func (s *bufferedStore) Commit(_ context.Context, topic string, p Partition, o Offset) error {
	s.mu.Lock()
	s.pending[partKey{topic, p}] = o
	s.mu.Unlock()
	return nil
}

func (s *bufferedStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, o := range s.pending {
		if owner, err := s.zc.PartitionOwner(ctx, s.group, k.topic, k.p); err != nil {
			return err
		} else if me := s.owner.Load(); me != nil && owner != *me {
			s.late = append(s.late, fmt.Sprintf("%s/%s@%d (owner %q)", k.topic, k.p, o.Offset, owner))
		}
		_ = s.backing.Commit(ctx, k.topic, k.p, o)
		delete(s.pending, k)
	}
	return nil
}

func (s *bufferedStore) Close() error { return s.Flush(context.Background()) }

func (s *bufferedStore) lateFlushes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.late...)
}

// A consumer giving a partition up makes its final commit durable (Flush)
// before it deletes the owner node, whatever the OffsetStore: a store that
// buffers commits until Flush (as the interface allows) had the final
// commit of a released partition flushed only after the release, so the
// next owner could load the older offset and deliver the partition's last
// messages again in a graceful rebalance.
func TestReleasedPartitionFlushedBeforeRelease(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	p := cl.producer()
	zc := cl.zkClient()
	defer zc.Close()
	backing := NewMemoryOffsetStore().(*memOffsetStore)
	newStore := func() *bufferedStore {
		return &bufferedStore{backing: backing, zc: zc, group: "g", pending: map[partKey]Offset{}}
	}
	s1, s2 := newStore(), newStore()
	col := newCollector()
	c1 := cl.consumer("g", "orders", "*", col.handler, func(cfg *Config) {
		cfg.Consumer.OffsetStore = s1
		cfg.Consumer.CommitInterval = time.Hour // only the final commits
	})
	me1 := zkmeta.ConsumerNodeName("g", c1.ID())
	s1.owner.Store(&me1)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 assigned both")
	sendN(t, p, "orders", "a", 20)
	col.waitDistinct(t, 20, 10*time.Second)

	c2 := cl.consumer("g", "orders", "*", col.handler, func(cfg *Config) { cfg.Consumer.OffsetStore = s2 })
	zktest.Eventually(t, 10*time.Second, func() bool { _, e := totalAssigned(c1, c2); return e[0] == 1 && e[1] == 1 }, "balanced 1/1")
	sendN(t, p, "orders", "b", 20)
	col.waitDistinct(t, 40, 10*time.Second)
	c1.Close() // every flush of c1 is done
	if late := s1.lateFlushes(); len(late) > 0 {
		t.Fatalf("final commits flushed after the partition was released: %v", late)
	}
	if col.count() != col.distinct() {
		t.Fatalf("%d deliveries of %d messages: a graceful rebalance must not duplicate", col.count(), col.distinct())
	}
}

// A Start that fails (its ctx ended before the consumer node was created)
// leaves no member behind: before, the registration went on in the
// background, the node appeared, and the group's other consumers gave the
// failed consumer its share of the partitions, which nobody consumed until
// it was closed.
func TestFailedStartLeavesNoMember(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	col := newCollector()
	c1 := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 assigned both")

	c2, err := NewConsumer(cl.config(), "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Subscribe("orders", "*", col.handler); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c2.Start(ctx); err == nil {
		t.Fatal("Start with a cancelled ctx succeeded")
	}
	// Two registrations made after the failed Start, each waited for, so
	// the pass of c2's ZooKeeper client that would have created c2's node
	// (or deleted it) is over.
	for i := range 2 {
		n, err := c2.zk.Ephemeral(fmt.Sprintf("/probe-%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Wait(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	members, err := c2.zk.Consumers(ctxT(t, 10*time.Second), "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == c2.ID() {
			t.Fatalf("the consumer whose Start failed is a member of the group: %v", members)
		}
	}
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 consumes both partitions")
}

// In concurrent mode a partition given up in a rebalance does not wait for
// the shared pool to reach its queued messages: before, the worker waited
// for every message it had queued, and with the pool busy in another
// partition's slow handlers (here: one that runs until the consumer
// closes) the rebalance never finished, so the partition's new owner never
// got it.
func TestConcurrentReleaseDoesNotWaitForThePool(t *testing.T) {
	cl := newCluster(t, map[string]int{"jobs": 2}, 1)
	p := cl.producer()
	p0, p1 := Partition{BrokerID: 1, Partition: 0}, Partition{BrokerID: 1, Partition: 1}
	col := newCollector()
	stalled := make(chan struct{})
	h := func(ctx context.Context, m *Message) error {
		if m.Partition == p0 {
			close(stalled)
			<-ctx.Done() // p0 stays with c1: until Close
			return ctx.Err()
		}
		return col.handler(ctx, m)
	}
	conc := func(cfg *Config) { cfg.Consumer.Concurrency = 1 }
	c1 := cl.consumer("g", "jobs", "*", h, conc)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1); return n == 2 }, "c1 assigned both")
	if _, err := p.SendToPartition(ctxT(t, 10*time.Second), &Message{Topic: "jobs", Body: []byte("slow")}, p0); err != nil {
		t.Fatal(err)
	}
	<-stalled // the pool's only goroutine is taken
	if _, err := p.SendToPartition(ctxT(t, 10*time.Second), &Message{Topic: "jobs", Body: []byte("queued")}, p1); err != nil {
		t.Fatal(err)
	}
	queued := func() bool {
		c1.workersMu.Lock()
		w := c1.workers[partKey{"jobs", p1}]
		c1.workersMu.Unlock()
		if w == nil {
			return false
		}
		w.tr.mu.Lock()
		defer w.tr.mu.Unlock()
		return len(w.tr.q)-w.tr.head == 1
	}
	zktest.Eventually(t, 10*time.Second, queued, "the message of partition 1 queued for the pool")

	c2 := cl.consumer("g", "jobs", "*", col.handler, conc)
	zktest.Eventually(t, 20*time.Second, func() bool {
		a1, a2 := c1.Assigned()["jobs"], c2.Assigned()["jobs"]
		return len(a1) == 1 && a1[0] == p0 && len(a2) == 1 && a2[0] == p1
	}, "c2 consumes partition 1 (c1 %v, c2 %v)", c1.Assigned(), c2.Assigned())
	col.waitDistinct(t, 1, 10*time.Second) // the queued message, delivered by c2
}

// Close does not wait for a Start still registering (ZooKeeper away):
// before, it waited for Start's registration to give up, up to
// ZKConnectionTimeout (30 s by default).
func TestCloseDuringStart(t *testing.T) {
	c, err := NewConsumer(Config{ZKConnect: "127.0.0.1:1", ZKConnectionTimeout: time.Hour, Logger: testLogger()}, "g")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("orders", "*", func(context.Context, *Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- c.Start(context.Background()) }()
	zktest.Eventually(t, 10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.started
	}, "Start registering")
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for Start's registration")
	}
	if err := <-started; err == nil {
		t.Fatal("Start succeeded without ZooKeeper")
	}
}
