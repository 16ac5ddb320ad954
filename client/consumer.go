package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
	"github.com/metaqgo/metaq/zkmeta"
)

// Handler handles one message. Returning nil marks it consumed; an error (or
// a panic) hands it to the RetryPolicy (by default: redelivered in place with
// a growing delay). ctx is cancelled when the message's partition is released
// (rebalance) or the consumer closes; a handler that gives up then is fine —
// the message was not committed and will be delivered again.
type Handler func(ctx context.Context, m *Message) error

// StartPosition is where a group starts reading a partition it has no
// committed offset for.
type StartPosition struct {
	kind startKind
	t    time.Time
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startTime
)

var (
	// FromEarliest starts at the oldest retained message (the default, as
	// MetaQ).
	FromEarliest = StartPosition{kind: startEarliest}
	// FromLatest starts with the messages sent after the group first reads
	// the partition.
	FromLatest = StartPosition{kind: startLatest}
)

// FromTime starts at the first message stored at or after t (the broker's
// seek).
func FromTime(t time.Time) StartPosition { return StartPosition{kind: startTime, t: t} }

func (s StartPosition) String() string {
	switch s.kind {
	case startLatest:
		return "latest"
	case startTime:
		return s.t.Format(time.RFC3339Nano)
	}
	return "earliest"
}

type subscription struct {
	topic   string
	getTags string // tag expression sent with get ("" = all)
	filter  *protocol.TagFilter
	where   *filter.Expr // SQL subscription (sql.go); nil = none
	handler Handler
}

type partKey struct {
	topic string
	p     Partition
}

// Consumer consumes topics as a member of a group. In clustering mode (the
// default) the group's consumers share the partitions, MetaQ's way, and the
// group's offsets live in ZooKeeper; in broadcast mode every consumer reads
// every partition with offsets in a local file. Delivery is at-least-once.
type Consumer struct {
	cfg   Config
	opts  *ConsumerOptions
	group string
	id    string // consumer id
	node  string // <group>_<id>
	log   *slog.Logger
	zk    *zkmeta.Client
	pool  *connPool
	store OffsetStore

	mu      sync.Mutex
	subs    map[string]*subscription
	started bool
	closed  bool

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	addrs atomic.Pointer[map[partKey]string] // where each subscribed partition is fetched

	workersMu sync.Mutex
	workers   map[partKey]*partWorker

	tasks        chan task // concurrent mode
	expired      chan struct{}
	noCommit     atomic.Bool
	balancerDone chan struct{}
	wg           sync.WaitGroup // committer, concurrent-mode pool

	hooks hookList     // Config.Hooks and the trace hook; nil = none (hook.go)
	trace *traceWriter // Config.Trace (trace.go)
}

// NewConsumer creates a consumer of group. Subscribe, then Start.
func NewConsumer(cfg Config, group string) (*Consumer, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Consumer{cfg: cfg, group: group, log: cfg.Logger, subs: map[string]*subscription{},
		workers: map[partKey]*partWorker{}, expired: make(chan struct{}, 1), balancerDone: make(chan struct{})}
	c.opts = &c.cfg.Consumer
	c.id = c.opts.ConsumerID
	if c.id == "" {
		c.id = zkmeta.NewConsumerID()
	}
	c.node = zkmeta.ConsumerNodeName(group, c.id)
	c.log = c.log.With("group", group, "consumer", c.id)
	zc, err := cfg.newZK()
	if err != nil {
		return nil, err
	}
	c.zk = zc
	switch {
	case c.opts.OffsetStore != nil:
		c.store = c.opts.OffsetStore
		if b, ok := c.store.(interface{ bindGroup(string) error }); ok { // SQLOffsets
			if err := b.bindGroup(group); err != nil {
				zc.Close()
				return nil, err
			}
		}
	case c.opts.Broadcast:
		fs, err := NewFileOffsetStore(c.opts.OffsetDir, group)
		if err != nil {
			zc.Close()
			return nil, err
		}
		c.store = fs
	default:
		c.store = NewZKOffsetStore(zc, group)
	}
	c.pool = newConnPool(c.cfg.connConfig())
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.hooks = c.cfg.hookList()
	if c.cfg.Trace {
		c.trace = newTraceWriter(c.pool, &c.cfg) // trace.go
		c.hooks = append(c.hooks, &consumerTrace{w: c.trace})
	}
	c.bindRetry() // retry_broker.go
	m := map[partKey]string{}
	c.addrs.Store(&m)
	return c, nil
}

