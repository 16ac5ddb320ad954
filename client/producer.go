package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Producer sends messages. It reads each topic's partitions (topics-pub,
// masters only) and the brokers' addresses from ZooKeeper on first use and
// keeps watching them, so brokers joining or leaving are picked up without a
// restart. It keeps one connection per broker with many requests in flight.
// A Producer is safe for concurrent use.
type Producer struct {
	cfg  Config
	opts *ProducerOptions
	log  *slog.Logger
	zk   *zkmeta.Client // nil in direct mode
	pool *connPool

	ctx    context.Context // ends at Close: stops the watches
	cancel context.CancelFunc

	routes   routeMap   // topic → *topicRoute; added to under mu
	mu       sync.Mutex // route creation and updates
	closeMu  sync.Mutex // closed vs wg.Add of retries
	closed   atomic.Bool
	inflight atomic.Int64  // SendAsync calls whose callback has not returned
	idle     chan struct{} // closed once closed and inflight is 0 (signalIdle)
	idleOnce sync.Once
	moved    atomic.Uint64 // messages moved off their partition (pick, spread)
	wg       sync.WaitGroup

	free      sendFree    // async send states back from the readers (sendfree.go)
	lingers   lingerer    // SendAsync batches waiting for Linger (batch.go)
	direct    *routeTable // direct mode (Config.Brokers)
	directIDs sync.Map    // addr → broker id (learned with `stats`)

	hooks hookList     // Config.Hooks; nil = none (hook.go)
	trace *traceWriter // Config.Trace (trace.go): called directly, not as a hook
}

// routeMap is the producer's topic → route table: an immutable map replaced
// as a whole when a topic is added (under Producer.mu), so a send finds its
// topic with one plain map read. A sync.Map's trie walk and interface hash
// cost 0.09 µs more per message when sends go round-robin over 1,000 topics
// (CPU profile of `metaq bench topics`).
//
// In front of the map sits a direct-mapped table of routes indexed by the
// address of the topic string's bytes: a send whose Topic shares its bytes
// with the string the route was made for — a constant, a name kept in the
// application's configuration, a Message reused — finds its route with one
// load and a pointer compare, without hashing the name and probing the map
// (with 1,000 topics round-robin the map's lookup missed the CPU cache
// twice: its group and the key's bytes). A route is never removed or
// replaced, so a slot never goes stale; strings are immutable and the route
// keeps its topic's bytes alive, so the same address and length are the same
// name. Other sends (a topic built per message) take the map, as before.
type routeMap struct {
	m     atomic.Pointer[map[string]*topicRoute]
	slots atomic.Pointer[[]atomic.Pointer[topicRoute]] // sized to the map (loadOrAddLocked)
}

func (r *routeMap) load(topic string) *topicRoute {
	sp := r.slots.Load()
	if sp == nil {
		return nil
	}
	slot := &(*sp)[routeSlot(topic, len(*sp))]
	if rt := slot.Load(); rt != nil && unsafe.StringData(rt.topic) == unsafe.StringData(topic) && len(rt.topic) == len(topic) {
		return rt
	}
	rt := (*r.m.Load())[topic]
	if rt != nil && unsafe.StringData(rt.topic) == unsafe.StringData(topic) && slot.Load() == nil {
		slot.Store(rt) // the first route to land on a slot keeps it: no ping-pong between two
	}
	return rt
}

// routeSlot is the slot of topic's bytes in a table of n (a power of two,
// at least 2): Fibonacci hashing of the address, its top bits.
func routeSlot(topic string, n int) int {
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(topic)))) * 0x9e3779b97f4a7c15
	return int(h >> (64 - bits.TrailingZeros(uint(n))))
}

