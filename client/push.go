package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
	"github.com/metaqgo/metaq/zkmeta"
)

// PushOptions configure a PushConsumer (docs/push.md, docs/client.md).
type PushOptions struct {
	// Concurrency is the number of handler goroutines, and the most
	// messages this consumer holds at once (default 64). It is independent
	// of the partition count: the broker hands messages of one partition to
	// any member.
	Concurrency int
	// Invisible is the lock the broker gives each delivery (default 30s,
	// as Kafka share groups): a message not acknowledged within it is
	// delivered again, to any member. Slow handlers are extended
	// automatically every Invisible/2.
	Invisible time.Duration
	// MaxWait is the long-polling wait of a pop (default 5s).
	MaxWait time.Duration
	// BatchSize bounds the messages of one pop (default 32, at most 1024).
	BatchSize int
	// Backoff is the delay before a message whose handler failed is
	// delivered again (`release` with that delay), by attempt (default
	// 1s·2^(attempt-1), at most 5 minutes); a delay below 0 is taken as 0
	// and one above 12 hours (the broker's bound) as 12 hours. After the
	// broker's maxDeliveries the message goes to %DLQ%<group>.
	Backoff func(attempt int) time.Duration
	// AckInterval: acknowledgements are batched for at most this long
	// (default 2ms) or 512 handles, whichever comes first.
	AckInterval time.Duration
}

func (o PushOptions) withDefaults() PushOptions {
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Invisible <= 0 {
		o.Invisible = 30 * time.Second
	}
	o.Invisible = max(o.Invisible, time.Duration(protocol.PopMinInvisible)*time.Millisecond)
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Second
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 32
	}
	o.BatchSize = min(o.BatchSize, protocol.PopMaxCount)
	if o.Backoff == nil {
		o.Backoff = DefaultPushBackoff
	}
	if o.AckInterval <= 0 {
		o.AckInterval = 2 * time.Millisecond
	}
	return o
}

// DefaultPushBackoff is 1s·2^(attempt-1), at most 5 minutes.
func DefaultPushBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// PushConsumer consumes topics as a member of a group through
// broker-managed delivery: no partition ownership, so a group may have
// many more members (and handler goroutines) than partitions, and one slow
// message does not hold up its partition. Each message is acknowledged
// when its handler returns nil, released for redelivery after Backoff when
// it returns an error (or panics), and its lock is extended while the
// handler runs. Delivery is at least once: a message may come again after
// a crash, a timeout or a lost acknowledgement; Message.Attempt counts.
type PushConsumer struct {
	cfg   Config
	group string
	opts  PushOptions
	log   *slog.Logger
	zk    *zkmeta.Client
	pool  *connPool

	mu      sync.Mutex
	subs    map[string]*pushSub
	started bool
	closed  bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	slots  chan struct{} // one token per message this consumer may hold
	work   chan pushItem
	wg     sync.WaitGroup // fetchers, watchers
	wwg    sync.WaitGroup // handler goroutines
	ackers sync.Map       // broker address → *acker
	awg    sync.WaitGroup
	ewg    sync.WaitGroup // lock extensions being sent

	// brokers of each subscription, from ZooKeeper (setSubBrokers)
	brokersMu  sync.Mutex
	subBrokers map[string][]string

	stats PushStats

	id    string       // names the member in its hooks' and trace events
	hooks hookList     // Config.Hooks and the trace hook; nil = none (hook.go)
	trace *traceWriter // Config.Trace (trace.go)
}

// PushStats are a PushConsumer's counters.
type PushStats struct {
	Received, Acked, Released, Extended, Failed atomic.Int64
}

type pushSub struct {
	topic   string
	tags    string
	where   string // URL-escaped
	handler Handler
	mu      sync.Mutex
	fetch   map[string]context.CancelFunc // broker address → its fetcher
}

type pushItem struct {
	sub    *pushSub
	conn   *brokerConn
	msg    *Message
	handle string
}

