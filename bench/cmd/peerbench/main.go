// Command peerbench runs the issue-7 workloads against NATS JetStream, NSQ,
// Redis Streams and (when its binary exists) metaq, and prints one
// benchkit.Result JSON object per line on stdout. Logs go to stderr, and so
// does the live progress line when stderr is a terminal.
//
//	peerbench [-systems a,b] [-workloads x,y] [-duration 10s] [-count 1000000] [-quick] ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/metaqgo/metaq/bench/internal/peerbench"
	"github.com/metaqgo/metaq/benchkit"
)

func main() {
	os.Exit(run())
}

func names(ss []peerbench.System) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func run() int {
	cfg := peerbench.DefaultConfig()
	systems := flag.String("systems", "all", "comma-separated systems: "+strings.Join(names(peerbench.Systems), ",")+"; all = every one (metaq only if its binary exists)")
	workloads := flag.String("workloads", "all", "comma-separated workloads: "+strings.Join(benchkit.Workloads, ","))
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of each measured phase")
	flag.Int64Var(&cfg.Count, "count", cfg.Count, "consume-backlog: messages pre-filled, then drained")
	flag.IntVar(&cfg.MsgSize, "msg-size", cfg.MsgSize, "message payload bytes")
	flag.IntVar(&cfg.Window, "window", cfg.Window, "async publish: messages in flight on the one connection")
	flag.Float64Var(&cfg.Rate, "rate", cfg.Rate, "e2e: messages per second")
	flag.IntVar(&cfg.Topics, "topics", cfg.Topics, "topics-1000: number of topics in the spread phase")
	flag.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions-10000 (metaq): number of partitions")
	flag.IntVar(&cfg.Pairs, "pairs", cfg.Pairs, "topics-1000, partitions-10000: alternating pairs of phases (1 vs many), each -duration / -pairs long; the ratio is the median of the pairs'")
	flag.IntVar(&cfg.Batch, "batch", cfg.Batch, "publish-batch: messages per batch (metaq mput frame, NSQ MPUB, Redis pipeline)")
	flag.IntVar(&cfg.BatchInflight, "batch-inflight", cfg.BatchInflight, "publish-batch: batches in flight on the one connection (Kafka's max.in.flight.requests.per.connection is 5)")
	quick := flag.Bool("quick", false, "smoke run: -duration 2s -count 100000 unless given")
	repeat := flag.Int("repeat", 1, "run each system×workload this many times, the systems in turn (the table takes the median)")
	flag.StringVar(&cfg.BinDir, "bin", "bin", "directory holding nats-server and nsqd")
	flag.StringVar(&cfg.MetaqBin, "metaq", "../bin/metaq", "metaq binary (skipped when missing)")
	flag.StringVar(&cfg.RedisBin, "redis-server", "", "redis-server binary (default: from PATH)")
	flag.StringVar(&cfg.TmpDir, "tmp", "", "parent directory of the per-run data directories (default $TMPDIR)")
	cpuprofile := flag.String("cpuprofile", "", "write peerbench's (the clients') CPU profile to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "peerbench: unexpected arguments %q\n", flag.Args())
		return 2
	}
	for _, p := range []*string{&cfg.BinDir, &cfg.MetaqBin, &cfg.RedisBin, &cfg.TmpDir} {
		if *p != "" {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs // servers run with their data directory as working directory
			}
		}
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["duration"] {
			cfg.Duration = 2 * time.Second
		}
		if !set["count"] {
			cfg.Count = 100_000
		}
	}
	if cfg.MsgSize < benchkit.StampSize || cfg.Window < 1 || cfg.Duration <= 0 || cfg.Count < 1 || cfg.Rate <= 0 || cfg.Topics < 1 || cfg.Partitions < 1 || cfg.Pairs < 1 || cfg.Batch < 1 || cfg.Batch > 10000 || cfg.BatchInflight < 1 {
		fmt.Fprintln(os.Stderr, "peerbench: invalid parameters (msg-size >= 8, window/count/topics/partitions/pairs >= 1, duration/rate > 0)")
		return 2
	}

	var syss []peerbench.System
	if *systems == "all" {
		syss = peerbench.Systems
	} else {
		for _, n := range strings.Split(*systems, ",") {
			s, ok := peerbench.Lookup(strings.TrimSpace(n))
			if !ok {
				fmt.Fprintf(os.Stderr, "peerbench: unknown system %q (have %s)\n", n, strings.Join(names(peerbench.Systems), ","))
				return 2
			}
			syss = append(syss, s)
		}
	}
	wls := benchkit.Workloads
	if *workloads != "all" {
		wls = nil
		for _, w := range strings.Split(*workloads, ",") {
			w = strings.TrimSpace(w)
			if !slices.Contains(benchkit.Workloads, w) {
				fmt.Fprintf(os.Stderr, "peerbench: unknown workload %q (have %s)\n", w, strings.Join(benchkit.Workloads, ","))
				return 2
			}
			wls = append(wls, w)
		}
	}
	if i := slices.IndexFunc(syss, func(s peerbench.System) bool { return s.Name == "metaq" }); i >= 0 && !cfg.MetaqAvailable() {
		fmt.Fprintf(os.Stderr, "peerbench: NOTE: %s does not exist yet: metaq is skipped (build it with `go build -o bin/metaq ./tools/metaq` in the main module)\n", cfg.MetaqBin)
		syss = slices.Delete(slices.Clone(syss), i, i+1)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "peerbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "peerbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Progress = os.Stderr
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "peerbench: "+format+"\n", args...)
	}
	failed := 0
	// Repeats go round the systems (metaq, peer, metaq, peer …) rather
	// than one system's runs back to back, so that a swing of the machine's
	// load falls on every system of a workload alike.
	for _, wl := range wls {
		for range *repeat {
			for _, s := range syss {
				if !s.Runs(wl) {
					continue
				}
				if ctx.Err() != nil {
					fmt.Fprintln(os.Stderr, "peerbench: interrupted")
					return 130
				}
				r := peerbench.Run(ctx, cfg, s, wl)
				if r.Error != "" {
					failed++
					fmt.Fprintf(os.Stderr, "peerbench: %s %s FAILED: %s\n", s.Name, wl, r.Error)
				} else {
					fmt.Fprintf(os.Stderr, "peerbench: %s %s: %s msgs in %.1fs = %s%s\n", s.Name, wl,
						benchkit.FormatCount(r.Msgs), r.Seconds, benchkit.FormatRate(r.MsgsPerSec), latency(r))
				}
				if err := benchkit.WriteJSON(os.Stdout, r); err != nil {
					fmt.Fprintln(os.Stderr, "peerbench:", err)
					return 1
				}
			}
		}
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "peerbench: %d run(s) failed\n", failed)
		return 1
	}
	return 0
}

func latency(r benchkit.Result) string {
	s := ""
	if r.P50us > 0 {
		s += fmt.Sprintf(", p50 %.0f µs p99 %.0f µs p999 %.0f µs", r.P50us, r.P99us, r.P999us)
	}
	if r.DegradationRatio > 0 {
		s += fmt.Sprintf(", %.2f of the 1-topic rate %s", r.DegradationRatio, benchkit.FormatRate(r.BaselineMsgsPerSec))
	}
	if r.ServerCPUusPerMsg > 0 {
		s += fmt.Sprintf(", server CPU %.2f µs/msg", r.ServerCPUusPerMsg)
	}
	return s
}