// loadOrAddLocked returns topic's route, adding nr when there is none
// (Producer.mu held); added reports whether nr was added.
func (r *routeMap) loadOrAddLocked(topic string, nr *topicRoute) (_ *topicRoute, added bool) {
	var old map[string]*topicRoute
	if m := r.m.Load(); m != nil {
		old = *m
	}
	if v := old[topic]; v != nil {
		return v, false
	}
	m := maps.Clone(old)
	if m == nil {
		m = make(map[string]*topicRoute, 1)
	}
	m[topic] = nr
	r.m.Store(&m)
	// 8 slots per route (at most 1<<14): a table grown for more routes
	// starts empty and fills as sends find their routes in the map.
	if sp := r.slots.Load(); sp == nil || len(*sp) < min(8*len(m), 1<<14) {
		slots := make([]atomic.Pointer[topicRoute], min(max(8, 1<<bits.Len(uint(8*len(m)-1))), 1<<14))
		r.slots.Store(&slots)
	}
	return nr, true
}

// all returns every route (read-only).
func (r *routeMap) all() map[string]*topicRoute {
	if m := r.m.Load(); m != nil {
		return *m
	}
	return nil
}

// topicRoute is a topic's partitions with their connections, replaced as a
// whole when ZooKeeper changes.
type topicRoute struct {
	topic  string
	ready  chan struct{} // closed after the first read from ZooKeeper
	loaded atomic.Bool
	cur    atomic.Pointer[routeTable]
}

type routeTable struct {
	parts []Partition   // sorted (brokerId, partition)
	conns []*brokerConn // conns[i] serves parts[i]
	// direct: partitions are unknown; parts[i] is a placeholder for broker
	// address i and puts go to partition -1 (the broker picks).
	direct bool
}

// sendState is one send — Send, SendAsync, SendToPartition — through all
// its attempts. It owns the call of the current attempt (a connection sees
// only the call); an async send finds its state again through the call's
// onDone, the method value s.done bound once per pooled state.
type sendState struct {
	cl    *call
	done  func(*call) // s.asyncDone, bound once (no allocation per send)
	p     *Producer
	msg   *Message
	cb    func(SendResult, error)
	route *topicRoute
	tbl   *routeTable
	attemptPos
	props *bytebufferpool.ByteBuffer // the properties line (appendProps)
	data  protocol.MessageData       // msg's data block, props included
	ev    *SendEvent                 // what hooks see (only with hooks; kept by reset: a third of the state's bytes, cleared per send otherwise)
	t0    time.Duration              // trace: when the send began (traceClock; only with Config.Trace)
}

var sendPool sync.Pool // of *sendState (New set in init: it refers to release)

func init() {
	sendPool.New = func() any {
		s := &sendState{cl: newCall()}
		s.done = s.asyncDone
		return s
	}
}

// newSend takes a pooled send state for msg with its properties line and
// data block built (the properties line in a bytebufferpool buffer: its
// size varies with the message's tags, keys and properties).
func (p *Producer) newSend(ctx context.Context, msg *Message) (*sendState, error) {
	s := p.free.get() // sendfree.go
	if s == nil {
		s = sendPool.Get().(*sendState)
	}
	s.cl.kind = kindPut
	s.p, s.msg = p, msg
	s.failedBroker, s.idx = -1, -1
	if p.hooks != nil {
		p.beforeSend(ctx, s) // hook.go
	}
	if p.trace != nil {
		s.t0 = traceClock() // trace.go
	}
	var props []byte
	if hasProps(msg) { // a plain message skips the pool (its Get and Put were ~7% of async publish)
		s.props = bytebufferpool.Get()
		s.props.B = appendProps(s.props.B[:0], msg)
		if len(s.props.B) > protocol.MaxPropertiesLen {
			err := fmt.Errorf("metaq client: properties line of %d bytes exceeds %d", len(s.props.B), protocol.MaxPropertiesLen)
			p.sendEnded(s, SendResult{}, err, "") // every BeforeSend has its AfterSend
			s.release()
			return nil, err
		}
		props = s.props.B
	}
	s.data = messageData(msg, props)
	s.ordered = p.opts.Selector.Ordered(msg)
	return s, nil
}

// release returns the state (and its call and buffer) to their pools.
func (s *sendState) release() {
	s.reset()
	sendPool.Put(s)
}

