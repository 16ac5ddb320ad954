package peerbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
)

// Config holds the workload parameters (issue 7 defaults in DefaultConfig).
type Config struct {
	Env
	MsgSize       int           // payload bytes (100)
	Window        int           // async publish: messages in flight (1,000)
	Duration      time.Duration // length of each measured phase
	Count         int64         // consume-backlog: messages pre-filled then drained (1,000,000)
	Rate          float64       // e2e: messages per second (1,000)
	Topics        int           // topics-1000: topics in the spread phase (1,000)
	Partitions    int           // partitions-10000 (metaq only): partitions (10,000)
	Pairs         int           // topics-1000, partitions-10000: alternating phase pairs, each phase Duration / Pairs (5)
	Batch         int           // publish-batch: messages per batch (1,000: 100 KB of payload, inside Kafka's 16 KB–1 MB)
	BatchInflight int           // publish-batch: batches in flight per connection (5, Kafka's max.in.flight.requests.per.connection)
	Progress      *os.File      // live progress line goes here when it is a terminal; nil = none
	Logf          func(format string, args ...any)
}

// DefaultConfig returns the issue-7 workload parameters with 10 s phases.
func DefaultConfig() Config {
	return Config{MsgSize: 100, Window: 1000, Duration: 10 * time.Second, Count: 1_000_000,
		Rate: 1000, Topics: 1000, Partitions: 10000, Pairs: 5, Batch: 1000, BatchInflight: 5}
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run measures one system on one workload: it starts a fresh server with a
// fresh data directory, runs the workload, stops the server and removes
// the directory. Failures are reported in Result.Error.
func Run(ctx context.Context, cfg Config, sys System, workload string) benchkit.Result {
	res := benchkit.Result{System: sys.Name, Workload: workload, MsgSize: cfg.MsgSize}
	fail := func(err error) benchkit.Result {
		res.Error = err.Error()
		return res
	}
	if !sys.Runs(workload) {
		return fail(fmt.Errorf("%s does not run %s", sys.Name, workload))
	}
	dir, err := mkDataDir(&cfg.Env, sys.Name, workload)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	if sys.Name == "metaq" {
		return runMetaq(ctx, cfg, dir, workload)
	}
	srv, desc, err := sys.start(ctx, &cfg.Env, dir, workload)
	if err != nil {
		return fail(err)
	}
	defer srv.Stop()
	cfg.logf("%s %s: %s on %s (pid %d)", sys.Name, workload, desc, srv.Addr, srv.PID())
	drv, err := sys.connect(ctx, srv, cfg.Window)
	if err != nil {
		return fail(fmt.Errorf("connect: %w", err))
	}
	defer drv.Close()
	res.Notes = desc + "; client " + sys.client
	w := &run{ctx: ctx, cfg: cfg, srv: srv, drv: drv, res: &res, label: sys.Name + " " + workload}
	probe := startStallProbe(workload)
	switch workload {
	case wPubAsync, wPubDurable:
		err = w.publish()
	case wLatency:
		err = w.latency()
	case wConsume:
		err = w.consume()
	case wE2E:
		err = w.e2e()
	case wTopics:
		err = w.topics()
	case wBatch, wBatchDur:
		err = w.publishBatch()
	default:
		err = fmt.Errorf("unknown workload %q", workload)
	}
	if probe != nil {
		res.SetStall(probe.Stop())
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted")
	}
	if c := sys.caveats[workload]; c != "" {
		res.Notes += "; " + c
	}
	if err != nil {
		res.Error = err.Error()
		if tail := srv.LogTail(5); tail != "" {
			res.Error += " | server log: " + tail
		}
	}
	return res
}

// startStallProbe starts a benchkit.StallProbe for the latency workloads
// (nil for the others): a p99 is read next to how late the machine woke a
// thread that only slept, in the same minutes as each system's run.
func startStallProbe(workload string) *benchkit.StallProbe {
	if workload != wLatency && workload != wE2E {
		return nil
	}
	return benchkit.StartStallProbe()
}

type run struct {
	ctx   context.Context // cancelled on SIGINT: phases end early and the result is marked interrupted
	cfg   Config
	srv   *proc.Server
	drv   Driver
	res   *benchkit.Result
	label string
}

func (w *run) msg() []byte {
	b := make([]byte, w.cfg.MsgSize)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func (w *run) progress(label string, count func() int64) *benchkit.Progress {
	var p *benchkit.Progress
	if w.cfg.Progress != nil {
		p = benchkit.NewProgress(w.cfg.Progress, label, count)
	} else {
		p = benchkit.NewProgressWriter(nil, false, label, count)
	}
	p.Start(0)
	return p
}

// measured runs f (which adds completed messages to n) with a progress line
// and the server's CPU meter; it returns the messages done, elapsed time and
// server CPU time.
func (w *run) measured(label string, f func(n *atomic.Int64) error) (int64, time.Duration, time.Duration, error) {
	var n atomic.Int64
	cpu, cerr := benchkit.StartCPUMeter(w.srv.PID())
	p := w.progress(label, n.Load)
	t0 := time.Now()
	err := f(&n)
	el := time.Since(t0)
	p.Stop()
	var used time.Duration
	if cerr == nil {
		used, _ = cpu.Elapsed()
	}
	return n.Load(), el, used, err
}

func (w *run) publishPhase(topics []string, label string) (int64, time.Duration, time.Duration, error) {
	return w.publishFor(topics, label, w.cfg.Duration)
}

func (w *run) publishFor(topics []string, label string, d time.Duration) (int64, time.Duration, time.Duration, error) {
	msg := w.msg()
	return w.measured(label, func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(w.ctx, d)
		defer cancel()
		return w.drv.Publish(ctx, topics, msg, w.cfg.Window, 0, n)
	})
}

func (w *run) publish() error {
	if err := w.drv.Prepare(w.ctx, []string{"bench"}, false); err != nil {
		return err
	}
	n, el, cpu, err := w.publishPhase([]string{"bench"}, w.label)
	if err != nil {
		return err
	}
	w.res.SetThroughput(n, el)
	w.res.SetServerCPU(cpu, n)
	w.res.Notes += fmt.Sprintf("; 1 connection, window %d", w.cfg.Window)
	return nil
}

func (w *run) latency() error {
	if err := w.drv.Prepare(w.ctx, []string{"bench"}, false); err != nil {
		return err
	}
	h := benchkit.NewHistogram()
	msg := w.msg()
	n, el, cpu, err := w.measured(w.label, func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Duration)
		defer cancel()
		return w.drv.PublishSync(ctx, "bench", msg, h, n)
	})
	if err != nil {
		return err
	}
	w.res.SetThroughput(n, el)
	w.res.SetLatency(h)
	w.res.SetServerCPU(cpu, n)
	w.res.Notes += "; one synchronous publish at a time"
	return nil
}

