package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// bencher holds what the workloads of one `metaq bench` run share: the producers (one
// connection per broker each), an Admin for gets/offsets/stats, and what was learned about the
// brokers.
type bencher struct {
	app    *App
	o      *benchOpts
	cfg    client.Config
	admin  *client.Admin
	prods  []*client.Producer
	direct bool
	body   []byte // the payload every message starts from

	mu      sync.Mutex
	brokers map[string]*benchBroker // by address
	cpuPID  int
	pidNote string
}

// benchBroker is what `stats` says about a broker.
type benchBroker struct {
	addr  string
	id    int
	flush string // "sync", "async", or "" when the broker does not say
	pid   int
}

// benchPart is one partition to read, on the broker that serves it.
type benchPart struct {
	topic     string
	addr      string
	brokerID  int
	partition int
}

func (a *App) newBencher(ctx context.Context, o *benchOpts) (*bencher, error) {
	level := slog.LevelWarn
	if a.Verbose {
		level = slog.LevelInfo
	}
	cfg := client.Config{
		Logger:         slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: level})),
		MaxInFlight:    o.window,
		DialTimeout:    a.ConnectTimeout,
		RequestTimeout: a.ConnectTimeout,
		Trace:          o.trace,
	}
	a.applySecurity(&cfg)
	b := &bencher{app: a, o: o, brokers: map[string]*benchBroker{}}
	var servers []string
	for _, s := range o.servers {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	if len(servers) > 0 {
		b.direct = true
		cfg.Brokers = servers
	} else {
		if strings.TrimSpace(a.ZK) == "" {
			return nil, usageErr("no broker given: use --server host:port, or --zk")
		}
		cfg.ZKConnect, cfg.ZKRoot = a.ZK, a.ZKRoot
		cfg.ZKConnectionTimeout = a.ConnectTimeout
		// The producers open ZooKeeper sessions of their own; connecting here first fails fast
		// (exit 4) when no ZooKeeper server listens.
		if _, err := a.zkClient(ctx); err != nil {
			return nil, err
		}
	}
	b.cfg = cfg
	var err error
	if b.admin, err = client.NewAdmin(cfg); err != nil {
		return nil, benchErr(err)
	}
	for range o.conns {
		p, err := client.NewProducer(cfg)
		if err != nil {
			b.close()
			return nil, benchErr(err)
		}
		b.prods = append(b.prods, p)
	}
	b.body = make([]byte, o.msgSize)
	for i := range b.body {
		b.body[i] = byte('a' + i%26)
	}
	if b.direct {
		for _, addr := range servers {
			if _, err := b.broker(ctx, addr); err != nil {
				b.close()
				return nil, benchErr(err)
			}
		}
	}
	b.cpuPID = o.serverPID
	if b.cpuPID > 0 {
		b.pidNote = "server CPU of pid " + strconv.Itoa(b.cpuPID)
	} else if b.direct && len(servers) == 1 {
		// A broker on this machine reports its pid: measure it without --server-pid.
		br := b.brokers[servers[0]]
		if host, _, err := net.SplitHostPort(servers[0]); err == nil && br.pid > 0 && br.pid != os.Getpid() {
			if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
				if _, err := benchkit.ProcCPUTime(br.pid); err == nil {
					b.cpuPID = br.pid
					b.pidNote = "server CPU of pid " + strconv.Itoa(br.pid) + " (reported by the broker)"
				}
			}
		}
	}
	return b, nil
}

func (b *bencher) close() {
	var wg sync.WaitGroup
	for _, p := range b.prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close()
		}()
	}
	wg.Wait()
	if b.admin != nil {
		b.admin.Close()
	}
}

// broker asks the broker at addr for its id, flush mode and pid (once).
func (b *bencher) broker(ctx context.Context, addr string) (*benchBroker, error) {
	b.mu.Lock()
	br := b.brokers[addr]
	b.mu.Unlock()
	if br != nil {
		return br, nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
	defer cancel()
	stats, err := b.admin.Stats(ctx, addr, "")
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", addr, err)
	}
	br = &benchBroker{addr: addr, id: -1}
	for _, s := range stats {
		switch s.Key {
		case "broker_id":
			br.id, _ = strconv.Atoi(s.Value)
		case "flush_mode":
			br.flush = s.Value
		case "pid":
			br.pid, _ = strconv.Atoi(s.Value)
		}
	}
	b.mu.Lock()
	b.brokers[addr] = br
	b.mu.Unlock()
	return br, nil
}