// reset clears the state for its next send (its buffer back to its pool).
func (s *sendState) reset() {
	s.cl.reset()
	if s.props != nil {
		bytebufferpool.Put(s.props)
	}
	cl, done, ev := s.cl, s.done, s.ev
	if ev != nil {
		*ev = SendEvent{}
	}
	*s = sendState{cl: cl, done: done, ev: ev}
}

// asyncDone is the async attempt's completion (call.onDone).
func (s *sendState) asyncDone(*call) { s.p.asyncDone(s) }

// NewProducer creates a producer. It does not block: ZooKeeper is contacted
// in the background and the first Send to a topic waits for its partitions.
func NewProducer(cfg Config) (*Producer, error) { return newProducer(cfg, nil) }

// newProducer is NewProducer with connection hooks (transaction producers).
func newProducer(cfg Config, hooks func(*connConfig)) (*Producer, error) {
	cfg = cfg.withDefaults()
	p := &Producer{cfg: cfg, log: cfg.Logger, idle: make(chan struct{})}
	p.opts = &p.cfg.Producer
	cc := p.cfg.connConfig()
	if hooks != nil {
		hooks(cc)
	}
	cc.sendsDone = p.sendsDone // sendfree.go
	p.pool = newConnPool(cc)
	if p.cfg.Trace {
		// Before any connection is made: a traced producer's connections
		// mark its messages (`trace on`) and encode its events (trace.go).
		// The trace records ride the same connections as puts that take no
		// window slot (startFreePut).
		p.trace = newTraceWriter(p.pool, &p.cfg)
		cc.trace = p.trace
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	switch {
	case cfg.ZKConnect != "":
		zc, err := cfg.newZK()
		if err != nil {
			p.trace.close(0)
			return nil, err
		}
		p.zk = zc
	case len(cfg.Brokers) > 0:
		t := &routeTable{direct: true}
		for i, addr := range cfg.Brokers {
			t.parts = append(t.parts, Partition{BrokerID: -1, Partition: i})
			t.conns = append(t.conns, p.pool.get(addr))
		}
		p.direct = t
	default:
		p.trace.close(0)
		return nil, errors.New("metaq client: Config.ZKConnect (or Config.Brokers) is required")
	}
	p.hooks = p.cfg.hookList()
	return p, nil
}

// Send sends msg and waits for the broker's answer. On a retriable failure
// (connection lost, timeout, 500/503) it tries another partition, preferably
// on another broker, up to SendRetries times; messages the selector marks as
// ordered are not retried elsewhere. ctx bounds the whole call; each attempt
// is also bounded by SendTimeout. A send that timed out may still have been
// stored (at-least-once).
func (p *Producer) Send(ctx context.Context, msg *Message) (SendResult, error) {
	if p.closed.Load() {
		return SendResult{}, ErrClosed
	}
	if err := msg.validate(p.opts.MaxMessageSize); err != nil {
		return SendResult{}, err
	}
	route, err := p.route(ctx, msg.Topic)
	if err != nil {
		return SendResult{}, err
	}
	s, err := p.newSend(ctx, msg)
	if err != nil {
		return SendResult{}, err
	}
	res, err := p.sendSync(ctx, route, s)
	p.sendEnded(s, res, err, "")
	s.release()
	return res, err
}

// sendSync runs Send's attempts.
func (p *Producer) sendSync(ctx context.Context, route *topicRoute, s *sendState) (SendResult, error) {
	msg := s.msg
	cl := s.cl
	var lastErr error
	for ; s.attempt <= p.opts.SendRetries; s.attempt++ {
		t := route.table()
		if len(t.parts) == 0 {
			if lastErr == nil {
				lastErr = fmt.Errorf("%w %s", ErrNoPartitions, msg.Topic)
			}
			break
		}
		s.tbl, s.idx = t, p.pick(t, msg, &s.attemptPos)
		cl.err, cl.code = nil, 0
		err := t.conns[s.idx].put(ctx, cl, p.opts.SendTimeout, msg.Topic, t.putPartition(s.idx), &s.data, !p.opts.NoChecksum)
		if err == nil {
			return p.result(cl, t, s.idx), nil
		}
		lastErr = err
		if s.ordered || !IsRetriable(err) || ctx.Err() != nil || p.closed.Load() {
			break
		}
		s.failedBroker = t.brokerOf(s.idx)
	}
	return SendResult{}, lastErr
}

// SendAsync sends msg without waiting; cb (which may be nil) is called
// exactly once with the result, from a connection goroutine: keep it short
// and do not call Close from it. Many sends are in flight at once (up to
// MaxInFlight per broker connection; SendAsync blocks, bounded by ctx, when
// the window is full). Failures are retried like Send's. ctx bounds the
// waiting for a window slot and, when it has a deadline, the send itself;
// it is not kept after SendAsync returns. With Linger, the window is the
// connection's bound on lingering messages (docs/client.md, "Batching"),
// and a SendAsync whose ctx ends while it waits fails with ctx.Err(). msg
// must not be changed until cb ran.
func (p *Producer) SendAsync(ctx context.Context, msg *Message, cb func(SendResult, error)) {
	p.inflight.Add(1)
	if p.closed.Load() {
		p.asyncFail(cb, ErrClosed)
		return
	}
	if err := msg.validate(p.opts.MaxMessageSize); err != nil {
		p.asyncFail(cb, err)
		return
	}
	route, err := p.route(ctx, msg.Topic)
	if err != nil {
		p.asyncFail(cb, err)
		return
	}
	if p.opts.Linger > 0 && p.linger(ctx, route, msg, cb) { // batch.go
		return
	}
	s, err := p.newSend(ctx, msg)
	if err != nil {
		p.asyncFail(cb, err)
		return
	}
	s.cb, s.route = cb, route
	p.attemptAsync(ctx, s)
}

// SendToPartition sends msg to one partition, without selection or retries.
// In direct mode (Config.Brokers) with one broker, part.BrokerID is not
// checked; with several, the broker ids are learned with `stats` (a broker
// that does not answer is skipped).
func (p *Producer) SendToPartition(ctx context.Context, msg *Message, part Partition) (SendResult, error) {
	if p.closed.Load() {
		return SendResult{}, ErrClosed
	}
	if err := msg.validate(p.opts.MaxMessageSize); err != nil {
		return SendResult{}, err
	}
	conn, err := p.connFor(ctx, msg.Topic, part)
	if err != nil {
		return SendResult{}, err
	}
	s, err := p.newSend(ctx, msg) // no selection, no retry: only its call and data block are used
	if err != nil {
		return SendResult{}, err
	}
	cl := s.cl
	var res SendResult
	err = conn.put(ctx, cl, p.opts.SendTimeout, msg.Topic, int32(part.Partition), &s.data, !p.opts.NoChecksum)
	if err == nil {
		bid, _ := protocol.SplitMsgID(cl.msgID)
		res = SendResult{MsgID: cl.msgID, Partition: Partition{BrokerID: bid, Partition: int(cl.partition)}, Offset: cl.offset}
	}
	p.sendEnded(s, res, err, conn.addr)
	s.release()
	return res, err
}

// Partitions returns the partitions the producer currently sends topic to
// (sorted by broker id, partition); nil in direct mode.
func (p *Producer) Partitions(ctx context.Context, topic string) ([]Partition, error) {
	if p.direct != nil {
		return nil, nil
	}
	r, err := p.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	return append([]Partition(nil), r.table().parts...), nil
}

// Close waits (up to SendTimeout) for async sends in flight, then closes the
// connections (sends still pending fail with ErrClosed) and the ZooKeeper
// session.
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closeMu.Lock()
	if p.closed.Load() {
		p.closeMu.Unlock()
		p.mu.Unlock()
		return nil
	}
	p.closed.Store(true)
	p.closeMu.Unlock()
	p.mu.Unlock()
	p.flushLingering() // batch.go: lingering messages go out now
	if p.inflight.Load() == 0 {
		p.signalIdle()
	}
	t := time.NewTimer(p.opts.SendTimeout + time.Second)
	select {
	case <-p.idle: // the last async send in flight completed
	case <-t.C:
	}
	t.Stop()
	p.trace.syncRings(p.opts.SendTimeout) // trace.go: what the readers still hold
	p.trace.close(p.opts.SendTimeout)     // the last events, before the connections go
	// Cancelled under closeMu: asyncDone decides to retry, and adds the
	// retry to wg, under it, so a retry either sees the cancel or is in wg
	// before the Wait below (it could otherwise start, and call its
	// callback, after Close returned).
	p.closeMu.Lock()
	p.cancel()
	p.closeMu.Unlock()
	p.pool.close()
	p.wg.Wait()
	if p.zk != nil {
		p.zk.Close()
	}
	return nil
}