// ID is the consumer's id in its group (the ZooKeeper node is
// <group>_<ID>).
func (c *Consumer) ID() string { return c.id }

// Group is the consumer's group.
func (c *Consumer) Group() string { return c.group }

// Subscribe registers handler for topic's messages whose tag matches
// tagExpr: "*" or "" for every message, or tags joined by "||"
// ("paid||refunded"). The broker filters by tag hash; the client checks the
// tag again. Call it before Start, once per topic.
//
// A SQL(…) expression instead selects by message properties (sql.go).
func (c *Consumer) Subscribe(topic, tagExpr string, handler Handler) error {
	if err := zkmeta.ValidateName("topic", topic); err != nil {
		return err
	}
	if handler == nil {
		return errors.New("metaq client: nil handler")
	}
	where, err := compileWhere(tagExpr)
	if err != nil {
		return err
	}
	if where != nil {
		tagExpr = "*"
	}
	for i := 0; i < len(tagExpr); i++ {
		if ch := tagExpr[i]; ch < 0x20 || ch == 0x7f {
			return fmt.Errorf("metaq client: control character in tag expression %q", tagExpr)
		}
	}
	f := protocol.ParseTagFilter(tagExpr)
	s := &subscription{topic: topic, filter: f, where: where, handler: handler}
	if expr := f.String(); !f.All() && !strings.ContainsAny(expr, " \t") {
		s.getTags = expr // a tag with a space cannot travel in a get line: client-side filtering only
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.closed {
		return ErrStarted
	}
	if _, dup := c.subs[topic]; dup {
		return fmt.Errorf("metaq client: topic %s subscribed twice", topic)
	}
	c.subs[topic] = s
	return nil
}

// Start registers the consumer in its group and starts consuming in the
// background. ctx bounds the registration only; the consumer runs until
// Close.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.started {
		c.mu.Unlock()
		return ErrStarted
	}
	if len(c.subs) == 0 {
		c.mu.Unlock()
		return errors.New("metaq client: Start without any Subscribe")
	}
	c.started = true
	if rs := c.retrySubscriptionLocked(); rs != nil { // retry_broker.go
		c.subs[rs.topic] = rs
	}
	topics := make([]string, 0, len(c.subs))
	for t := range c.subs {
		topics = append(topics, t)
	}
	c.mu.Unlock()
	sort.Strings(topics)

	rctx, cancel := context.WithTimeout(ctx, c.cfg.ZKConnectionTimeout)
	// Close ends the wait too: it waits for Start (balancerDone), and must
	// not wait for a registration ZooKeeper cannot take.
	unhook := context.AfterFunc(c.ctx, cancel)
	// zkmeta keeps the node (re-created after a session expiry) until the
	// session ends at Close.
	node, err := c.zk.RegisterConsumer(rctx, c.group, c.id, topics)
	unhook()
	cancel()
	if err != nil {
		if node != nil {
			// The registration would go on in the background: the group
			// would count this consumer and give it partitions that nobody
			// consumes. Removed without waiting (ZooKeeper may be away): the
			// node is deleted once it is back, or goes with the session.
			done, stop := context.WithCancel(context.Background())
			stop()
			_ = node.Remove(done)
		}
		c.closeBalancerless()
		return fmt.Errorf("metaq client: registering consumer %s: %w", c.node, err)
	}
	c.zk.OnSessionExpired(func() {
		select {
		case c.expired <- struct{}{}:
		default:
		}
	})
	if n := c.opts.Concurrency; n > 0 {
		c.tasks = make(chan task, 2*n)
		for range n {
			c.wg.Add(1)
			go c.poolWorker()
		}
	}
	c.wg.Add(1)
	go c.committer()
	go c.balance()
	c.log.Info("metaq client: consumer started", "topics", topics, "broadcast", c.opts.Broadcast, "concurrency", c.opts.Concurrency)
	return nil
}

// closeBalancerless marks a consumer whose Start failed so that Close does
// not wait for a balancer that never ran.
func (c *Consumer) closeBalancerless() {
	close(c.balancerDone)
}