// partitions lists the partitions of topic: probed with `offset` on every --server, or read from
// ZooKeeper (publish partitions, their masters).
func (b *bencher) partitions(ctx context.Context, topic string) ([]benchPart, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*b.app.ConnectTimeout)
	defer cancel()
	var out []benchPart
	if b.direct {
		for _, addr := range b.cfg.Brokers {
			br, err := b.broker(ctx, addr)
			if err != nil {
				return nil, err
			}
			n, err := b.probePartitions(ctx, addr, topic)
			if err != nil {
				return nil, err
			}
			for p := range n {
				out = append(out, benchPart{topic: topic, addr: addr, brokerID: br.id, partition: p})
			}
		}
		return out, nil
	}
	parts, err := b.prods[0].Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	addrs := map[int]string{}
	for _, p := range parts {
		addr, ok := addrs[p.BrokerID]
		if !ok {
			if addr, err = b.admin.BrokerAddr(ctx, p.BrokerID); err != nil {
				return nil, err
			}
			if _, err := b.broker(ctx, addr); err != nil {
				return nil, err
			}
			addrs[p.BrokerID] = addr
		}
		out = append(out, benchPart{topic: topic, addr: addr, brokerID: p.BrokerID, partition: p.Partition})
	}
	return out, nil
}

// servedPartitions is partitions, failing when no broker serves topic.
func (b *bencher) servedPartitions(ctx context.Context, topic string) ([]benchPart, error) {
	parts, err := b.partitions(ctx, topic)
	if err == nil && len(parts) == 0 {
		err = errors.New("no broker serves topic " + topic)
	}
	return parts, err
}