// --- internals ----------------------------------------------------------------

// sendDone counts an async send's callback as returned; the last one after
// Close signals Close.
func (p *Producer) sendDone() {
	if p.inflight.Add(-1) == 0 && p.closed.Load() {
		p.signalIdle()
	}
}

func (p *Producer) signalIdle() { p.idleOnce.Do(func() { close(p.idle) }) }

func (t *routeTable) putPartition(i int) int32 {
	if t.direct {
		return -1
	}
	return int32(t.parts[i].Partition)
}

// brokerOf identifies the broker of partition i, for steering retries away
// from it: its broker id, or -2-i in direct mode (where ids are unknown and
// entry i is broker address i).
func (t *routeTable) brokerOf(i int) int {
	if t.direct {
		return -2 - i
	}
	return t.parts[i].BrokerID
}

func (p *Producer) result(cl *call, t *routeTable, idx int) SendResult {
	part := Partition{BrokerID: t.parts[idx].BrokerID, Partition: int(cl.partition)}
	if t.direct {
		part.BrokerID, _ = protocol.SplitMsgID(cl.msgID)
	}
	return SendResult{MsgID: cl.msgID, Partition: part, Offset: cl.offset}
}

func (p *Producer) asyncFail(cb func(SendResult, error), err error) {
	if cb != nil {
		cb(SendResult{}, err)
	}
	p.sendDone()
}

