package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
)

// delayBenchOpts are the flags of `metaq bench delay` (docs/delay.md, "Benchmarks").
type delayBenchOpts struct {
	rate    float64       // messages falling due per second (lateness phase)
	lead    time.Duration // how far ahead the lateness phase schedules
	burst   int64         // messages due in the same instant (burst phase)
	pending int64         // messages held pending (memory phase)
	phases  string
}

func addDelayBenchFlags(f *pflag.FlagSet, d *delayBenchOpts) {
	f.Float64Var(&d.rate, "delay-rate", 50000, "delay: messages falling due per second in the lateness phase")
	f.DurationVar(&d.lead, "delay-lead", 2*time.Second, "delay: how far ahead the lateness phase schedules each message")
	f.Int64Var(&d.burst, "delay-burst", 200000, "delay: messages due in the same instant (burst phase)")
	f.Int64Var(&d.pending, "delay-pending", 1000000, "delay: messages held pending (memory phase); 0 skips it")
	f.StringVar(&d.phases, "delay-phases", "put,lateness,burst,pending", "delay: phases to run")
}

// delayPhases are the delay workload's phases, in --delay-phases order.
func (b *bencher) delayPhases() ([]func(context.Context) benchkit.Result, error) {
	var out []func(context.Context) benchkit.Result
	for _, ph := range strings.Split(b.o.delay.phases, ",") {
		switch strings.TrimSpace(ph) {
		case "put":
			out = append(out, b.delayPut)
		case "lateness":
			out = append(out, b.delayLateness)
		case "burst":
			out = append(out, b.delayBurst)
		case "pending":
			if b.o.delay.pending > 0 {
				out = append(out, b.delayPending)
			}
		case "":
		default:
			return nil, usageErr("unknown --delay-phases entry %q (want put, lateness, burst, pending)", ph)
		}
	}
	if !(b.o.delay.rate > 0) || b.o.delay.lead <= 0 || b.o.delay.burst < 1 {
		return nil, usageErr("--delay-rate, --delay-lead and --delay-burst must be > 0")
	}
	return out, nil
}

// delayPut: plain async publish, then the same with deliverAt an hour ahead (stored in
// %SCHEDULE% and indexed by the timer), interleaved in the same run.
func (b *bencher) delayPut(ctx context.Context) benchkit.Result {
	r := b.result("delay-put")
	plain := []*client.Message{b.message(b.o.topic)}
	if err := b.prime(ctx, r.Workload, plain, int64(len(b.prods))); err != nil {
		r.Error = "first put: " + err.Error()
		return r
	}
	d, limit := b.limits()
	base := b.publishPhase(ctx, r.Workload+" (plain)", plain, d, limit, nil, nil)
	if base.err != nil {
		r.Error = "plain: " + base.err.Error()
		return r
	}
	b.settle(ctx)
	delayed := b.message(b.o.topic)
	delayed.DeliverAt = time.Now().Add(time.Hour)
	ph := b.publishPhase(ctx, r.Workload, []*client.Message{delayed}, d, limit, b.startCPU, &r)
	if ph.err != nil {
		r.Error = ph.err.Error()
		return r
	}
	r.SetThroughput(ph.n, ph.el)
	baseRate := float64(base.n) / base.el.Seconds()
	r.BaselineMsgsPerSec = baseRate
	if baseRate > 0 {
		r.DegradationRatio = r.MsgsPerSec / baseRate
	}
	b.notes(&r, fmt.Sprintf("deliverAt = now+1h puts vs plain puts (the baseline), %d producer connection(s), window %d; broker flush_mode %s",
		len(b.prods), b.o.window, b.flushMode(ctx)))
	return r
}