// probePartitions finds how many partitions of topic the broker at addr serves: `offset` answers
// 404 for a partition out of range.
func (b *bencher) probePartitions(ctx context.Context, addr, topic string) (int, error) {
	exists := func(p int) (bool, error) {
		_, err := b.admin.MaxOffset(ctx, addr, topic, p)
		if isNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	ok, err := exists(0)
	if !ok || err != nil {
		return 0, err
	}
	lo, hi := 1, 2 // partitions 0..lo-1 exist
	for {
		ok, err := exists(hi - 1)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo = hi
		if hi > math.MaxUint16 {
			return hi, nil
		}
		hi *= 2
	}
	for lo < hi-1 { // partition lo-1 exists, hi-1 does not
		mid := (lo + hi) / 2
		ok, err := exists(mid - 1)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// maxOffsets reads the next offset of every partition.
func (b *bencher) maxOffsets(ctx context.Context, parts []benchPart) ([]int64, error) {
	out := make([]int64, len(parts))
	for i, p := range parts {
		cctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
		o, err := b.admin.MaxOffset(cctx, p.addr, p.topic, p.partition)
		cancel()
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

// flushMode sums up the flush mode of the brokers serving the topic.
func (b *bencher) flushMode(ctx context.Context) string {
	var addrs []string
	if b.direct {
		addrs = b.cfg.Brokers
	} else {
		parts, err := b.partitions(ctx, b.o.topic)
		if err != nil {
			return "unknown"
		}
		seen := map[string]bool{}
		for _, p := range parts {
			if !seen[p.addr] {
				seen[p.addr] = true
				addrs = append(addrs, p.addr)
			}
		}
	}
	mode := ""
	for _, a := range addrs {
		br, err := b.broker(ctx, a)
		if err != nil || br.flush == "" {
			return "unknown"
		}
		if mode != "" && mode != br.flush {
			return "mixed"
		}
		mode = br.flush
	}
	if mode == "" {
		return "unknown"
	}
	return mode
}

func (b *bencher) result(workload string) benchkit.Result {
	return benchkit.Result{System: "metaq", Workload: workload, MsgSize: b.o.msgSize}
}

func (b *bencher) message(topic string) *client.Message {
	return &client.Message{Topic: topic, Body: b.body, Tag: b.o.tag}
}

func (b *bencher) progress(label string, count func() int64) *benchkit.Progress {
	var p *benchkit.Progress
	if f, ok := b.app.Stderr.(*os.File); ok {
		p = benchkit.NewProgress(f, "metaq "+label, count)
	} else {
		p = benchkit.NewProgressWriter(b.app.Stderr, false, label, count)
	}
	p.Start(0)
	return p
}

// cpuMeter measures the broker's CPU time over a phase (m is nil without a pid), and this
// process's (the client's).
type cpuMeter struct{ m, self *benchkit.CPUMeter }

func (b *bencher) startCPU() cpuMeter {
	var c cpuMeter
	c.self, _ = benchkit.StartCPUMeter(os.Getpid())
	if b.cpuPID > 0 {
		c.m, _ = benchkit.StartCPUMeter(b.cpuPID)
	}
	return c
}

// set fills the server CPU per message and notes the client's.
func (c cpuMeter) set(r *benchkit.Result, msgs int64) {
	if c.m != nil {
		if used, err := c.m.Elapsed(); err == nil {
			r.SetServerCPU(used, msgs)
		}
	}
	if c.self != nil && msgs > 0 {
		if used, err := c.self.Elapsed(); err == nil {
			r.Notes = strings.TrimPrefix(r.Notes+"; client CPU "+strconv.FormatFloat(benchkit.CPUPerMsgUS(used, msgs), 'f', 2, 64)+" µs/msg", "; ")
		}
	}
}

// phase limits: --duration, or exactly --count messages when only --count was given.
func (b *bencher) limits() (time.Duration, int64) {
	if b.o.countSet && !b.o.durationSet {
		return 24 * time.Hour, b.o.count
	}
	return b.o.duration, 0
}

// pubPhase is one measured asynchronous publish phase.
type pubPhase struct {
	n   int64
	el  time.Duration
	err error
}

// publishPhase sends msgs round-robin with SendAsync from every producer (each producer starts
// at a different message) for d, or exactly limit messages when limit > 0. It returns when every
// put was acknowledged; n counts successful puts. The first failure stops the phase.
func (b *bencher) publishPhase(ctx context.Context, label string, msgs []*client.Message, d time.Duration, limit int64, meter func() cpuMeter, r *benchkit.Result) pubPhase {
	var issued, sent atomic.Int64
	var acks ackCounter
	cb := acks.ack
	bg := context.Background() // the window wait is bounded by SendTimeout; the phase by d
	prog := b.progress(label, acks.acked)
	var m cpuMeter
	if meter != nil {
		m = meter()
	}
	start := time.Now()
	deadline := start.Add(d)
	var senders sync.WaitGroup
	for i, p := range b.prods {
		senders.Add(1)
		go func() {
			defer senders.Done()
			n := int64(0) // this sender's SendAsync calls
			defer func() { sent.Add(n) }()
			k := (i * len(msgs) / len(b.prods)) % len(msgs)
			for j := 0; ; j++ {
				if limit > 0 {
					if issued.Add(1) > limit {
						return
					}
				}
				if j&15 == 0 && (ctx.Err() != nil || (limit == 0 && !time.Now().Before(deadline))) {
					return
				}
				if acks.failed.Load() > 0 {
					return
				}
				n++
				p.SendAsync(bg, msgs[k], cb)
				if k++; k == len(msgs) {
					k = 0
				}
			}
		}()
	}
	senders.Wait()
	acks.wait(sent.Load())
	ph := pubPhase{n: acks.acked(), el: time.Since(start)}
	prog.Stop()
	if r != nil {
		m.set(r, ph.n)
	}
	if n := acks.failed.Load(); n > 0 {
		ph.err = fmt.Errorf("%d puts failed, the first with: %w", n, acks.firstErr)
	} else if ctx.Err() != nil {
		ph.err = ctx.Err()
	}
	return ph
}

// ackCounter counts the answers of a publish phase's sends: one atomic add
// per callback on a counter of the callbacks' own, where a sync.WaitGroup
// shared with the senders (Add per send, Done per answer) and a counter of
// acknowledged sends cost two contended atomics per message — the sender's
// CPU and the connection reader's pulling the same cache line back and
// forth, ~10% of the client's CPU in `bench produce` (CPU profile).
type ackCounter struct {
	done     atomic.Int64 // callbacks run
	_        [56]byte     // done alone on its cache line: the senders read failed
	failed   atomic.Int64
	target   atomic.Int64  // the sends made, once the senders stopped (wait); 0 before
	all      chan struct{} // made by wait before target is set; closed by the callback that makes done reach target
	firstErr error         // set before failed is incremented
	errOnce  sync.Once
}

func (a *ackCounter) ack(_ client.SendResult, err error) {
	if err != nil {
		a.errOnce.Do(func() { a.firstErr = err })
		a.failed.Add(1)
	}
	if n := a.done.Add(1); n == a.target.Load() {
		close(a.all) // only one callback gets n == target
	}
}

// acked is the number of successful sends so far.
func (a *ackCounter) acked() int64 { return a.done.Load() - a.failed.Load() }

// wait waits for the answers of n sends, every send made (the senders
// have stopped).
func (a *ackCounter) wait(n int64) {
	if n == 0 {
		return
	}
	a.all = make(chan struct{})
	a.target.Store(n)
	if a.done.Load() < n {
		<-a.all
	}
}

// prime sends one message to each of msgs (not measured): connections are made, routes read,
// and the broker creates the topics' or partitions' files. Then it waits until the brokers are
// quiescent.
func (b *bencher) prime(ctx context.Context, label string, msgs []*client.Message, n int64) error {
	ph := b.publishPhase(ctx, label+" (priming)", msgs, 24*time.Hour, n, nil, nil)
	if ph.err != nil {
		return ph.err
	}
	b.settle(ctx)
	return nil
}

// knownAddrs is the addresses of the brokers asked so far (b.broker).
func (b *bencher) knownAddrs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Keys(b.brokers))
}

// settle waits (up to a minute) until every broker known so far has indexed what it stored
// (`stats` dispatch_lag 0): a metaq broker indexes appended messages in the background, and a
// measured phase should not inherit the previous phase's backlog (nor the creation of index
// files for the partitions just primed). Brokers that do not report dispatch_lag are not waited
// for.
func (b *bencher) settle(ctx context.Context) {
	addrs := b.knownAddrs()
	deadline := time.Now().Add(time.Minute)
	for _, addr := range addrs {
		for ctx.Err() == nil && time.Now().Before(deadline) {
			cctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
			stats, err := b.admin.Stats(cctx, addr, "")
			cancel()
			lag := int64(-1)
			for _, s := range stats {
				if s.Key == "dispatch_lag" {
					lag, _ = strconv.ParseInt(s.Value, 10, 64)
				}
			}
			if err != nil || lag <= 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// fsyncStats sums the brokers' commit-log fsync counters (metaq's `stats`): rounds and their
// total duration in µs. ok is false when a broker does not report them.
func (b *bencher) fsyncStats(ctx context.Context) (n, us int64, ok bool) {
	addrs := b.knownAddrs()
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
		stats, err := b.admin.Stats(cctx, addr, "")
		cancel()
		if err != nil {
			return 0, 0, false
		}
		var fs, avg int64 = -1, -1
		for _, s := range stats {
			switch s.Key {
			case "fsyncs":
				fs, _ = strconv.ParseInt(s.Value, 10, 64)
			case "avg_fsync_us":
				avg, _ = strconv.ParseInt(s.Value, 10, 64)
			}
		}
		if fs < 0 || avg < 0 {
			return 0, 0, false
		}
		n += fs
		us += fs * avg
	}
	return n, us, len(addrs) > 0
}

// fsyncNote describes the fsyncs of a measured phase of msgs messages.
func (b *bencher) fsyncNote(ctx context.Context, n0, us0 int64, ok0 bool, msgs int64) string {
	n1, us1, ok1 := b.fsyncStats(ctx)
	if !ok0 || !ok1 || n1 <= n0 {
		return ""
	}
	n, us := n1-n0, us1-us0
	return fmt.Sprintf("broker: %d commit-log fdatasyncs in the phase (%.0f messages and %.0f µs each on average)",
		n, float64(msgs)/float64(n), float64(us)/float64(n))
}

func (b *bencher) notes(r *benchkit.Result, parts ...string) {
	mode := "direct (--server)"
	if !b.direct {
		mode = "brokers from ZooKeeper"
	}
	all := append([]string{"metaq Go client, " + mode}, parts...)
	if b.pidNote != "" {
		all = append(all, b.pidNote)
	}
	r.Notes = strings.TrimPrefix(strings.Join(all, "; ")+"; "+r.Notes, "; ")
	r.Notes = strings.TrimSuffix(r.Notes, "; ")
}

// --- workloads ---------------------------------------------------------------

// publish: async publish to --topic. name "" labels the result by the brokers' flush mode.
func (b *bencher) publish(ctx context.Context, name string) benchkit.Result {
	mode := b.flushMode(ctx)
	wl := name
	if wl == "" {
		wl = benchkit.WorkloadPublishAsync
		if mode == "sync" {
			wl = benchkit.WorkloadPublishDurable
		}
	}
	r := b.result(wl)
	wantSync := b.o.sync || wl == benchkit.WorkloadPublishDurable
	if wantSync && mode != "sync" {
		r.Error = fmt.Sprintf("%s needs brokers that flush synchronously (unflushThreshold=0), but their flush_mode is %s", wl, mode)
		return r
	}
	extra := ""
	if wl == benchkit.WorkloadPublishAsync && mode == "sync" {
		b.app.warnf("bench: the brokers flush synchronously (flush_mode sync): this is durable publish")
		extra = " (durable at ack)"
	}
	msgs := []*client.Message{b.message(b.o.topic)}
	if err := b.prime(ctx, wl, msgs, int64(len(b.prods))); err != nil {
		r.Error = "first put: " + err.Error()
		return r
	}
	d, limit := b.limits()
	n0, us0, ok0 := b.fsyncStats(ctx)
	ph := b.publishPhase(ctx, wl, msgs, d, limit, b.startCPU, &r)
	if ph.err != nil {
		r.Error = ph.err.Error()
		return r
	}
	r.SetThroughput(ph.n, ph.el)
	parts := []string{fmt.Sprintf("Producer.SendAsync, %d producer connection(s), window %d", len(b.prods), b.o.window),
		"broker flush_mode " + mode + extra}
	if note := b.fsyncNote(ctx, n0, us0, ok0, ph.n); note != "" {
		parts = append(parts, note)
	}
	b.notes(&r, parts...)
	return r
}

// latency: one Producer.Send at a time.
func (b *bencher) latency(ctx context.Context) benchkit.Result {
	r := b.result(benchkit.WorkloadLatency)
	p := b.prods[0]
	msg := b.message(b.o.topic)
	if _, err := p.Send(ctx, msg); err != nil {
		r.Error = "first put: " + err.Error()
		return r
	}
	b.settle(ctx)
	h := benchkit.NewHistogram()
	var n atomic.Int64
	prog := b.progress(r.Workload, n.Load)
	m := b.startCPU()
	d, limit := b.limits()
	start := time.Now()
	deadline := start.Add(d)
	var err error
	for ctx.Err() == nil {
		t0 := time.Now()
		if limit > 0 && n.Load() >= limit || limit == 0 && !t0.Before(deadline) {
			break
		}
		if _, err = p.Send(ctx, msg); err != nil {
			break
		}
		h.Record(time.Since(t0))
		n.Add(1)
	}
	el := time.Since(start)
	prog.Stop()
	m.set(&r, n.Load())
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.SetThroughput(n.Load(), el)
	r.SetLatency(h)
	b.notes(&r, "one Producer.Send at a time", "broker flush_mode "+b.flushMode(ctx))
	return r
}

// consume: pre-fill --count messages, then drain them with pipelined gets per partition.
func (b *bencher) consume(ctx context.Context) benchkit.Result {
	r := b.result(benchkit.WorkloadConsumeBacklog)
	topic := b.o.topic
	parts, err := b.servedPartitions(ctx, topic)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	starts, err := b.maxOffsets(ctx, parts)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	count := b.o.count
	b.settle(ctx)
	fill := b.publishPhase(ctx, r.Workload+" (pre-fill)", b.consumeMessages(topic), 24*time.Hour, count, nil, nil)
	if fill.err != nil {
		r.Error = "pre-fill: " + fill.err.Error()
		return r
	}
	// The broker indexes appended messages asynchronously: wait until the offsets cover them.
	var ends []int64
	var total int64
	for wait := time.Now().Add(30 * time.Second); ; {
		if ends, err = b.maxOffsets(ctx, parts); err != nil {
			r.Error = err.Error()
			return r
		}
		total = 0
		for i := range parts {
			total += ends[i] - starts[i]
		}
		if total >= count || time.Now().After(wait) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if total < count {
		r.Error = fmt.Sprintf("pre-fill: %d messages acknowledged but the offsets grew by %d", count, total)
		return r
	}

	if b.o.where != "" {
		return b.consumeWhere(ctx, r, parts, starts, ends, total)
	}
	recSize := protocol.RecordSize(len(topic), len(b.propsLine()), b.o.msgSize)
	var got atomic.Int64
	var errOnce sync.Once
	var drainErr error
	fail := func(err error) { errOnce.Do(func() { drainErr = err }) }
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prog := b.progress(r.Workload, got.Load)
	m := b.startCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range parts {
		s := &drainSched{next: starts[i], end: ends[i], k: max(1, int64(b.o.fetchSize/recSize))}
		for range b.o.fetchDepth {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.drainPart(dctx, p, s, recSize, &got, b.o.fetchInto); err != nil {
					fail(err)
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	el := time.Since(start)
	prog.Stop()
	m.set(&r, got.Load())
	if drainErr != nil {
		r.Error = "drain: " + drainErr.Error()
		return r
	}
	if ctx.Err() != nil {
		r.Error = "interrupted"
		return r
	}
	r.SetThroughput(got.Load(), el)
	b.notes(&r, fmt.Sprintf("drained a backlog of %s messages from %d partition(s): %d pipelined gets of %d bytes per partition (%s)",
		benchkit.FormatCount(total), len(parts), b.o.fetchDepth, b.o.fetchSize, fetchAPI(b.o.fetchInto)))
	return r
}

// fetchAPI names the reader's client API in the notes.
func fetchAPI(into bool) string {
	if into {
		return "Admin.FetchInto into a reused buffer, CRC-checked records iterated in place"
	}
	return "Admin.FetchWith, CRC-checked, decoded"
}

// propsLine is the properties line the messages carry (for the record size).
func (b *bencher) propsLine() string {
	if b.o.tag == "" {
		return ""
	}
	return "tag=" + b.o.tag
}

// drainSched hands out the offset ranges of one partition to its pipelined readers.
type drainSched struct {
	mu   sync.Mutex
	next int64
	end  int64
	k    int64 // messages per get (learned from short replies)
}

func (s *drainSched) take() (from, to int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= s.end {
		return 0, 0, false
	}
	from, to = s.next, min(s.next+s.k, s.end)
	s.next = to
	return from, to, true
}

// shrink lowers the range size when a get returned fewer messages than asked for (the
// broker's maxTransferSize is below --fetch-size).
func (s *drainSched) shrink(n int64) {
	s.mu.Lock()
	if n > 0 && n < s.k {
		s.k = n
	}
	s.mu.Unlock()
}

// drainPart reads ranges of s until none is left: with Admin.FetchWith
// (decoded into Messages), or with into Admin.FetchInto (one reused
// buffer per reader, records iterated with their checksums checked, the
// body touched).
func (b *bencher) drainPart(ctx context.Context, p benchPart, s *drainSched, recSize int, got *atomic.Int64, into bool) error {
	tags := b.o.tag
	misses := 0
	var fb client.FetchBuffer
	var sink byte
	defer func() { _ = sink }()
	for {
		from, to, ok := s.take()
		if !ok {
			return nil
		}
		for off := from; off < to; {
			maxBytes := min(b.o.fetchSize, int(to-off)*recSize)
			req := client.FetchRequest{Topic: b.o.topic, Partition: p.partition, Offset: off, MaxBytes: maxBytes, Tags: tags}
			var n int64
			next := off
			var moved bool
			var movedTo int64
			if into {
				if err := b.admin.FetchInto(ctx, p.addr, req, &fb); err != nil {
					return err
				}
				for fb.Next() {
					r := fb.Record()
					if o := r.Offset(); o < to {
						n++
						next = o + 1
						if body := r.Body(); len(body) > 0 {
							sink ^= body[0]
						}
					}
				}
				if err := fb.Err(); err != nil {
					return err
				}
				moved, movedTo = fb.Moved(), fb.NextOffset()
			} else {
				res, err := b.admin.FetchWith(ctx, p.addr, req)
				if err != nil {
					return err
				}
				for i := range res.Messages {
					if o := res.Messages[i].Offset; o < to {
						n++
						next = o + 1
					}
				}
				moved, movedTo = res.Moved, res.NextOffset
			}
			switch {
			case n > 0:
				misses = 0
				if next < to && off == from {
					s.shrink(n)
				}
				got.Add(n)
				off = next
			case moved && movedTo > off:
				off = min(movedTo, to) // filtered stretch (tags)
			default:
				if misses++; misses > 1000 {
					return fmt.Errorf("partition %d-%d: no message at offset %d", p.brokerID, p.partition, off)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// e2e: paced publishing, long-polling readers, latency from the intended send time.
func (b *bencher) e2e(ctx context.Context) benchkit.Result {
	r := b.result(benchkit.WorkloadE2E)
	topic := b.o.topic
	parts, err := b.servedPartitions(ctx, topic)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	p := b.prods[0]
	if _, err := p.Send(ctx, b.message(topic)); err != nil { // connect, read the route
		r.Error = "first put: " + err.Error()
		return r
	}
	b.settle(ctx)
	starts, err := b.maxOffsets(ctx, parts)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	d := b.o.duration
	if b.o.countSet && !b.o.durationSet {
		d = time.Duration(float64(b.o.count) / b.o.rate * float64(time.Second))
	}
	warm := min(d/10, time.Second)
	e2e := benchkit.NewE2E()
	var errOnce sync.Once
	var readErr error
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var readers sync.WaitGroup
	for i, bp := range parts {
		readers.Add(1)
		go func() {
			defer readers.Done()
			off := starts[i]
			for cctx.Err() == nil {
				res, err := b.admin.FetchWith(cctx, bp.addr, client.FetchRequest{Topic: topic, Partition: bp.partition,
					Offset: off, MaxBytes: b.o.fetchSize, MaxWait: time.Second, Tags: b.o.tag})
				now := time.Now()
				if err != nil {
					if cctx.Err() != nil {
						return
					}
					errOnce.Do(func() { readErr = err })
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for j := range res.Messages {
					e2e.Deliver(res.Messages[j].Body, now)
				}
				off = res.NextOffset
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the readers park their gets

	var sent atomic.Int64
	var failed atomic.Int64
	var sendErrOnce sync.Once
	var sendErr error
	cb := func(_ client.SendResult, err error) {
		if err != nil {
			failed.Add(1)
			sendErrOnce.Do(func() { sendErr = err })
		}
	}
	prog := b.progress(r.Workload, e2e.Received)
	m := b.startCPU()
	pctx, pcancel := context.WithTimeout(ctx, d)
	pacer := benchkit.NewPacer(b.o.rate)
	e2e.SetWarmupEnd(pacer.Intended(0).Add(warm))
	start := time.Now()
	for failed.Load() == 0 {
		it, err := pacer.Wait(pctx)
		if err != nil {
			break
		}
		body := benchkit.StampedCopy(b.body, it)
		sent.Add(1)
		// Not pctx: a put sent just before the end of the phase must not inherit its deadline.
		p.SendAsync(ctx, &client.Message{Topic: topic, Body: body, Tag: b.o.tag}, cb)
	}
	pcancel()
	el := time.Since(start)
	for wait := time.Now().Add(5 * time.Second); e2e.Received() < sent.Load()-failed.Load() && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	prog.Stop()
	got := e2e.Received()
	m.set(&r, got)
	cancel()
	readers.Wait()
	if failed.Load() > 0 {
		r.Error = fmt.Sprintf("%d puts failed, the first with: %v", failed.Load(), sendErr)
		return r
	}
	if ctx.Err() != nil {
		r.Error = "interrupted"
		return r
	}
	r.SetThroughput(got, el)
	r.SetLatency(e2e.Histogram())
	extra := []string{fmt.Sprintf("%s msg/s for %s with Producer.SendAsync, latency from the intended send time, first %s not recorded; %d long-polling reader(s) (gets with a 1 s wait)",
		strconv.FormatFloat(b.o.rate, 'f', -1, 64), d, warm, len(parts)), "broker flush_mode " + b.flushMode(ctx)}
	if lost := sent.Load() - got; lost > 0 {
		extra = append(extra, fmt.Sprintf("%d of %d messages not delivered within 5 s", lost, sent.Load()))
	}
	if readErr != nil {
		extra = append(extra, "a get failed (retried): "+readErr.Error())
	}
	b.notes(&r, extra...)
	return r
}

// spreadTopics: --topic for --duration, then round-robin over <topic>-0 … <topic>-(N-1).
func (b *bencher) spreadTopics(ctx context.Context) benchkit.Result {
	r := b.result(benchkit.WorkloadTopics1000)
	one := []*client.Message{b.message(b.o.topic)}
	many := make([]*client.Message, b.o.topics)
	for i := range many {
		many[i] = b.message(b.o.topic + "-" + strconv.Itoa(i))
	}
	return b.spread(ctx, r, one, many, func(r *benchkit.Result) { r.Topics = len(many) },
		fmt.Sprintf("1 topic (%s) alternating with round-robin over %d topics %s-0 … %s-%d", b.o.topic, len(many), b.o.topic, b.o.topic, len(many)-1))
}

// spreadPartitions: --topic (1 partition) for --duration, then <topic>-p's partitions.
func (b *bencher) spreadPartitions(ctx context.Context) benchkit.Result {
	r := b.result(benchkit.WorkloadPartitions10000)
	topic := b.o.topic + "-p"
	parts, err := b.partitions(ctx, topic)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if len(parts) != b.o.partitions {
		r.Error = fmt.Sprintf("topic %s has %d partitions, want --partitions %d (configure [topic=%s] numPartitions=%d)",
			topic, len(parts), b.o.partitions, topic, b.o.partitions)
		return r
	}
	how := "the broker spreads the puts round-robin (partition -1)"
	if !b.direct {
		how = "the producer's round-robin selector spreads the puts"
	}
	return b.spread(ctx, r, []*client.Message{b.message(b.o.topic)}, []*client.Message{b.message(topic)},
		func(r *benchkit.Result) { r.Partitions = len(parts) },
		fmt.Sprintf("1 partition (%s) alternating with %d partitions of %s: %s", b.o.topic, len(parts), topic, how))
}

// spread measures --pairs alternating pairs of phases on one and on many (benchkit.Alternate:
// one, many | many, one | …, each phase --duration / --pairs, so each side gets --duration in
// total) after priming both, and reports the many side with the one side as its baseline and the
// median of the pairs' ratios as the degradation ratio.
func (b *bencher) spread(ctx context.Context, r benchkit.Result, one, many []*client.Message, fill func(*benchkit.Result), desc string) benchkit.Result {
	if err := b.prime(ctx, r.Workload, one, int64(len(b.prods))); err != nil {
		r.Error = "first put: " + err.Error()
		return r
	}
	primeN := int64(len(many))
	if r.Workload == benchkit.WorkloadPartitions10000 {
		primeN = int64(b.o.partitions)
	}
	t0 := time.Now()
	if err := b.prime(ctx, r.Workload, many, primeN); err != nil {
		r.Error = "priming: " + err.Error()
		return r
	}
	primed := time.Since(t0)
	d, limit := b.limits()
	pairs := max(b.o.pairs, 1)
	d = benchkit.PhaseLength(d, pairs)
	if limit > 0 {
		limit = max(limit/int64(pairs), 1)
	}
	var cli [2]time.Duration // client CPU of the one and the many side
	a, err := benchkit.Alternate(pairs, func(spread bool, i int) (benchkit.PhaseRun, error) {
		side := 0 // Alternate's side, which the phase is counted on
		if spread {
			side = 1
		}
		if b.o.side != "" { // --side: both halves of every pair on one side
			spread = b.o.side == "spread"
		}
		msgs, label := one, r.Workload+" (1)"
		if spread {
			msgs, label = many, r.Workload
		}
		m := b.startCPU()
		ph := b.publishPhase(ctx, fmt.Sprintf("%s %d/%d", label, i+1, pairs), msgs, d, limit, nil, nil)
		run := benchkit.PhaseRun{Msgs: ph.n, Elapsed: ph.el}
		if m.m != nil {
			run.ServerCPU, _ = m.m.Elapsed()
		}
		if m.self != nil {
			used, _ := m.self.Elapsed()
			cli[side] += used
		}
		b.settle(ctx) // the next phase does not inherit this one's indexing backlog
		if ph.err != nil && !spread {
			return run, fmt.Errorf("baseline: %w", ph.err)
		}
		return run, ph.err
	})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	fill(&r)
	b.notes(&r, desc, fmt.Sprintf("Producer.SendAsync, %d producer connection(s), window %d", len(b.prods), b.o.window),
		fmt.Sprintf("one put to each and waiting for the broker to index them (not measured) took %s", primed.Round(time.Millisecond)),
		"broker flush_mode "+b.flushMode(ctx))
	r.SetAlternation(a)
	if b.o.side != "" {
		r.Notes += "; --side " + b.o.side + ": every phase on that side (the ratio and the base figures compare it with itself)"
	}
	bt, st := a.BaseTotal(), a.SpreadTotal()
	cpu := fmt.Sprintf("client CPU %.2f µs/msg (base %.2f)", benchkit.CPUPerMsgUS(cli[1], st.Msgs), benchkit.CPUPerMsgUS(cli[0], bt.Msgs))
	if bt.ServerCPU > 0 || st.ServerCPU > 0 {
		cpu += fmt.Sprintf("; server CPU %.2f µs/msg (base %.2f)", benchkit.CPUPerMsgUS(st.ServerCPU, st.Msgs), benchkit.CPUPerMsgUS(bt.ServerCPU, bt.Msgs))
	}
	r.Notes += "; " + cpu
	return r
}

// topicsExist reports whether <topic>-0 and <topic>-(N-1) are served (for `all`).
func (b *bencher) topicsExist(ctx context.Context) (bool, string) {
	for _, t := range []string{b.o.topic + "-0", b.o.topic + "-" + strconv.Itoa(b.o.topics-1)} {
		parts, err := b.partitions(ctx, t)
		if err != nil {
			return false, err.Error()
		}
		if len(parts) == 0 {
			return false, "topic " + t + " is not served (configure [topic=" + t + "] sections)"
		}
	}
	return true, ""
}

// partitionsExist reports whether <topic>-p has --partitions partitions (for `all`).
func (b *bencher) partitionsExist(ctx context.Context) (bool, string) {
	t := b.o.topic + "-p"
	parts, err := b.partitions(ctx, t)
	if err != nil {
		return false, err.Error()
	}
	if len(parts) != b.o.partitions {
		return false, fmt.Sprintf("topic %s has %d partitions, not %d", t, len(parts), b.o.partitions)
	}
	return true, ""
}
