package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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

	routes   sync.Map   // topic → *topicRoute
	mu       sync.Mutex // route creation and updates
	closeMu  sync.Mutex // closed vs wg.Add of retries
	closed   atomic.Bool
	inflight atomic.Int64 // SendAsync calls whose callback has not returned
	wg       sync.WaitGroup

	direct     *routeTable // direct mode (Config.Brokers)
	directIDs  sync.Map    // addr → broker id (learned with `stats`)
	asyncDoneF func(*call)
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

// sendState is a send in flight (kept in its call).
type sendState struct {
	p            *Producer
	msg          *Message
	cb           func(SendResult, error)
	route        *topicRoute
	tbl          *routeTable
	idx          int
	attempt      int
	ordered      bool
	failedBroker int
	props        []byte
	explicit     bool // SendToPartition: no selection, no retry
}

// NewProducer creates a producer. It does not block: ZooKeeper is contacted
// in the background and the first Send to a topic waits for its partitions.
func NewProducer(cfg Config) (*Producer, error) { return newProducer(cfg, nil) }

// newProducer is NewProducer with connection hooks (transaction producers).
func newProducer(cfg Config, hooks func(*connConfig)) (*Producer, error) {
	cfg = cfg.withDefaults()
	p := &Producer{cfg: cfg, log: cfg.Logger}
	p.opts = &p.cfg.Producer
	p.asyncDoneF = p.asyncDone
	cc := p.cfg.connConfig()
	if hooks != nil {
		hooks(cc)
	}
	p.pool = newConnPool(cc)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	switch {
	case cfg.ZKConnect != "":
		zc, err := cfg.newZK()
		if err != nil {
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
		return nil, errors.New("metaq client: Config.ZKConnect (or Config.Brokers) is required")
	}
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
	cl := getCall(kindPut)
	defer putCall(cl)
	s := &cl.send
	if s.props, err = propsOf(s.props, msg); err != nil {
		return SendResult{}, err
	}
	d := newDataBlock(msg, s.props)
	s.ordered = p.opts.Selector.Ordered(msg)
	s.failedBroker, s.idx = -1, -1
	var lastErr error
	for ; s.attempt <= p.opts.SendRetries; s.attempt++ {
		t := route.table()
		if len(t.parts) == 0 {
			if lastErr == nil {
				lastErr = fmt.Errorf("%w %s", ErrNoPartitions, msg.Topic)
			}
			break
		}
		s.tbl, s.idx = t, p.pick(t, msg, s)
		cl.err, cl.code = nil, 0
		err := t.conns[s.idx].put(ctx, cl, p.opts.SendTimeout, msg.Topic, t.putPartition(s.idx), &d, !p.opts.NoChecksum)
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
// it is not kept after SendAsync returns. msg must not be changed until cb
// ran.
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
	cl := getCall(kindPut)
	s := &cl.send
	if s.props, err = propsOf(s.props, msg); err != nil {
		putCall(cl)
		p.asyncFail(cb, err)
		return
	}
	s.p, s.msg, s.cb, s.route = p, msg, cb, route
	s.ordered = p.opts.Selector.Ordered(msg)
	s.failedBroker, s.idx = -1, -1
	cl.onDone = p.asyncDoneF
	p.attemptAsync(ctx, cl)
}

// SendToPartition sends msg to one partition, without selection or retries.
// In direct mode (Config.Brokers) with one broker, part.BrokerID is not
// checked; with several, the broker ids are learned with `stats`.
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
	cl := getCall(kindPut)
	defer putCall(cl)
	if cl.send.props, err = propsOf(cl.send.props, msg); err != nil {
		return SendResult{}, err
	}
	d := newDataBlock(msg, cl.send.props)
	if err := conn.put(ctx, cl, p.opts.SendTimeout, msg.Topic, int32(part.Partition), &d, !p.opts.NoChecksum); err != nil {
		return SendResult{}, err
	}
	bid, _ := protocol.SplitMsgID(cl.msgID)
	return SendResult{MsgID: cl.msgID, Partition: Partition{BrokerID: bid, Partition: int(cl.partition)}, Offset: cl.offset}, nil
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
	deadline := time.Now().Add(p.opts.SendTimeout + time.Second)
	for p.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	p.cancel()
	p.pool.close()
	p.wg.Wait()
	if p.zk != nil {
		p.zk.Close()
	}
	return nil
}

// --- internals ----------------------------------------------------------------

func propsOf(dst []byte, m *Message) ([]byte, error) {
	dst = appendProps(dst[:0], m)
	if len(dst) > protocol.MaxPropertiesLen {
		return dst, fmt.Errorf("metaq client: properties line of %d bytes exceeds %d", len(dst), protocol.MaxPropertiesLen)
	}
	return dst, nil
}

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
	p.inflight.Add(-1)
}

