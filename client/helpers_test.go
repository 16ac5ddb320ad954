package client

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger writes warnings (or METAQ_TEST_LOG=debug|info) to stderr: go
// test shows them only when a test fails.
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	switch strings.ToLower(os.Getenv("METAQ_TEST_LOG")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// cluster is a private ZooKeeper chroot with brokers registered in it.
type cluster struct {
	t       testing.TB
	zk      string
	brokers map[int]*brokertest.Broker
	topics  map[string]int
}

func newCluster(t testing.TB, topics map[string]int, brokerIDs ...int) *cluster {
	t.Helper()
	cl := &cluster{t: t, zk: zktest.Server(t), brokers: map[int]*brokertest.Broker{}, topics: topics}
	for _, id := range brokerIDs {
		cl.start(id)
	}
	return cl
}

// start runs broker id (a fresh data directory) and waits until its
// partitions are published.
func (cl *cluster) start(id int, opts ...func(*brokertest.Options)) *brokertest.Broker {
	cl.t.Helper()
	o := brokertest.Options{ZK: cl.zk, BrokerID: id, Topics: cl.topics, Logger: testLogger().With("broker", id)}
	for _, f := range opts {
		f(&o)
	}
	b := brokertest.RunBroker(cl.t, o)
	cl.brokers[id] = b
	cl.waitPublished(id)
	return b
}

func (cl *cluster) waitPublished(id int) {
	cl.t.Helper()
	zc := cl.zkClient()
	defer zc.Close()
	zktest.Eventually(cl.t, 15*time.Second, func() bool {
		for topic := range cl.topics {
			if strings.ContainsAny(topic, "*?") {
				continue
			}
			tp, err := zc.Partitions(context.Background(), topic, zkmeta.Publish)
			if err != nil {
				return false
			}
			if _, ok := tp.Brokers[id]; !ok {
				return false
			}
		}
		return true
	}, "broker %d registered", id)
}

func (cl *cluster) zkClient() *zkmeta.Client {
	cl.t.Helper()
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: cl.zk, Logger: slogPrintf{testLogger()}})
	if err != nil {
		cl.t.Fatal(err)
	}
	return zc
}

func (cl *cluster) config() Config {
	return Config{
		ZKConnect:        cl.zk,
		ZKSessionTimeout: 10 * time.Second,
		Logger:           testLogger(),
		Consumer: ConsumerOptions{
			CommitInterval: 200 * time.Millisecond,
			MaxWait:        time.Second,
			ClaimBackoff:   10 * time.Millisecond,
		},
	}
}

func (cl *cluster) producer(mod ...func(*Config)) *Producer {
	cl.t.Helper()
	cfg := cl.config()
	for _, f := range mod {
		f(&cfg)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { p.Close() })
	return p
}

// collector records deliveries.
type collector struct {
	mu   sync.Mutex
	msgs []*Message
	by   map[string]int // "<partition>@<offset>" → deliveries
	cond chan struct{}
}

func newCollector() *collector {
	return &collector{by: map[string]int{}, cond: make(chan struct{}, 1)}
}

func msgKey(m *Message) string {
	return m.Topic + "/" + m.Partition.String() + "@" + strconv.FormatInt(m.Offset, 10)
}

func (c *collector) add(m *Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.by[msgKey(m)]++
	c.mu.Unlock()
	select {
	case c.cond <- struct{}{}:
	default:
	}
}

func (c *collector) handler(ctx context.Context, m *Message) error {
	c.add(m)
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.by)
}

func (c *collector) snapshot() []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Message(nil), c.msgs...)
}

// waitDistinct waits until n distinct messages arrived.
func (c *collector) waitDistinct(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	zktest.Eventually(t, timeout, func() bool { return c.distinct() >= n }, "%d distinct messages (got %d)", n, c.distinct())
}

func (cl *cluster) consumer(group string, topic, tags string, h Handler, mod ...func(*Config)) *Consumer {
	cl.t.Helper()
	cfg := cl.config()
	for _, f := range mod {
		f(&cfg)
	}
	c, err := NewConsumer(cfg, group)
	if err != nil {
		cl.t.Fatal(err)
	}
	if err := c.Subscribe(topic, tags, h); err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// committed reads a group's committed offsets from ZooKeeper.
func (cl *cluster) committed(group, topic string) map[Partition]Offset {
	cl.t.Helper()
	zc := cl.zkClient()
	defer zc.Close()
	offs, err := zc.GroupOffsets(context.Background(), group)
	if err != nil {
		cl.t.Fatal(err)
	}
	out := map[Partition]Offset{}
	for _, o := range offs {
		if o.Topic == topic {
			out[o.Partition] = o.Offset
		}
	}
	return out
}

// totalAssigned sums the partitions the consumers consume.
func totalAssigned(cs ...*Consumer) (n int, each []int) {
	for _, c := range cs {
		k := 0
		for _, ps := range c.Assigned() {
			k += len(ps)
		}
		each = append(each, k)
		n += k
	}
	return n, each
}