// attemptAsync starts one attempt of an async send; failures to start go
// through asyncDone like failed replies.
func (p *Producer) attemptAsync(ctx context.Context, s *sendState) {
	cl := s.cl
	t := s.route.table()
	if len(t.parts) == 0 {
		cl.err = fmt.Errorf("%w %s", ErrNoPartitions, s.msg.Topic)
		s.ordered = true // nothing to retry on
		p.asyncDone(s)
		return
	}
	s.tbl, s.idx = t, p.pick(t, s.msg, &s.attemptPos)
	conn := t.conns[s.idx]
	cl.err, cl.code = nil, 0
	cl.stamp, cl.by = 0, nil
	cl.onDone = s.done
	if err := conn.startPut(ctx, cl, conn.deadlineFor(ctx, p.opts.SendTimeout), s.msg.Topic, t.putPartition(s.idx), &s.data, !p.opts.NoChecksum); err != nil {
		cl.err = err
		p.asyncDone(s)
	}
}

// asyncDone completes an async attempt: success, a retry on another
// partition (in a new goroutine: this may run on a connection's reader), or
// the final error.
func (p *Producer) asyncDone(s *sendState) {
	cl := s.cl
	err := cl.err
	if err == nil && cl.code != protocol.StatusSuccess {
		err = brokerErr(s.tbl.conns[s.idx].addr, cl.code, cl.body)
	}
	if err != nil && !s.ordered && IsRetriable(err) && s.attempt < p.opts.SendRetries {
		p.closeMu.Lock()
		if p.ctx.Err() == nil { // not closed yet (Close drains async sends first)
			s.attempt++
			s.failedBroker = s.tbl.brokerOf(s.idx)
			p.wg.Add(1)
			p.closeMu.Unlock()
			go func() {
				defer p.wg.Done()
				p.attemptAsync(p.ctx, s)
			}()
			return
		}
		p.closeMu.Unlock()
	}
	var res SendResult
	if err == nil {
		res = p.result(cl, s.tbl, s.idx)
	}
	p.sendEnded(s, res, err, "")
	cb := s.cb
	// Completed by a connection's reader: the state goes back to p with
	// the reader's batch of replies (sendfree.go), which also counts the
	// send as done once cb returned.
	by := cl.by
	s.reset()
	if by == nil || !by.retire(s) {
		sendPool.Put(s)
		by = nil
	}
	if cb != nil {
		cb(res, err)
	}
	if by == nil {
		p.sendDone()
	}
}