// NewPushConsumer creates a push consumer of group. With cfg.ZKConnect it
// finds the brokers of each topic in ZooKeeper (and follows changes);
// otherwise it uses cfg.Brokers.
func NewPushConsumer(cfg Config, group string, opts PushOptions) (*PushConsumer, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &PushConsumer{cfg: cfg, group: group, opts: opts.withDefaults(), log: cfg.Logger.With("group", group),
		subs: map[string]*pushSub{}, subBrokers: map[string][]string{}}
	if cfg.ZKConnect != "" {
		zc, err := cfg.newZK()
		if err != nil {
			return nil, err
		}
		c.zk = zc
	} else if len(cfg.Brokers) == 0 {
		return nil, errors.New("metaq client: a push consumer needs ZKConnect or Brokers")
	}
	c.pool = newConnPool(c.cfg.connConfig())
	c.id = zkmeta.NewConsumerID()
	c.hooks = c.cfg.hookList()
	if c.cfg.Trace {
		c.trace = newTraceWriter(c.pool, &c.cfg) // trace.go
		c.hooks = append(c.hooks, &consumerTrace{w: c.trace})
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.slots = make(chan struct{}, c.opts.Concurrency)
	for i := 0; i < c.opts.Concurrency; i++ {
		c.slots <- struct{}{}
	}
	c.work = make(chan pushItem, c.opts.Concurrency)
	return c, nil
}

// Subscribe registers handler for topic's messages whose tag matches
// tagExpr (`*`, "" or `a||b`). Call it before Start.
func (c *PushConsumer) Subscribe(topic, tagExpr string, handler Handler) error {
	return c.subscribe(topic, tagExpr, "", handler)
}

// SubscribeWhere is Subscribe with an SQL filter expression evaluated by
// the broker (protocol/filter; docs/protocol.md "Expression filters").
func (c *PushConsumer) SubscribeWhere(topic, where string, handler Handler) error {
	if _, err := filter.Compile(where); err != nil {
		return err
	}
	return c.subscribe(topic, "", string(protocol.AppendEscaped(nil, where)), handler)
}

func (c *PushConsumer) subscribe(topic, tags, where string, handler Handler) error {
	if err := zkmeta.ValidateName("topic", topic); err != nil {
		return err
	}
	if handler == nil {
		return errors.New("metaq client: nil handler")
	}
	if strings.ContainsAny(tags, " \r\n") {
		return fmt.Errorf("metaq client: bad tag expression %q", tags)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.closed {
		return errors.New("metaq client: Subscribe after Start or Close")
	}
	c.subs[topic] = &pushSub{topic: topic, tags: tags, where: where, handler: handler, fetch: map[string]context.CancelFunc{}}
	return nil
}

// Start begins fetching and handling.
func (c *PushConsumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.started {
		return errors.New("metaq client: push consumer already started")
	}
	if len(c.subs) == 0 {
		return errors.New("metaq client: no subscription")
	}
	c.started = true
	for i := 0; i < c.opts.Concurrency; i++ {
		c.wwg.Add(1)
		go c.worker()
	}
	for _, s := range c.subs {
		if c.zk == nil {
			c.setBrokers(s, c.cfg.Brokers)
			continue
		}
		ch := c.zk.WatchPartitions(c.ctx, s.topic, zkmeta.Subscribe)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for tp := range ch {
				var addrs []string
				for _, bi := range tp.Brokers {
					if bi.Master != "" {
						addrs = append(addrs, bi.Master)
					}
				}
				c.setSubBrokers(s, addrs)
			}
		}()
	}
	return nil
}

// setBrokers starts a fetcher per new broker of s and stops the ones of
// brokers that left.
func (c *PushConsumer) setBrokers(s *pushSub, addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[string]bool{}
	for _, a := range addrs {
		keep[a] = true
		if _, ok := s.fetch[a]; ok || c.ctx.Err() != nil {
			continue
		}
		conn := c.pool.get(a)
		if conn == nil {
			return
		}
		fctx, cancel := context.WithCancel(c.ctx)
		s.fetch[a] = cancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.fetchLoop(fctx, s, conn)
		}()
	}
	for a, cancel := range s.fetch {
		if !keep[a] {
			cancel()
			delete(s.fetch, a)
		}
	}
}