// Assigned returns the partitions the consumer currently consumes (owned and
// fetched), per topic.
func (c *Consumer) Assigned() map[string][]Partition {
	out := map[string][]Partition{}
	c.workersMu.Lock()
	for k, w := range c.workers {
		if w.running.Load() {
			out[k.topic] = append(out[k.topic], k.p)
		}
	}
	c.workersMu.Unlock()
	for _, ps := range out {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Less(ps[j]) })
	}
	return out
}

// Commit commits the current positions now (it also happens every
// CommitInterval).
func (c *Consumer) Commit(ctx context.Context) error {
	return c.commitAll(ctx)
}

// Close stops fetching, waits for the handlers in flight (their ctx is
// cancelled), commits the offsets, releases the partitions and leaves the
// group.
func (c *Consumer) Close() error { return c.shutdown(true) }

// shutdown closes the consumer; graceful=false is a crash: ZooKeeper and the
// connections are closed first and nothing is committed (tests).
func (c *Consumer) shutdown(graceful bool) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	c.mu.Unlock()
	if !graceful {
		c.noCommit.Store(true)
		c.zk.Close() // our ephemeral nodes vanish now
		c.pool.close()
	}
	c.cancel()
	if started {
		<-c.balancerDone
	}
	c.stopWorkers(c.allWorkers(), graceful)
	if c.tasks != nil {
		close(c.tasks)
	}
	c.wg.Wait()
	var err error
	if graceful {
		err = c.store.Close()
	}
	c.trace.close(c.cfg.Producer.SendTimeout) // the last events, before the connections go
	c.pool.close()
	c.zk.Close() // ends the session: the consumer node goes with it
	return err
}

// crash stops the consumer as if its process died: ZooKeeper session and
// connections closed, nothing committed (tests).
func (c *Consumer) crash() { _ = c.shutdown(false) }