// attemptPos is where a send (one message or one batch) is in its attempts:
// what pick needs to choose the next partition.
type attemptPos struct {
	idx          int // index of the partition in the route table (-1: none yet)
	attempt      int
	ordered      bool
	failedBroker int
}

// pick chooses the partition of an attempt: the selector's choice first
// (moved off a broker that is down unless ordered), then, on retries, a
// partition on another broker that is up.
//
// A message moved off its partition goes to the healthy partitions in turn
// (p.spread), not to the next one in the list: "the next one" is the first
// partition of the next broker, which then takes the whole share of a broker
// that is down or restarting on top of its own (every broker's partition 0
// got ~12% more than the others in a chaos run with restarts). Taking the
// moved messages round-robin over the partitions that can take them keeps
// every live partition within one message of its share.
func (p *Producer) pick(t *routeTable, msg *Message, s *attemptPos) int {
	n := len(t.parts)
	if s.attempt == 0 || s.idx < 0 || s.idx >= n {
		i := p.opts.Selector.Select(msg, t.parts)
		if i < 0 || i >= n {
			i = ((i % n) + n) % n
		}
		if s.ordered || t.conns[i].healthy() {
			return i
		}
		if j := p.spread(t, -1, true); j >= 0 {
			return j
		}
		return i
	}
	if s.ordered {
		return s.idx
	}
	if j := p.spread(t, s.failedBroker, true); j >= 0 {
		return j
	}
	if j := p.spread(t, s.failedBroker, false); j >= 0 {
		return j
	}
	return (s.idx + 1) % n
}

// spread returns the next, in turn, of t's partitions that are not on
// broker avoid (any broker when avoid is -1: no broker id is -1 in a
// ZooKeeper route, and direct-mode ids are ≤ -2) and, when mustBeHealthy,
// whose connection is up; -1 when there is none. One counter for every
// topic: each call moves it by one, so the moved messages rotate over the
// candidates instead of piling up on the first.
func (p *Producer) spread(t *routeTable, avoid int, mustBeHealthy bool) int {
	ok := func(j int) bool {
		return t.brokerOf(j) != avoid && (!mustBeHealthy || t.conns[j].healthy())
	}
	m := 0
	for j := range t.parts {
		if ok(j) {
			m++
		}
	}
	if m == 0 {
		return -1
	}
	k := int(p.moved.Add(1) % uint64(m))
	for j := range t.parts {
		if ok(j) {
			if k == 0 {
				return j
			}
			k--
		}
	}
	return -1 // health changed between the two loops: the caller falls back
}

var emptyTable = &routeTable{}

func (r *topicRoute) table() *routeTable {
	if t := r.cur.Load(); t != nil {
		return t
	}
	return emptyTable
}

// route returns the topic's route, loading it from ZooKeeper (and starting
// its watch) on first use.
func (p *Producer) route(ctx context.Context, topic string) (*topicRoute, error) {
	if r := p.routes.load(topic); r != nil {
		if r.loaded.Load() {
			return r, nil
		}
		return r, p.waitRoute(ctx, r)
	}
	if p.direct != nil {
		r := &topicRoute{topic: topic, ready: make(chan struct{})}
		r.cur.Store(p.direct)
		r.loaded.Store(true)
		close(r.ready)
		p.mu.Lock()
		r, _ = p.routes.loadOrAddLocked(topic, r)
		p.mu.Unlock()
		return r, nil
	}
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	r, added := p.routes.loadOrAddLocked(topic, &topicRoute{topic: topic, ready: make(chan struct{})})
	if added {
		ch := p.zk.WatchPartitions(p.ctx, topic, zkmeta.Publish)
		p.wg.Add(1)
		go p.watchRoute(r, ch)
	}
	p.mu.Unlock()
	return r, p.waitRoute(ctx, r)
}