// delayReaders long-poll every partition of the topic from its current end and account each
// delivered message's lateness (receive time − the due time stamped in its body).
func (b *bencher) delayReaders(ctx context.Context, e2e *benchkit.E2E) (stop func(), err error) {
	parts, err := b.servedPartitions(ctx, b.o.topic)
	if err != nil {
		return nil, err
	}
	b.settle(ctx)
	starts, err := b.maxOffsets(ctx, parts)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, bp := range parts {
		wg.Go(func() {
			off := starts[i]
			for cctx.Err() == nil {
				res, err := b.admin.FetchWith(cctx, bp.addr, client.FetchRequest{Topic: b.o.topic, Partition: bp.partition,
					Offset: off, MaxBytes: b.o.fetchSize, MaxWait: time.Second})
				now := time.Now()
				if err != nil {
					if cctx.Err() == nil {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				for j := range res.Messages {
					e2e.Deliver(res.Messages[j].Body, now)
				}
				off = res.NextOffset
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // let the readers park their gets
	return func() { cancel(); wg.Wait() }, nil
}

// delayLateness: messages scheduled --delay-lead ahead at --delay-rate, so that rate falls due
// every second; lateness = delivery (seen by a long-polling reader) − due time.
func (b *bencher) delayLateness(ctx context.Context) benchkit.Result {
	r := b.result("delay-lateness")
	do := &b.o.delay
	e2e := benchkit.NewE2E()
	stopReaders, err := b.delayReaders(ctx, e2e)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer stopReaders()
	var sent, failed atomic.Int64
	var errOnce sync.Once
	var sendErr error
	cb := func(_ client.SendResult, err error) {
		if err != nil {
			failed.Add(1)
			errOnce.Do(func() { sendErr = err })
		}
	}
	d := b.o.duration
	pacer := benchkit.NewPacer(do.rate)
	warm := min(d/10, time.Second)
	e2e.SetWarmupEnd(pacer.Intended(0).Add(do.lead + warm))
	prog := b.progress(r.Workload, e2e.Received)
	m := b.startCPU()
	pctx, pcancel := context.WithTimeout(ctx, d)
	var behind time.Duration
	for i := 0; failed.Load() == 0; i++ {
		it, err := pacer.Wait(pctx)
		if err != nil {
			break
		}
		due := it.Add(do.lead)
		msg := &client.Message{Topic: b.o.topic, Body: benchkit.StampedCopy(b.body, due), DeliverAt: due}
		sent.Add(1)
		b.prods[i%len(b.prods)].SendAsync(ctx, msg, cb)
		if i&1023 == 0 {
			behind = max(behind, pacer.Behind())
		}
	}
	pcancel()
	for wait := time.Now().Add(do.lead + 15*time.Second); e2e.Received() < sent.Load()-failed.Load() && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(5 * time.Millisecond)
	}
	prog.Stop()
	got := e2e.Received()
	m.set(&r, got)
	if failed.Load() > 0 {
		r.Error = fmt.Sprintf("%d puts failed, the first with: %v", failed.Load(), sendErr)
		return r
	}
	r.SetThroughput(got, d)
	r.SetLatency(e2e.Histogram())
	notes := []string{fmt.Sprintf("%s msgs/s scheduled %s ahead for %s (so as many fall due per second); latency = delivery seen by a long-polling reader − due time; first %s not recorded",
		strconv.FormatFloat(do.rate, 'f', -1, 64), do.lead, d, warm)}
	if behind > 50*time.Millisecond {
		notes = append(notes, fmt.Sprintf("the sender fell up to %s behind its schedule (the due times stay on schedule)", behind.Round(time.Millisecond)))
	}
	if lost := sent.Load() - got; lost > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d not delivered within lead+15s", lost, sent.Load()))
	}
	b.notes(&r, notes...)
	return r
}

// delayBurst: --delay-burst messages all due at the same millisecond; reports how long after
// that instant the last one was delivered (Seconds, MAX) and the delivery rate.
func (b *bencher) delayBurst(ctx context.Context) benchkit.Result {
	r := b.result("delay-burst")
	n := b.o.delay.burst
	e2e := benchkit.NewE2E()
	stopReaders, err := b.delayReaders(ctx, e2e)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer stopReaders()
	lead := max(5*time.Second, time.Duration(float64(n)/20000*float64(time.Second)))
	due := time.Now().Add(lead).Truncate(time.Second)
	e2e.SetWarmupEnd(due)
	msg := &client.Message{Topic: b.o.topic, Body: benchkit.StampedCopy(b.body, due), DeliverAt: due}
	ph := b.publishPhase(ctx, r.Workload+" (scheduling)", []*client.Message{msg}, 24*time.Hour, n, nil, nil)
	if ph.err != nil {
		r.Error = ph.err.Error()
		return r
	}
	if time.Now().After(due) {
		r.Error = fmt.Sprintf("scheduling %d messages took %s, past their due time (lead %s)", n, ph.el, lead)
		return r
	}
	prog := b.progress(r.Workload, e2e.Received)
	m := b.startCPU()
	for wait := due.Add(60 * time.Second); e2e.Received() < ph.n && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(2 * time.Millisecond)
	}
	prog.Stop()
	got := e2e.Received()
	m.set(&r, got)
	h := e2e.Histogram()
	last := h.Max()
	r.SetThroughput(got, last)
	r.SetLatency(h)
	notes := []string{fmt.Sprintf("%d messages scheduled for the same instant (%s ahead, put at %.0f msgs/s); SECONDS = due → last delivery seen by the readers",
		n, lead, float64(ph.n)/ph.el.Seconds())}
	if got < ph.n {
		notes = append(notes, fmt.Sprintf("only %d of %d delivered within 60 s", got, ph.n))
	}
	b.notes(&r, notes...)
	return r
}

// delayPending: --delay-pending messages scheduled one to two hours ahead; reports the
// broker's memory growth (anonymous RSS, and total RSS which includes the commit log's
// mapped pages) once they are stored and indexed.
func (b *bencher) delayPending(ctx context.Context) benchkit.Result {
	r := b.result("delay-pending")
	n := b.o.delay.pending
	if b.cpuPID <= 0 {
		r.Error = "needs the broker's pid (--server-pid, or --server with a loopback broker)"
		return r
	}
	b.settle(ctx)
	anon0, rss0, err := procRSS(b.cpuPID)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	idx0 := b.delayStat(ctx, "delay_timer_indexed")
	pend0 := b.timerPending(ctx)
	msgs := make([]*client.Message, 3600)
	base := time.Now().Add(time.Hour)
	for i := range msgs {
		m := b.message(b.o.topic)
		m.DeliverAt = base.Add(time.Duration(i) * time.Second)
		msgs[i] = m
	}
	ph := b.publishPhase(ctx, r.Workload, msgs, 24*time.Hour, n, b.startCPU, &r)
	if ph.err != nil {
		r.Error = ph.err.Error()
		return r
	}
	r.SetThroughput(ph.n, ph.el)
	// Wait until the timers have indexed every record this phase stored: the count of
	// %SCHEDULE% partition-0 records they have read is exact, where the pending count is
	// not (messages of the earlier phases may still be leaving it).
	for wait := time.Now().Add(2 * time.Minute); b.delayStat(ctx, "delay_timer_indexed")-idx0 < ph.n && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
	}
	indexed := b.delayStat(ctx, "delay_timer_indexed") - idx0
	held := b.timerPending(ctx) - pend0
	b.settle(ctx)
	anon1, rss1, err := procRSS(b.cpuPID)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	mib := func(kb int64) string { return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64) + " MiB" }
	b.notes(&r, fmt.Sprintf("%d deliverAt messages 1-2 h ahead held pending (%d indexed by the timer, timer pending %+d); broker RssAnon %s → %s (%+.1f MiB), VmRSS %s → %s (includes the commit log's mapped file pages)",
		ph.n, indexed, held, mib(anon0), mib(anon1), float64(anon1-anon0)/1024, mib(rss0), mib(rss1)))
	return r
}

// timerPending is the sum of the brokers' delay_timer_pending (-1 when unknown).
func (b *bencher) timerPending(ctx context.Context) int64 {
	return b.delayStat(ctx, "delay_timer_pending")
}

// delayStat is the sum over the brokers of one `stats delay` figure (-1 when a broker did
// not answer).
func (b *bencher) delayStat(ctx context.Context, key string) int64 {
	var n int64
	for _, addr := range b.knownAddrs() {
		cctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
		st, err := b.admin.Stats(cctx, addr, "delay")
		cancel()
		if err != nil {
			return -1
		}
		for _, s := range st {
			if s.Key == key {
				v, _ := strconv.ParseInt(s.Value, 10, 64)
				n += v
			}
		}
	}
	return n
}

// procRSS reads RssAnon and VmRSS (kB) of pid from /proc.
func procRSS(pid int) (anon, rss int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "RssAnon:":
			anon = v
		case "VmRSS:":
			rss = v
		}
	}
	return anon, rss, sc.Err()
}