// setSubBrokers is setBrokers for ZooKeeper's view of s's brokers; it then
// closes the connections to brokers that no subscription uses any more,
// once every subscription's brokers are known (as Consumer.updateAddrs
// does): a departed broker's connection would re-dial its address for the
// consumer's life. Their ackers stop too (acks still queued fail: the
// broker redelivers those messages when their lock ends). One lock over
// both steps: a connection another subscription just opened is kept.
func (c *PushConsumer) setSubBrokers(s *pushSub, addrs []string) {
	c.brokersMu.Lock()
	c.subBrokers[s.topic] = addrs
	c.setBrokers(s, addrs)
	if len(c.subBrokers) < len(c.subs) {
		c.brokersMu.Unlock()
		return
	}
	keep := map[string]bool{}
	for _, as := range c.subBrokers {
		for _, a := range as {
			keep[a] = true
		}
	}
	gone := c.pool.retain(keep)
	c.brokersMu.Unlock()
	for _, conn := range gone {
		if v, ok := c.ackers.Load(conn.addr); ok && v.(*acker).conn == conn && c.ackers.CompareAndDelete(conn.addr, v) {
			close(v.(*acker).done)
		}
	}
	closeGone(gone)
}

// fetchLoop pops from one broker while there are free slots.
func (c *PushConsumer) fetchLoop(ctx context.Context, s *pushSub, conn *brokerConn) {
	dec := decoder{topic: s.topic, brokerID: -1}
	errBackoff := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	missBackoff := backoff{min: 50 * time.Millisecond, max: time.Second}
	for {
		// take one slot (waiting), then as many more as are free
		select {
		case <-c.slots:
		case <-ctx.Done():
			return
		}
		// No pop once Close began. A pop sent then takes what the closing
		// handlers just released (one more attempt each) only to release it
		// again, round after round, until maxDeliveries dead-letters it.
		// select picks at random between a free slot and ctx.Done(), and
		// c.ctx is checked too: cancelling it closes its Done (the handlers
		// release at once) before it cancels ctx, its child.
		if c.ctx.Err() != nil || ctx.Err() != nil {
			c.slots <- struct{}{}
			return
		}
		n := 1
		for n < c.opts.BatchSize {
			select {
			case <-c.slots:
				n++
				continue
			default:
			}
			break
		}
		// The pop itself is not cancelled by Close: what the broker hands
		// out is then released at once instead of staying locked for
		// Invisible (Close waits up to MaxWait for it).
		start := time.Now()
		got, err := c.pop(context.Background(), s, conn, n, &dec)
		for i := got; i < n; i++ {
			c.slots <- struct{}{}
		}
		if err == nil && got == 0 && time.Since(start) < c.opts.MaxWait/2 {
			// Nothing, long before MaxWait: not a long poll that waited
			// but a broker that does not serve the topic here, or one
			// shutting down (404 at once). Wait instead of spinning on it,
			// as Consumer.fetch does.
			if !sleepCtx(ctx, missBackoff.next()) {
				return
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := errBackoff.next()
			c.log.Warn("metaq client: pop failed", "broker", conn.addr, "topic", s.topic, "err", err, "retryIn", d)
			if !sleepCtx(ctx, d) {
				return
			}
			continue
		}
		missBackoff.reset()
		errBackoff.reset()
	}
}

// pop sends one pop and queues its deliveries for the workers.
func (c *PushConsumer) pop(ctx context.Context, s *pushSub, conn *brokerConn, n int, dec *decoder) (int, error) {
	invMs := c.opts.Invisible.Milliseconds()
	waitMs := c.opts.MaxWait.Milliseconds()
	cl, err := conn.do(ctx, kindGet, c.opts.MaxWait+c.cfg.RequestTimeout, func(dst []byte, opaque int32) []byte {
		return protocol.AppendPop(dst, s.topic, c.group, n, invMs, waitMs, opaque, s.tags, s.where)
	})
	if err != nil {
		return 0, err
	}
	defer putCall(cl)
	if !cl.value {
		if cl.code == protocol.StatusNotFound {
			return 0, nil
		}
		return 0, fmt.Errorf("pop: %d %s", cl.code, cl.body)
	}
	got := 0
	body := cl.body // a fresh buffer (kindGet): messages may alias it
	err = protocol.PopValue(body, func(attempt int, rec []byte) error {
		r, _, err := protocol.DecodeRecord(rec, 0)
		if err != nil {
			return err
		}
		m := &Message{}
		dec.decode(m, &r)
		m.Attempt = attempt
		h := s.topic + ":" + itoa(int64(r.Partition)) + ":" + itoa(r.QueueOffset) + ":" + itoa(int64(attempt))
		got++
		c.stats.Received.Add(1)
		c.work <- pushItem{sub: s, conn: conn, msg: m, handle: h}
		return nil
	})
	return got, err
}

func itoa(v int64) string { return fmt.Sprint(v) }

func (c *PushConsumer) worker() {
	defer c.wwg.Done()
	for it := range c.work {
		c.handle(it)
		c.slots <- struct{}{}
	}
}

// handle runs the handler, extending the lock while it runs, then acks or
// releases.
func (c *PushConsumer) handle(it pushItem) {
	if c.ctx.Err() != nil { // closing: give it back at once
		c.finish(it.conn, protocol.OpRelease, 0, it.handle)
		return
	}
	// The lock is extended every Invisible/2 while the handler runs: a timer,
	// no goroutine, until it fires.
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(c.opts.Invisible/2, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		c.ewg.Add(1) // Close waits for an extension in progress
		mu.Unlock()
		defer c.ewg.Done()
		c.stats.Extended.Add(1)
		c.finish(it.conn, protocol.OpExtend, c.opts.Invisible.Milliseconds(), it.handle)
		mu.Lock()
		if !stopped {
			t.Reset(c.opts.Invisible / 2)
		}
		mu.Unlock()
	})
	mu.Unlock()
	var ev *ConsumeEvent
	if c.hooks != nil {
		ev = c.beforeConsume(it) // hook.go
	}
	err := c.call(it, ev)
	mu.Lock()
	stopped = true
	t.Stop()
	mu.Unlock()
	delay := time.Duration(0)
	if err != nil && c.ctx.Err() == nil {
		delay = releaseDelay(c.opts.Backoff(it.msg.Attempt))
	}
	if ev != nil {
		c.afterConsume(ev, err, delay) // hook.go
	}
	if err == nil {
		c.stats.Acked.Add(1)
		c.acker(it.conn).add(it.handle)
		return
	}
	c.stats.Failed.Add(1)
	c.stats.Released.Add(1)
	c.finish(it.conn, protocol.OpRelease, delay.Milliseconds(), it.handle)
}