func (p *Producer) waitRoute(ctx context.Context, r *topicRoute) error {
	t := time.NewTimer(p.cfg.ZKConnectionTimeout)
	defer t.Stop()
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("metaq client: partitions of topic %s not read from ZooKeeper within %s", r.topic, p.cfg.ZKConnectionTimeout)
	case <-p.ctx.Done():
		return ErrClosed
	}
}

func (p *Producer) watchRoute(r *topicRoute, ch <-chan zkmeta.TopicPartitions) {
	defer p.wg.Done()
	for tp := range ch {
		p.mu.Lock()
		if p.closed.Load() && p.ctx.Err() != nil {
			p.mu.Unlock()
			return
		}
		old := r.table()
		t := &routeTable{}
		for _, part := range tp.Partitions {
			bi := tp.Brokers[part.BrokerID]
			if bi.Master == "" {
				continue // never write to a slave
			}
			c := p.pool.get(bi.Master)
			if c == nil {
				break
			}
			t.parts = append(t.parts, part)
			t.conns = append(t.conns, c)
		}
		r.cur.Store(t)
		if !r.loaded.Load() {
			r.loaded.Store(true)
			close(r.ready)
		}
		gone := p.gcConnsLocked()
		p.mu.Unlock()
		closeGone(gone)
		if len(old.parts) != len(t.parts) {
			p.log.Debug("metaq client: producer partitions changed", "topic", r.topic, "partitions", len(t.parts))
		}
	}
}

// gcConnsLocked removes the connections no route uses any more (brokers
// that left); the caller closes them after unlocking.
func (p *Producer) gcConnsLocked() []*brokerConn {
	keep := map[string]bool{}
	for _, r := range p.routes.all() {
		if t := r.cur.Load(); t != nil {
			for _, c := range t.conns {
				keep[c.addr] = true
			}
		}
	}
	return p.pool.retain(keep)
}

// connFor finds the connection serving one partition.
func (p *Producer) connFor(ctx context.Context, topic string, part Partition) (*brokerConn, error) {
	if p.direct != nil {
		if len(p.direct.conns) == 1 {
			return p.direct.conns[0], nil
		}
		// A broker that cannot tell its id (down) is skipped: failing
		// there would keep a half message's outcome (txproducer.go) or a
		// SendToPartition from the broker that is up. Its error is
		// reported only when no broker has the id.
		var lookupErr error
		for _, c := range p.direct.conns {
			id, err := p.directBrokerID(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				if lookupErr == nil {
					lookupErr = err
				}
				continue
			}
			if id == part.BrokerID {
				return c, nil
			}
		}
		if lookupErr != nil {
			return nil, fmt.Errorf("metaq client: no reachable broker with id %d among %v: %w", part.BrokerID, p.cfg.Brokers, lookupErr)
		}
		return nil, fmt.Errorf("metaq client: no broker with id %d among %v", part.BrokerID, p.cfg.Brokers)
	}
	r, err := p.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	t := r.table()
	for i, q := range t.parts {
		if q == part {
			return t.conns[i], nil
		}
	}
	return nil, fmt.Errorf("metaq client: partition %s of topic %s is not published", part, topic)
}

func (p *Producer) directBrokerID(ctx context.Context, c *brokerConn) (int, error) {
	if v, ok := p.directIDs.Load(c.addr); ok {
		return v.(int), nil
	}
	stats, err := statsOn(ctx, c, "", p.cfg.RequestTimeout)
	if err != nil {
		return 0, err
	}
	for _, s := range stats {
		if s.Key == "broker_id" {
			id, err := strconv.Atoi(s.Value)
			if err != nil {
				return 0, fmt.Errorf("metaq client: broker %s reports broker_id %q", c.addr, s.Value)
			}
			p.directIDs.Store(c.addr, id)
			return id, nil
		}
	}
	return 0, fmt.Errorf("metaq client: broker %s does not report its broker_id", c.addr)
}