func (c *Consumer) allWorkers() []*partWorker {
	c.workersMu.Lock()
	defer c.workersMu.Unlock()
	ws := make([]*partWorker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	return ws
}

// --- balancing ----------------------------------------------------------------

type partUpdate struct {
	topic string
	tp    zkmeta.TopicPartitions
}

// balance watches the group's consumers and every subscribed topic's
// partitions and rebalances on each change, session expiry included.
func (c *Consumer) balance() {
	defer close(c.balancerDone)
	ctx := c.ctx
	updates := make(chan partUpdate)
	var fan sync.WaitGroup
	defer fan.Wait()
	for topic := range c.subs {
		ch := c.zk.WatchPartitions(ctx, topic, zkmeta.Subscribe)
		fan.Add(1)
		go func() {
			defer fan.Done()
			for tp := range ch {
				select {
				case updates <- partUpdate{topic, tp}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var membersCh <-chan []zkmeta.ConsumerInfo
	if !c.opts.Broadcast {
		membersCh = c.zk.WatchConsumers(ctx, c.group)
	}
	var members []zkmeta.ConsumerInfo
	haveMembers := false
	parts := map[string]zkmeta.TopicPartitions{}
	reset := false
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return
		case ms, ok := <-membersCh:
			if !ok {
				membersCh = nil
				continue
			}
			members, haveMembers, dirty = ms, true, true
		case u := <-updates:
			parts[u.topic] = u.tp
			c.updateAddrs(parts)
			dirty = true
		case <-c.expired:
			c.log.Warn("metaq client: ZooKeeper session expired; owner nodes are gone, rebalancing")
			reset, dirty = true, true
		case <-settle.C:
			if ctx.Err() != nil {
				return
			}
			c.rebalance(members, haveMembers, parts, reset)
			reset, dirty = false, false
			continue
		}
		if dirty {
			// Let a burst of changes (consumers starting together) settle.
			settle.Reset(20 * time.Millisecond)
		}
	}
}

func (c *Consumer) updateAddrs(parts map[string]zkmeta.TopicPartitions) {
	m := map[partKey]string{}
	keep := map[string]bool{}
	for topic, tp := range parts {
		for _, p := range tp.Partitions {
			if addr := brokerAddr(tp.Brokers[p.BrokerID]); addr != "" {
				m[partKey{topic, p}] = addr
				keep[addr] = true
			}
		}
	}
	c.addrs.Store(&m)
	if len(parts) == len(c.subs) { // every topic known: connections to brokers that left can go
		closeGone(c.pool.retain(keep))
	}
}

func (c *Consumer) addrOf(k partKey) string { return (*c.addrs.Load())[k] }

// rebalance computes this consumer's share and starts/stops partition
// workers accordingly.
func (c *Consumer) rebalance(members []zkmeta.ConsumerInfo, haveMembers bool, parts map[string]zkmeta.TopicPartitions, reset bool) {
	if reset {
		c.stopWorkers(c.allWorkers(), true)
	}
	current := map[partKey]bool{}
	c.workersMu.Lock()
	for k := range c.workers {
		current[k] = true
	}
	c.workersMu.Unlock()

	desired := map[partKey]bool{}
	for topic := range c.subs {
		tp, ok := parts[topic]
		keep := func() {
			for k := range current {
				if k.topic == topic {
					desired[k] = true
				}
			}
		}
		if !ok {
			keep()
			continue
		}
		var mine []Partition
		if c.opts.Broadcast {
			mine = tp.Partitions
		} else {
			if !haveMembers {
				keep()
				continue
			}
			var names []string
			for _, m := range members {
				for _, t := range m.Topics {
					if t == topic {
						names = append(names, m.Node)
						break
					}
				}
			}
			mine = Assign(tp.Partitions, names, c.node)
			if mine == nil && len(tp.Partitions) > 0 && !slices.Contains(names, c.node) {
				keep() // our node is not (yet) listed: wait for the next change
				continue
			}
		}
		for _, p := range mine {
			desired[partKey{topic, p}] = true
		}
	}
	var stop []*partWorker
	c.workersMu.Lock()
	for k, w := range c.workers {
		if !desired[k] {
			stop = append(stop, w)
		}
	}
	c.workersMu.Unlock()
	if len(stop) > 0 {
		c.stopWorkers(stop, true)
	}
	var started []string
	c.workersMu.Lock()
	for k := range desired {
		if c.workers[k] == nil && c.ctx.Err() == nil {
			w := c.newWorker(k)
			c.workers[k] = w
			started = append(started, k.topic+"/"+k.p.String())
			go w.run()
		}
	}
	n := len(c.workers)
	c.workersMu.Unlock()
	if len(stop) > 0 || len(started) > 0 {
		var stopped []string
		for _, w := range stop {
			stopped = append(stopped, w.key.topic+"/"+w.key.p.String())
		}
		sort.Strings(started)
		sort.Strings(stopped)
		c.log.Info("metaq client: rebalanced", "partitions", n, "released", stopped, "claiming", started)
	}
}

// stopWorkers stops workers in parallel: fetching ends, handlers in flight
// finish (their ctx is cancelled), offsets are committed (when commit) and
// owner nodes released.
func (c *Consumer) stopWorkers(ws []*partWorker, commit bool) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			w.stop(commit)
			c.workersMu.Lock()
			if c.workers[w.key] == w {
				delete(c.workers, w.key)
			}
			c.workersMu.Unlock()
		})
	}
	wg.Wait()
	if commit && !c.noCommit.Load() && len(ws) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		if err := c.store.Flush(ctx); err != nil {
			c.log.Warn("metaq client: flushing offsets", "err", err)
		}
		cancel()
	}
}

// --- committing ---------------------------------------------------------------

func (c *Consumer) committer() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			// Not derived from c.ctx, so Close does not cut a commit half-way.
			// One abandoned at the timeout may still reach ZooKeeper after
			// Close's final commit; the offset store's writes are conditional
			// and never move an offset back (zkoffsets.go), so it writes
			// nothing then.
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
			if err := c.commitAll(ctx); err != nil && c.ctx.Err() == nil {
				c.log.Warn("metaq client: committing offsets", "err", err)
			}
			cancel()
		}
	}
}

func (c *Consumer) commitAll(ctx context.Context) error {
	ws := c.allWorkers()
	if bs, ok := c.store.(batchOffsetStore); ok && len(ws) > 1 {
		return c.commitBatch(ctx, bs, ws) // zkoffsets_batch.go: multi-ops
	}
	var errs []error
	for _, w := range ws {
		if err := w.commit(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.store.Flush(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