// maxReleaseDelay is the longest delay a broker takes in `release` (its
// invisibility bound, docs/protocol.md): beyond it, or below 0, the release
// is refused with 400 and the message came back only when its lock ended.
const maxReleaseDelay = protocol.PopMaxInvisible * time.Millisecond

// releaseDelay is a Backoff's delay within what a release takes.
func releaseDelay(d time.Duration) time.Duration {
	return min(max(d, 0), maxReleaseDelay)
}

func (c *PushConsumer) call(it pushItem, ev *ConsumeEvent) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &HandlerPanic{Value: r, Stack: debug.Stack()} // as Consumer's (worker.go)
			c.log.Error("metaq client: handler panicked", "msg", it.msg.String(), "panic", r)
		}
	}()
	ctx := c.ctx
	if ev != nil {
		ctx = ev.Ctx
	}
	return it.sub.handler(ctx, it.msg)
}

// finish sends release or extend for one handle (errors are logged: the
// broker redelivers when its lock ends anyway).
func (c *PushConsumer) finish(conn *brokerConn, op protocol.Op, ms int64, handle string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	cl, err := conn.do(ctx, kindOther, c.cfg.RequestTimeout, func(dst []byte, opaque int32) []byte {
		return protocol.AppendFinish(dst, op, c.group, ms, []byte(handle), opaque)
	})
	if err != nil {
		c.log.Debug("metaq client: "+op.String()+" failed", "handle", handle, "err", err)
		return
	}
	putCall(cl)
}

// acker batches acknowledgements to one broker.
type acker struct {
	c    *PushConsumer
	conn *brokerConn
	mu   sync.Mutex
	hs   []byte
	n    int
	kick chan struct{}
	done chan struct{}
}

