package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/benchkit"
)

func init() { AddCommand(newBenchCommand) }

// benchOpts are the flags of `metaq bench` (shared by every workload; a workload ignores those
// it does not use, so that bench/'s peer harness can always pass all of them).
type benchOpts struct {
	servers    []string
	serverPID  int
	topic      string
	msgSize    int
	conns      int
	window     int
	duration   time.Duration
	count      int64
	rate       float64
	topics     int
	partitions int
	tag        string
	where      string
	sync       bool
	fetchSize  int
	fetchDepth int
	fetchInto  bool // consume: Admin.FetchInto instead of FetchWith
	cpuProfile string
	stallProbe bool            // run a benchkit.StallProbe beside each workload
	batch      int             // publish-batch: messages per mput frame (bench_batch.go)
	accum      accumOpts       // accumulation (bench_accum.go)
	zk         zkBenchOpts     // zk-offsets (bench_zk.go)
	delay      delayBenchOpts  // bench_delay.go
	shared     sharedBenchOpts // bench_shared.go
	trace      bool            // producers write trace records (bench_trace.go)
	traceRuns  int             // trace workload: on/off pairs
	pairs      int             // topics/partitions: alternating phase pairs
	side       string          // topics/partitions: "" (both), "base" or "spread" (every phase on that side)
	tx         txBenchOpts     // bench_tx.go

	batchInflight int // publish-batch: frames in flight per producer (bench_batch.go)

	durationSet bool // --duration given
	countSet    bool // --count given
}

// benchWorkload is a `metaq bench` subcommand.
type benchWorkload struct {
	use     string
	aliases []string
	short   string
	long    string
}

