package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
)

// The cost of message tracing (docs/trace.md): `metaq bench produce --trace` publishes with
// tracing on; `metaq bench trace` interleaves publish phases without and with tracing and
// prints the throughput ratio.

var traceBenchWorkload = benchWorkload{use: "trace",
	short: "Publish throughput with message tracing on vs off, interleaved (ratio = on/off)",
	long: `Publish as 'produce' does, alternating phases of --duration with producers that do not trace
and producers with Config.Trace (trace records to %TRACE%): --trace-runs pairs, in the order
off,on then on,off … so that drift of the machine hits both sides alike. The result is the
traced throughput (median of its phases) with the untraced median as its baseline: the
"vs" column is the ratio on/off (goal >= 0.90). Notes give every phase's rate and the trace
events the producers dropped (queue full) or lost.`}

func addTraceBenchFlags(pf *pflag.FlagSet, o *benchOpts) {
	pf.BoolVar(&o.trace, "trace", false, "publish workloads: producers write message-trace records (Config.Trace)")
	pf.IntVar(&o.traceRuns, "trace-runs", 3, "trace: on/off phase pairs")
}

func (b *bencher) traceCost(ctx context.Context) benchkit.Result {
	r := b.result("publish-trace")
	if b.o.traceRuns < 1 {
		r.Error = "--trace-runs must be >= 1"
		return r
	}
	cfg := b.cfg
	base := b.prods // traced with --trace
	cfg.Trace = !b.o.trace
	var extra []*client.Producer
	defer func() {
		b.prods = base
		for _, p := range extra {
			p.Close()
		}
	}()
	for range len(base) {
		p, err := client.NewProducer(cfg)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		extra = append(extra, p)
	}
	off, on := base, extra
	if b.o.trace {
		off, on = extra, base
	}
	msgs := []*client.Message{b.message(b.o.topic)}
	for _, ps := range [][]*client.Producer{off, on} {
		b.prods = ps
		if err := b.prime(ctx, r.Workload, msgs, int64(len(ps))); err != nil {
			r.Error = "first put: " + err.Error()
			return r
		}
	}
	d, limit := b.limits()
	var rOn, rOff []float64
	var cOn, cOff, sOn, sOff []float64 // client and broker CPU µs per message
	var pairs []float64                // on/off of each pair of adjacent phases (least drift between them)
	var notes []string
	for i := range 2 * b.o.traceRuns {
		traced := i%2 == 1
		if (i/2)%2 == 1 {
			traced = !traced
		}
		label := "off"
		b.prods = off
		if traced {
			label, b.prods = "on", on
		}
		m := b.startCPU()
		ph := b.publishPhase(ctx, "trace "+label, msgs, d, limit, nil, nil)
		if ph.err != nil {
			r.Error = "trace " + label + ": " + ph.err.Error()
			return r
		}
		rate := float64(ph.n) / ph.el.Seconds()
		cli, srv := m.perMsg(ph.n)
		if traced {
			rOn, cOn, sOn = append(rOn, rate), append(cOn, cli), append(sOn, srv)
		} else {
			rOff, cOff, sOff = append(rOff, rate), append(cOff, cli), append(sOff, srv)
		}
		if i%2 == 1 && len(rOn) > 0 && len(rOff) > 0 {
			pairs = append(pairs, rOn[len(rOn)-1]/rOff[len(rOff)-1])
		}
		note := fmt.Sprintf("%s %.0f/s", label, rate)
		if cli > 0 {
			note += fmt.Sprintf(" client %.2f", cli)
		}
		if srv > 0 {
			note += fmt.Sprintf(" broker %.2f", srv)
		}
		notes = append(notes, note)
		b.settle(ctx)
	}
	var st client.TraceStats
	for _, p := range on {
		s := p.TraceStats()
		st.Queued += s.Queued
		st.Dropped += s.Dropped
		st.Failed += s.Failed
		st.Written += s.Written
	}
	mOn, mOff := benchkit.Median(rOn), benchkit.Median(rOff)
	r.SetThroughput(int64(mOn*d.Seconds()), d)
	r.SetBaseline(mOff)
	b.notes(&r, fmt.Sprintf("trace on/off = %.3f (median %.0f vs %.0f msgs/s; goal >= 0.90); median of the pairs' ratios %.3f %v",
		mOn/mOff, mOn, mOff, benchkit.Median(pairs), roundRatios(pairs)),
		cpuNote(cOn, cOff, sOn, sOff),
		"phases (CPU in µs/msg): "+fmt.Sprint(notes),
		fmt.Sprintf("trace events: %d queued, %d written, %d dropped (queue full), %d lost", st.Queued, st.Written, st.Dropped, st.Failed),
		fmt.Sprintf("Producer.SendAsync, %d producer connection(s), window %d, %s per phase", len(off), b.o.window, d.Round(time.Millisecond)))
	return r
}

// perMsg is the client's and the broker's CPU µs per message since the meter started (0 when
// not measured).
func (c cpuMeter) perMsg(msgs int64) (cli, srv float64) {
	if msgs <= 0 {
		return 0, 0
	}
	if c.self != nil {
		if used, err := c.self.Elapsed(); err == nil {
			cli = benchkit.CPUPerMsgUS(used, msgs)
		}
	}
	if c.m != nil {
		if used, err := c.m.Elapsed(); err == nil {
			srv = benchkit.CPUPerMsgUS(used, msgs)
		}
	}
	return cli, srv
}

// cpuNote compares the CPU per message of the traced and untraced phases (medians): on a
// loaded machine it predicts the quiet ratio better than the rates (client and broker share
// the cores, so the ratio is about (client+broker off) / (client+broker on)).
func cpuNote(cOn, cOff, sOn, sOff []float64) string {
	on, off := benchkit.Median(cOn)+benchkit.Median(sOn), benchkit.Median(cOff)+benchkit.Median(sOff)
	if on <= 0 || off <= 0 {
		return "CPU per message not measured"
	}
	return fmt.Sprintf("CPU µs/msg on/off: client %.2f/%.2f, broker %.2f/%.2f, total %.2f/%.2f (CPU ratio off/on = %.3f)",
		benchkit.Median(cOn), benchkit.Median(cOff), benchkit.Median(sOn), benchkit.Median(sOff), on, off, off/on)
}

// roundRatios rounds ratios to 3 decimals for a note.
func roundRatios(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int64(x*1000+0.5)) / 1000
	}
	return out
}