func (w *run) consume() error {
	bg := w.ctx
	if err := w.drv.Prepare(bg, []string{"bench"}, true); err != nil {
		return err
	}
	msg := w.msg()
	count := w.cfg.Count
	pre, _, _, err := w.measured(w.label+" (pre-fill)", func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(bg, 15*time.Minute)
		defer cancel()
		return w.drv.Publish(ctx, []string{"bench"}, msg, w.cfg.Window, count, n)
	})
	if err != nil {
		return fmt.Errorf("pre-fill: %w", err)
	}
	if pre != count {
		return fmt.Errorf("pre-fill acknowledged %d of %d", pre, count)
	}
	n, el, cpu, err := w.measured(w.label, func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(bg, 15*time.Minute)
		defer cancel()
		return w.drv.Drain(ctx, "bench", count, n)
	})
	if err != nil {
		return err
	}
	w.res.SetThroughput(n, el)
	w.res.SetServerCPU(cpu, n)
	w.res.Notes += fmt.Sprintf("; drained a backlog of %s", benchkit.FormatCount(count))
	return nil
}

// e2e publishes at a fixed rate with each message stamped with its intended
// send time (coordinated-omission aware) and records publish→delivery
// latency at the subscriber. The first tenth of the run (at most 1 s) is
// warm-up and not recorded.
func (w *run) e2e() error {
	bg := w.ctx
	if err := w.drv.Prepare(bg, []string{"bench"}, false); err != nil {
		return err
	}
	e2e := benchkit.NewE2E()
	warm := min(w.cfg.Duration/10, time.Second)
	stop, err := w.drv.Subscribe(bg, "bench", func(b []byte) { e2e.Deliver(b, time.Now()) })
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	time.Sleep(200 * time.Millisecond) // let the subscription settle
	base := w.msg()
	var sent int64
	_, el, cpu, err := w.measured(w.label, func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(bg, w.cfg.Duration)
		defer cancel()
		pacer := benchkit.NewPacer(w.cfg.Rate)
		e2e.SetWarmupEnd(pacer.Intended(0).Add(warm))
		for {
			it, err := pacer.Wait(ctx)
			if err != nil {
				return nil
			}
			if err := w.drv.Send(ctx, "bench", benchkit.StampedCopy(base, it)); err != nil {
				return err
			}
			sent++
			n.Store(e2e.Received())
		}
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for e2e.Received() < sent && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	stop = nil
	got := e2e.Received()
	w.res.SetThroughput(got, el)
	w.res.SetLatency(e2e.Histogram())
	w.res.SetServerCPU(cpu, got)
	w.res.Notes += fmt.Sprintf("; %s msg/s for %s, latency from the intended send time, first %s not recorded",
		strconv.FormatFloat(w.cfg.Rate, 'f', -1, 64), w.cfg.Duration, warm)
	if got < sent {
		w.res.Notes += fmt.Sprintf("; %d of %d messages not delivered within 5 s", sent-got, sent)
	}
	return nil
}

// topics publishes to 1 topic and spread round-robin over cfg.Topics
// topics in cfg.Pairs alternating pairs of phases (each side cfg.Duration in
// total), and reports the spread side with the median of the pairs' ratios.
func (w *run) topics() error {
	bg := w.ctx
	many := make([]string, w.cfg.Topics)
	for i := range many {
		many[i] = "bench-" + strconv.Itoa(i)
	}
	t0 := time.Now()
	if err := w.drv.Prepare(bg, append([]string{"bench"}, many...), false); err != nil {
		return err
	}
	setup := time.Since(t0)
	// Alternating short phases, as metaq's own row (benchkit.Alternate): 1 topic and the
	// 1,000 topics in turn, each side Duration in total, ratio = median of the pairs.
	pairs := max(w.cfg.Pairs, 1)
	d := benchkit.PhaseLength(w.cfg.Duration, pairs)
	a, err := benchkit.Alternate(pairs, func(spread bool, i int) (benchkit.PhaseRun, error) {
		topics, label := []string{"bench"}, fmt.Sprintf("%s (1 topic) %d/%d", w.label, i+1, pairs)
		if spread {
			topics, label = many, fmt.Sprintf("%s %d/%d", w.label, i+1, pairs)
		}
		n, el, cpu, err := w.publishFor(topics, label, d)
		if err != nil && !spread {
			err = fmt.Errorf("1 topic: %w", err)
		}
		return benchkit.PhaseRun{Msgs: n, Elapsed: el, ServerCPU: cpu}, err
	})
	if err != nil {
		return err
	}
	w.res.Topics = len(many)
	w.res.SetAlternation(a)
	w.res.Notes += fmt.Sprintf("; window %d; creating %d topics took %s", w.cfg.Window, len(many)+1, setup.Round(time.Millisecond))
	return nil
}

// publishBatch publishes with the peer's batched form: cfg.Batch messages
// per batch, cfg.BatchInflight batches in flight on the one connection.
func (w *run) publishBatch() error {
	bp, ok := w.drv.(BatchPublisher)
	if !ok {
		return fmt.Errorf("%s has no batched publish here", w.res.System)
	}
	if err := w.drv.Prepare(w.ctx, []string{"bench"}, false); err != nil {
		return err
	}
	msg := w.msg()
	n, el, cpu, err := w.measured(w.label, func(n *atomic.Int64) error {
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Duration)
		defer cancel()
		return bp.PublishBatch(ctx, "bench", msg, w.cfg.Batch, w.cfg.BatchInflight, n)
	})
	if err != nil {
		return err
	}
	w.res.SetThroughput(n, el)
	w.res.SetServerCPU(cpu, n)
	w.res.Notes += fmt.Sprintf("; %s, %d messages per batch, %d batches in flight", bp.BatchForm(), w.cfg.Batch, w.cfg.BatchInflight)
	return nil
}