// attemptAsync starts one attempt of an async send; failures to start go
// through asyncDone like failed replies.
func (p *Producer) attemptAsync(ctx context.Context, cl *call) {
	s := &cl.send
	t := s.route.table()
	if len(t.parts) == 0 {
		cl.err = fmt.Errorf("%w %s", ErrNoPartitions, s.msg.Topic)
		s.ordered = true // nothing to retry on
		p.asyncDone(cl)
		return
	}
	s.tbl, s.idx = t, p.pick(t, s.msg, s)
	conn := t.conns[s.idx]
	d := newDataBlock(s.msg, s.props)
	cl.err, cl.code = nil, 0
	if err := conn.startPut(ctx, cl, conn.deadlineFor(ctx, p.opts.SendTimeout), s.msg.Topic, t.putPartition(s.idx), &d, !p.opts.NoChecksum); err != nil {
		cl.err = err
		p.asyncDone(cl)
	}
}

// asyncDone completes an async attempt: success, a retry on another
// partition (in a new goroutine: this may run on a connection's reader), or
// the final error.
func (p *Producer) asyncDone(cl *call) {
	s := &cl.send
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
				p.attemptAsync(p.ctx, cl)
			}()
			return
		}
		p.closeMu.Unlock()
	}
	var res SendResult
	if err == nil {
		res = p.result(cl, s.tbl, s.idx)
	}
	cb := s.cb
	putCall(cl)
	if cb != nil {
		cb(res, err)
	}
	p.inflight.Add(-1)
}

// pick chooses the partition of an attempt: the selector's choice first
// (moved off a broker that is down unless ordered), then, on retries, the
// next partition on another broker that is up.
func (p *Producer) pick(t *routeTable, msg *Message, s *sendState) int {
	n := len(t.parts)
	if s.attempt == 0 || s.idx < 0 || s.idx >= n {
		i := p.opts.Selector.Select(msg, t.parts)
		if i < 0 || i >= n {
			i = ((i % n) + n) % n
		}
		if s.ordered || t.conns[i].healthy() {
			return i
		}
		for k := 1; k < n; k++ {
			if j := (i + k) % n; t.conns[j].healthy() {
				return j
			}
		}
		return i
	}
	if s.ordered {
		return s.idx
	}
	fallback := -1
	for k := 1; k <= n; k++ {
		j := (s.idx + k) % n
		if t.brokerOf(j) == s.failedBroker {
			continue
		}
		if t.conns[j].healthy() {
			return j
		}
		if fallback < 0 {
			fallback = j
		}
	}
	if fallback >= 0 {
		return fallback
	}
	return (s.idx + 1) % n
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
	if v, ok := p.routes.Load(topic); ok {
		r := v.(*topicRoute)
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
		v, _ := p.routes.LoadOrStore(topic, r)
		return v.(*topicRoute), nil
	}
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	v, loaded := p.routes.LoadOrStore(topic, &topicRoute{topic: topic, ready: make(chan struct{})})
	r := v.(*topicRoute)
	if !loaded {
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
	p.routes.Range(func(_, v any) bool {
		if t := v.(*topicRoute).cur.Load(); t != nil {
			for _, c := range t.conns {
				keep[c.addr] = true
			}
		}
		return true
	})
	return p.pool.retain(keep)
}

// connFor finds the connection serving one partition.
func (p *Producer) connFor(ctx context.Context, topic string, part Partition) (*brokerConn, error) {
	if p.direct != nil {
		if len(p.direct.conns) == 1 {
			return p.direct.conns[0], nil
		}
		for _, c := range p.direct.conns {
			id, err := p.directBrokerID(ctx, c)
			if err != nil {
				return nil, err
			}
			if id == part.BrokerID {
				return c, nil
			}
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