var benchWorkloads = []benchWorkload{
	{use: "produce", aliases: []string{benchkit.WorkloadPublishAsync, benchkit.WorkloadPublishDurable, "publish"},
		short: "Asynchronous publish throughput (--conns producers, --window puts in flight each)",
		long: `Publish --msg-size messages to --topic for --duration (or exactly --count messages when only
--count is given) with Producer.SendAsync: --conns producers, each with one connection per broker
and --window puts in flight. The measured interval ends when the last put is acknowledged.

The flush mode is the broker's configuration (unflushThreshold=0 is sync flush, group commit):
the result is labelled publish-durable when every broker reports flush_mode sync, publish-async
otherwise. --sync (or the name publish-durable) checks that the brokers flush synchronously and
fails when they do not.`},
	{use: benchkit.WorkloadLatency,
		short: "Single-request publish latency: one Producer.Send at a time",
		long: `Publish one message at a time with Producer.Send (waiting for each acknowledgement) for
--duration (or --count messages) and report the round-trip percentiles.`},
	{use: "consume", aliases: []string{benchkit.WorkloadConsumeBacklog},
		short: "Drain a backlog at full speed (pre-fills --count messages first)",
		long: `Pre-fill --count messages into --topic (asynchronous publish, not measured), then read them
back at full speed and report the drain rate. Every partition of the topic is read with
--fetch-depth pipelined gets of --fetch-size bytes (Admin.FetchWith: CRC-checked, decoded into
client.Messages), starting at the offsets the partitions had before the pre-fill.`},
	{use: benchkit.WorkloadE2E,
		short: "Publish→delivery latency at a fixed --rate with long-polling consumers",
		long: `Publish at a fixed --rate (benchkit.Pacer: a late sender is not given a new schedule, so
coordinated omission is accounted for) with Producer.SendAsync, each message stamped with its
intended send time; one long-polling reader per partition (gets with a 1 s wait) records the
latency from that intended time to delivery. The first tenth of the run (at most 1 s) is warm-up.`},
	{use: "topics", aliases: []string{benchkit.WorkloadTopics1000},
		short: "Asynchronous publish spread over --topics topics vs 1 topic",
		long: `Publish to --topic and round-robin over the topics <topic>-0 … <topic>-(N-1) (N = --topics)
in --pairs alternating pairs of phases (1, N | N, 1 | …), each --duration / --pairs long, and
report the spread rate and the median of the pairs' ratios to the 1-topic rate.
The topics must be accepted by the broker ([topic=bench-0] … sections). One put to each topic
before the first phase (creating its files) is not measured.`},
	{use: "partitions", aliases: []string{benchkit.WorkloadPartitions10000},
		short: "Asynchronous publish over --partitions partitions of one topic vs 1 partition",
		long: `Publish to --topic (1 partition) and over the --partitions partitions of <topic>-p in --pairs
alternating pairs of phases (1, N | N, 1 | …), each --duration / --pairs long, and report the
spread rate and the median of the pairs' ratios to the 1-partition rate.
<topic>-p must have exactly --partitions partitions ([topic=bench-p] numPartitions=10000).
With --server the broker spreads the puts round-robin (partition -1); through ZooKeeper the
producer's round-robin selector does. One put to each partition before the first phase is not
measured.`},
	{use: benchkit.WorkloadPublishBatch, aliases: []string{benchkit.WorkloadPublishBatchDurable, "batch"},
		short: "Batched publish: Producer.SendBatchAsync, --batch messages per mput frame",
		long: `Publish --msg-size messages to --topic for --duration (or --count messages) in batch puts
(mput: one frame, one append and one reply for --batch messages) with Producer.SendBatchAsync:
--conns producers, each with --batch-inflight frames in flight (--window does not apply).
Labelled publish-batch-durable when every broker flushes synchronously (unflushThreshold=0);
the name publish-batch-durable fails on brokers that do not.`},
	{use: benchkit.WorkloadAccumulation,
		short: "Publish while a reader drains a cold backlog of --backlog messages; vs no reader, vs the disk",
		long: `Pile up --backlog messages in --topic (batch puts, not measured), publish for --duration with no
reader, then drop the page cache (--drop-caches: root, broker on this machine) and publish for
--duration again while one pipelined reader per partition (--fetch-depth gets of --fetch-size)
drains the backlog from its first message. Two results: accumulation (publish rate with the cold
reader; its ratio to the rate without a reader) and accumulation-reader (the reader's messages/s
and record MB/s). With --data-dir (the broker's dataPath) the disk's sequential read bandwidth is
measured in the same run by reading the commit-log segments with O_DIRECT, and the reader is
compared with it. bench/accumulation.sh runs this plus recovery and startup times.`},
	{use: "zk-offsets",
		short: "ZooKeeper write rate for offset commits: single set-data vs multi-ops (--zk)",
		long: `Measure the ensemble given with --zk (no broker): create --partitions nodes under
<zkRoot>/bench-zk-<time>, then for --duration each: set-data of an offset-sized value, one per
request with --zk-inflight requests in flight on one session (zk-set), and multi-ops of
--zk-multi set-datas (zk-multi, counted in node writes). The nodes are deleted afterwards.
docs/scaling.md uses it.`},
	{use: "delay",
		short: "Delayed messages: put rate vs plain, lateness while --delay-rate fall due, a burst due at once, memory of pending",
		long: `Four phases (--delay-phases), each its own result:
  delay-put       deliverAt puts (an hour ahead) vs plain puts, async, same run (ratio = delayed/plain)
  delay-lateness  --delay-rate messages/s scheduled --delay-lead ahead for --duration: delivery
                  lateness (long-polling reader receive time − due time) percentiles
  delay-burst     --delay-burst messages due at the same instant: time until the last is delivered
  delay-pending   --delay-pending messages scheduled 1-2 h ahead: the broker's RSS growth (needs
                  the broker's pid: --server-pid or a loopback --server)
The topic's readers start at its current end; pending messages stay scheduled after the run.`},
	traceBenchWorkload, // bench_trace.go
	{use: "shared",
		short: "Broker-managed delivery: receive+ack throughput, redelivery lateness, memory of messages in flight",
		long: `Three phases (--shared-phases), each its own result (docs/push.md, "Benchmarks"):
  shared-receive-ack          --count messages, then --shared-consumers consumers of one group
                              pop --shared-batch and acknowledge each batch until drained
  shared-redelivery-lateness  --shared-lateness-count messages received with --shared-invisible
                              and not acknowledged: redelivery lateness percentiles
  shared-inflight             --shared-inflight messages received and held by one group: the
                              broker's RSS growth (needs its pid: --server-pid or a loopback --server)
Use a topic with one partition for the figures of docs/push.md. Each phase uses a new group.`},
	{use: "tx",
		short: "Transactions: plain puts vs local transactions of --tx-size messages vs half message + txend commit",
		long: `Three phases (--tx-phases), each its own result, over the raw protocol with --window units
pipelined on each of --conns connections for --duration (and at least until one unit is done):
  tx-plain        plain puts (the baseline)
  tx-local        BEGIN, --tx-size transactional puts, COMMIT_ONE_PHASE (many transactions in flight
                  on one connection); msgs/s counts messages, the note gives transactions/s
  tx-half-commit  a half message, then txend commit once it is answered (ratio = vs tx-plain)
Run it against a sync-flush broker (--sync checks) for the durable figures.`},
	{use: "all",
		short: "produce, latency, consume, e2e, and topics/partitions when their topics exist",
		long: `Run produce (labelled by the broker's flush mode), latency, consume and e2e on --topic, then
topics and partitions when <topic>-0 … and <topic>-p exist on the brokers (skipped with a note
otherwise).`},
}