func (c *PushConsumer) acker(conn *brokerConn) *acker {
	for {
		v, ok := c.ackers.Load(conn.addr)
		if ok && v.(*acker).conn == conn {
			return v.(*acker)
		}
		a := &acker{c: c, conn: conn, kick: make(chan struct{}, 1), done: make(chan struct{})}
		if ok {
			// The address's connection was replaced (setSubBrokers closed
			// it, the broker came back): acks go on the connection their
			// message came from. Whoever removes an acker from the map
			// stops it.
			if !c.ackers.CompareAndSwap(conn.addr, v, a) {
				continue
			}
			close(v.(*acker).done)
		} else if _, loaded := c.ackers.LoadOrStore(conn.addr, a); loaded {
			continue
		}
		c.awg.Add(1)
		go a.loop()
		return a
	}
}

func (a *acker) add(h string) {
	a.mu.Lock()
	if len(a.hs) > 0 {
		a.hs = append(a.hs, ' ')
	}
	a.hs = append(a.hs, h...)
	a.n++
	n := a.n
	a.mu.Unlock()
	if n == 1 || n >= maxAckBatch {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

func (a *acker) loop() {
	defer a.c.awg.Done()
	var buf []byte
	for {
		select {
		case <-a.kick:
		case <-a.done:
			a.flush(&buf)
			return
		}
		t := time.NewTimer(a.c.opts.AckInterval)
		select {
		case <-t.C:
		case <-a.done:
		}
		t.Stop()
		a.flush(&buf)
	}
}

func (a *acker) flush(buf *[]byte) {
	for {
		a.mu.Lock()
		if a.n == 0 {
			a.mu.Unlock()
			return
		}
		*buf, a.hs = a.hs, (*buf)[:0]
		a.n = 0
		a.mu.Unlock()
		// What queued up while the previous ack was in flight may be many
		// more than maxAckBatch handles: one command each maxAckBatch, so
		// that none passes the broker's maxMessageSize (a protocol error
		// that closes the connection and loses them all).
		for rest := *buf; len(rest) > 0; {
			var hs []byte
			hs, rest = cutHandles(rest, maxAckBatch)
			a.send(hs)
		}
	}
}

// maxAckBatch is the most handles of one ack command (docs/push.md).
const maxAckBatch = 512

// cutHandles splits the first n handles off a space-separated list.
func cutHandles(hs []byte, n int) (head, rest []byte) {
	for i, b := range hs {
		if b == ' ' {
			if n--; n == 0 {
				return hs[:i], hs[i+1:]
			}
		}
	}
	return hs, nil
}

func (a *acker) send(hs []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), a.c.cfg.RequestTimeout)
	cl, err := a.conn.do(ctx, kindOther, a.c.cfg.RequestTimeout, func(dst []byte, opaque int32) []byte {
		return protocol.AppendFinish(dst, protocol.OpAck, a.c.group, 0, hs, opaque)
	})
	cancel()
	if err != nil {
		a.c.log.Warn("metaq client: ack failed; the messages will be delivered again", "broker", a.conn.addr, "err", err)
		return
	}
	if cl.code != protocol.StatusSuccess {
		a.c.log.Debug("metaq client: some acks were not current", "broker", a.conn.addr, "reply", string(cl.body))
	}
	putCall(cl)
}

// Stats returns the consumer's counters.
func (c *PushConsumer) Stats() *PushStats { return &c.stats }

// Close stops fetching (a pop in progress is waited for, up to MaxWait),
// lets running handlers finish (their context is cancelled), releases the
// messages not yet handled so that other members get them at once, sends
// the pending acknowledgements and closes the connections.
func (c *PushConsumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait() // fetchers and watchers are gone: nothing more is queued
	if started {
		close(c.work)
		c.wwg.Wait()
		c.ewg.Wait()
	}
	c.ackers.Range(func(_, v any) bool { close(v.(*acker).done); return true })
	c.awg.Wait()
	c.trace.close(c.cfg.RequestTimeout) // the last events, before the connections go
	c.pool.close()
	if c.zk != nil {
		c.zk.Close()
	}
	return nil
}