func newBenchCommand(app *App) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench <workload>",
		Short: "Benchmark brokers with the Go client: throughput, latency, backlog drain, e2e latency",
		Long: `Measure a running broker (or cluster) with metaq's Go client, the way applications use it.

Workloads (subcommands; the peer comparison's names are aliases):
  produce     publish-async / publish-durable: async publish, --window puts in flight
  latency     one synchronous publish at a time: p50/p99/p999
  consume     consume-backlog: pre-fill --count messages, drain them at full speed
  e2e         publish→delivery latency at a fixed --rate, long-polling readers
  topics      topics-1000: publish over --topics topics vs 1 topic
  partitions  partitions-10000: publish over --partitions partitions vs 1 partition
  publish-batch  batched publish (mput frames of --batch messages); -durable on sync brokers
  tx          transactions: plain puts (baseline), local transactions of --tx-size messages,
              half message + txend commit; --window units pipelined per connection
  all         all of the above (topics/partitions when their topics exist)

--server host:port talks to brokers directly (no ZooKeeper); without it the topic's partitions
and brokers come from ZooKeeper (--zk). msgs/s counts messages acknowledged (publish) or
delivered (consume, e2e) in the measured interval; MB/s is payload bytes / 10^6 per second.
With --server-pid (or a loopback broker that reports its pid in stats) the broker's CPU time
per message is measured over the same interval.

Output: a table (and a live progress line on a terminal), or with --json one benchkit.Result
JSON object per workload and line (bench/README.md). The exit status is 0 when every
workload succeeded.`,
		Example: `  metaq bench produce --server 127.0.0.1:8123
  metaq bench latency --server 127.0.0.1:8123 --duration 5s
  metaq bench consume --server 127.0.0.1:8123 --count 1000000
  metaq bench e2e --rate 1000 --duration 10s            # brokers from ZooKeeper (--zk)
  metaq bench all --server 127.0.0.1:8123 --json
  metaq bench publish-async --json --server 127.0.0.1:8123 --server-pid 4242 --topic bench \
      --msg-size 100 --conns 1 --window 1000 --duration 10s --count 1000000 --rate 1000 \
      --topics 1000 --partitions 10000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("name a workload: produce, latency, consume, e2e, topics, partitions or all\nSee 'metaq bench --help'.")
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringSliceVar(&o.servers, "server", nil, "broker host:port to talk to directly, without ZooKeeper (repeatable or comma-separated)")
	pf.IntVar(&o.serverPID, "server-pid", 0, "pid of the broker process, to measure its CPU time per message (default: the pid a loopback broker reports)")
	pf.StringVar(&o.topic, "topic", "bench", "topic (topics: <topic>-0 …; partitions: <topic>-p)")
	pf.IntVar(&o.msgSize, "msg-size", 100, "message payload bytes")
	pf.IntVar(&o.conns, "conns", 1, "producers, each with its own connection per broker (publish workloads)")
	pf.IntVar(&o.window, "window", 1000, "puts in flight per connection (async publish)")
	pf.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured phase")
	pf.Int64Var(&o.count, "count", 1_000_000, "consume: backlog size; publish workloads: send exactly this many when --duration is not given")
	pf.Float64Var(&o.rate, "rate", 1000, "e2e: messages per second")
	pf.IntVar(&o.topics, "topics", 1000, "topics: number of topics of the spread phase")
	pf.IntVar(&o.partitions, "partitions", 10000, "partitions: number of partitions of <topic>-p")
	pf.IntVar(&o.pairs, "pairs", 5, "topics/partitions: alternating pairs of phases (1 vs many), each --duration / --pairs long")
	pf.StringVar(&o.side, "side", "", "topics/partitions: run every phase on one side, base (1) or spread (many), after priming both — to profile one side alone (bench/profile.sh SIDE=)")
	pf.StringVar(&o.tag, "tag", "", "tag of the messages (consumers fetch with this tag filter)")
	pf.StringVar(&o.where, "where", "", "consume: fetch with this filter expression; the backlog's messages carry bench=0…9 (\"bench = 0\" keeps 10%)")
	pf.BoolVar(&o.sync, "sync", false, "expect sync flush (durable at ack): fail unless every broker reports flush_mode sync")
	pf.IntVar(&o.fetchSize, "fetch-size", 1<<20, "consume/e2e: bytes per get (the broker caps it at maxTransferSize)")
	pf.IntVar(&o.fetchDepth, "fetch-depth", 4, "consume: gets in flight per partition")
	pf.BoolVar(&o.fetchInto, "fetch-into", false, "consume: read with Admin.FetchInto (a reused buffer, records iterated in place) instead of FetchWith (accumulation always does)")
	pf.StringVar(&o.cpuProfile, "cpuprofile", "", "write the benchmark client's CPU profile to this file")
	pf.BoolVar(&o.stallProbe, "stall-probe", false, "run a thread that only sleeps beside each workload and report how late it woke (stall_p99_us, stall_max_us): the machine's stalls, next to the workload's figures")
	pf.IntVar(&o.batch, "batch", 1000, "publish-batch: messages per mput frame (1 … 10000)")
	pf.IntVar(&o.batchInflight, "batch-inflight", 5, "publish-batch: mput frames in flight per producer connection (Kafka's max.in.flight.requests.per.connection is 5)")
	pf.IntVar(&o.zk.inflight, "zk-inflight", 64, "zk-offsets: requests in flight on the ZooKeeper session")
	pf.IntVar(&o.zk.multi, "zk-multi", 100, "zk-offsets: set-datas per multi-op")
	pf.Int64Var(&o.accum.backlog, "backlog", 50_000_000, "accumulation: messages piled up before the measured phases")
	pf.BoolVar(&o.accum.dropCaches, "drop-caches", false, "accumulation: drop the page cache before the cold phases (root; broker on this machine)")
	pf.StringVar(&o.accum.dataDir, "data-dir", "", "accumulation: the broker's dataPath, to measure the disk's sequential read bandwidth (O_DIRECT)")
	pf.IntVar(&o.accum.fillBatch, "fill-batch", 1000, "accumulation: messages per mput frame while piling up the backlog")
	addDelayBenchFlags(pf, &o.delay)
	addTraceBenchFlags(pf, o) // bench_trace.go
	addSharedBenchFlags(pf, &o.shared)
	addTxBenchFlags(pf, &o.tx)

	for _, w := range benchWorkloads {
		cmd.AddCommand(newBenchWorkloadCommand(app, o, w))
	}
	return cmd
}

func newBenchWorkloadCommand(app *App, o *benchOpts, w benchWorkload) *cobra.Command {
	return &cobra.Command{
		Use:     w.use,
		Aliases: w.aliases,
		Short:   w.short,
		Long:    w.long,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.durationSet = cmd.Flags().Changed("duration")
			o.countSet = cmd.Flags().Changed("count")
			return app.bench(cmd.Context(), o, cmd.CalledAs())
		},
	}
}

func (o *benchOpts) validate(name string) error {
	switch {
	case o.msgSize < 1:
		return usageErr("--msg-size must be >= 1")
	case o.conns < 1:
		return usageErr("--conns must be >= 1")
	case o.window < 1:
		return usageErr("--window must be >= 1")
	case o.duration <= 0:
		return usageErr("--duration must be > 0")
	case o.count < 1:
		return usageErr("--count must be >= 1")
	case !(o.rate > 0):
		return usageErr("--rate must be > 0")
	case o.topics < 1:
		return usageErr("--topics must be >= 1")
	case o.partitions < 1:
		return usageErr("--partitions must be >= 1")
	case o.side != "" && o.side != "base" && o.side != "spread":
		return usageErr("--side must be base or spread")
	case o.fetchSize < 1:
		return usageErr("--fetch-size must be >= 1")
	case o.fetchDepth < 1:
		return usageErr("--fetch-depth must be >= 1")
	case o.batchInflight < 1:
		return usageErr("--batch-inflight must be >= 1")
	case o.batch < 1 || o.batch > 10000:
		return usageErr("--batch must be 1 … 10000")
	case o.accum.backlog < 1 || o.accum.fillBatch < 1 || o.accum.fillBatch > 10000:
		return usageErr("--backlog must be >= 1 and --fill-batch 1 … 10000")
	case strings.ContainsAny(o.tag, " \t\r\n"):
		return usageErr("--tag must not contain white space")
	}
	if (name == benchkit.WorkloadE2E || name == "all") && o.msgSize < benchkit.StampSize {
		return usageErr("e2e needs --msg-size >= %d (the send time travels in the body)", benchkit.StampSize)
	}
	return nil
}

// bench runs the workload called as name and prints its results.
func (a *App) bench(ctx context.Context, o *benchOpts, name string) error {
	if err := o.validate(name); err != nil {
		return err
	}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if name == "zk-offsets" {
		if o.zk.inflight < 1 || o.zk.multi < 1 {
			return usageErr("--zk-inflight and --zk-multi must be >= 1")
		}
		return a.benchZK(ctx, o)
	}
	b, err := a.newBencher(ctx, o)
	if err != nil {
		return err
	}
	defer b.close()

	// produce labels its result by the brokers' flush mode.
	produce := func(ctx context.Context) benchkit.Result { return b.publish(ctx, "") }
	var runs []func(context.Context) benchkit.Result
	var multi func(context.Context) []benchkit.Result // a workload with several results
	switch name {
	case "produce", "publish":
		runs = append(runs, produce)
	case benchkit.WorkloadPublishAsync, benchkit.WorkloadPublishDurable:
		runs = append(runs, func(ctx context.Context) benchkit.Result { return b.publish(ctx, name) })
	case benchkit.WorkloadLatency:
		runs = append(runs, b.latency)
	case "consume", benchkit.WorkloadConsumeBacklog:
		runs = append(runs, b.consume)
	case benchkit.WorkloadE2E:
		runs = append(runs, b.e2e)
	case "topics", benchkit.WorkloadTopics1000:
		runs = append(runs, b.spreadTopics)
	case "partitions", benchkit.WorkloadPartitions10000:
		runs = append(runs, b.spreadPartitions)
	case benchkit.WorkloadPublishBatch, "batch":
		runs = append(runs, func(ctx context.Context) benchkit.Result { return b.publishBatch(ctx, "") })
	case benchkit.WorkloadPublishBatchDurable:
		runs = append(runs, func(ctx context.Context) benchkit.Result { return b.publishBatch(ctx, name) })
	case benchkit.WorkloadAccumulation:
		multi = b.accumulation
	case "trace":
		runs = append(runs, b.traceCost) // bench_trace.go
	case "shared":
		phases, err := b.sharedPhases()
		if err != nil {
			return err
		}
		runs = append(runs, phases...)
	case "tx":
		phases, err := b.txPhases()
		if err != nil {
			return err
		}
		runs = append(runs, phases...)
	case "delay":
		phases, err := b.delayPhases()
		if err != nil {
			return err
		}
		runs = append(runs, phases...)
	case "all":
		runs = append(runs, produce, b.latency, b.consume, b.e2e)
		if ok, why := b.topicsExist(ctx); ok {
			runs = append(runs, b.spreadTopics)
		} else {
			a.warnf("bench all: skipping %s: %s", benchkit.WorkloadTopics1000, why)
		}
		if ok, why := b.partitionsExist(ctx); ok {
			runs = append(runs, b.spreadPartitions)
		} else {
			a.warnf("bench all: skipping %s: %s", benchkit.WorkloadPartitions10000, why)
		}
	default:
		return usageErr("unknown workload %q", name)
	}

	var results []benchkit.Result
	failed := 0
	emit := func(r benchkit.Result) error {
		if r.Error == "" && ctx.Err() != nil {
			r.Error = "interrupted"
		}
		if r.Error != "" {
			failed++
			a.warnf("bench %s failed: %s", r.Workload, r.Error)
		}
		results = append(results, r)
		if a.JSON {
			return benchkit.WriteJSON(a.Stdout, r)
		}
		return nil
	}
	for _, run := range runs {
		if ctx.Err() != nil {
			break
		}
		if o.stallProbe {
			run = withStallProbe(run)
		}
		if err := emit(run(ctx)); err != nil {
			return err
		}
	}
	if multi != nil {
		for _, r := range multi(ctx) {
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	if !a.JSON {
		writeBenchTable(a.Stdout, results)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if failed > 0 {
		return silentExit{ExitFailure}
	}
	return nil
}

// withStallProbe runs a benchkit.StallProbe during run and puts its
// overruns into the result (stall_p99_us, stall_max_us).
func withStallProbe(run func(context.Context) benchkit.Result) func(context.Context) benchkit.Result {
	return func(ctx context.Context) benchkit.Result {
		p := benchkit.StartStallProbe()
		r := run(ctx)
		r.SetStall(p.Stop())
		return r
	}
}

// writeBenchTable prints the results for people: one row per workload, then the notes.
func writeBenchTable(w io.Writer, results []benchkit.Result) {
	if len(results) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tMSGS\tSECONDS\tMSGS/S\tMB/S\tP50\tP99\tP999\tMAX\tSERVER CPU/MSG\tVS 1 TOPIC/PART")
	dash := func(v float64, f func(float64) string) string {
		if v <= 0 {
			return "-"
		}
		return f(v)
	}
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tfailed\t\t\t\t\t\t\t\t\t\n", r.Workload)
			continue
		}
		ratio := "-"
		if r.DegradationRatio > 0 {
			ratio = fmt.Sprintf("%.2f of %s", r.DegradationRatio, benchkit.FormatRate(r.BaselineMsgsPerSec))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Workload, benchkit.FormatCount(r.Msgs), r.Seconds,
			benchkit.FormatRate(r.MsgsPerSec), r.MBPerSec, dash(r.P50us, fmtUS), dash(r.P99us, fmtUS), dash(r.P999us, fmtUS), dash(r.MaxUs, fmtUS),
			dash(r.ServerCPUusPerMsg, func(v float64) string { return fmt.Sprintf("%.2f µs", v) }), ratio)
	}
	tw.Flush()
	for _, r := range results {
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "\n%s: FAILED: %s", r.Workload, r.Error)
		case r.Notes != "":
			fmt.Fprintf(w, "\n%s: %s", r.Workload, r.Notes)
		}
	}
	fmt.Fprintln(w)
}

func fmtUS(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1f ms", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f µs", v)
}

// benchErr maps a setup failure to an exit code: unreachable brokers are "unavailable".
func benchErr(err error) error {
	var ee *ExitError
	if err == nil || errors.As(err, &ee) || errors.Is(err, context.Canceled) {
		return err
	}
	return &ExitError{Code: ExitUnavailable, Err: err}
}
