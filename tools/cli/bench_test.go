package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// runBench runs `metaq <args>` in-process (no ZooKeeper).
func runBench(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return runCLI(t, ctx, "", "", args...)
}

// benchArgs is the command line bench/'s peer harness passes, with short phases.
func benchArgs(workload, addr string, extra ...string) []string {
	args := []string{"bench", workload, "--json",
		"--server", addr,
		"--server-pid", strconv.Itoa(os.Getpid()),
		"--topic", "bench",
		"--msg-size", "100",
		"--conns", "1",
		"--window", "100",
		"--duration", "200ms",
		"--count", "20000",
		"--rate", "1000",
		"--topics", "10",
		"--partitions", "20",
	}
	return append(args, extra...)
}

func benchTopics() map[string]int {
	topics := map[string]int{"bench": 1, "bench-p": 20, "multi": 4}
	for i := range 10 {
		topics["bench-"+strconv.Itoa(i)] = 1
	}
	return topics
}

func oneResult(t testing.TB, out string) benchkit.Result {
	t.Helper()
	rs, err := benchkit.ReadResults(strings.NewReader(out))
	if err != nil {
		t.Fatalf("results: %v\n%s", err, out)
	}
	if len(rs) != 1 {
		t.Fatalf("want 1 result, got %d:\n%s", len(rs), out)
	}
	return rs[0]
}

// checkSane checks what every successful result must hold.
func checkSane(t *testing.T, r benchkit.Result, workload string) {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("%s failed: %s", workload, r.Error)
	}
	if r.System != "metaq" || r.Workload != workload || r.MsgSize != 100 {
		t.Fatalf("identity: %+v", r)
	}
	if r.Msgs <= 0 || r.Seconds <= 0 || r.MsgsPerSec <= 0 || r.MBPerSec <= 0 {
		t.Fatalf("%s: no throughput: %+v", workload, r)
	}
	// Seconds is rounded to the millisecond (benchkit.SetThroughput) and MsgsPerSec is not: a
	// phase of a few milliseconds (consume-backlog drains 20,000 messages in ~8 ms) carries up
	// to 0.5 ms of rounding, over 5% of it.
	lo, hi := float64(r.Msgs)/(r.Seconds+0.0005), float64(r.Msgs)/max(r.Seconds-0.0005, 1e-6)
	if r.MsgsPerSec < lo*0.95 || r.MsgsPerSec > hi*1.05 {
		t.Fatalf("%s: msgs/s %.0f does not match %d msgs in %.3fs", workload, r.MsgsPerSec, r.Msgs, r.Seconds)
	}
	if r.MsgsPerSec > 50e6 {
		t.Fatalf("%s: implausible rate %.0f msgs/s", workload, r.MsgsPerSec)
	}
	// The broker's CPU is read in clock ticks (10 ms): a phase this short on a loaded machine
	// may see none, so 0 is a measurement; what must hold is that it was measured at all.
	if r.ServerCPUusPerMsg < 0 || !strings.Contains(r.Notes, "server CPU of pid") {
		t.Fatalf("%s: server CPU not measured with --server-pid: %+v", workload, r)
	}
	if !strings.Contains(r.Notes, "metaq Go client") || !strings.Contains(r.Notes, "client CPU") {
		t.Fatalf("%s: notes %q", workload, r.Notes)
	}
}

func checkLatency(t *testing.T, r benchkit.Result) {
	t.Helper()
	if !(r.P50us > 0 && r.P50us <= r.P99us && r.P99us <= r.P999us && r.P999us <= r.MaxUs) {
		t.Fatalf("%s: latency percentiles %v/%v/%v/%v", r.Workload, r.P50us, r.P99us, r.P999us, r.MaxUs)
	}
	if r.P50us > 1e6 {
		t.Fatalf("%s: p50 %.0f µs", r.Workload, r.P50us)
	}
}

// Every workload, as bench/'s peer harness runs it, against a real broker.
func TestBenchWorkloads(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: benchTopics(), SegSize: 64 << 20})

	for _, wl := range []string{benchkit.WorkloadPublishAsync, benchkit.WorkloadLatency, benchkit.WorkloadConsumeBacklog,
		benchkit.WorkloadE2E, benchkit.WorkloadTopics1000, benchkit.WorkloadPartitions10000} {
		t.Run(wl, func(t *testing.T) {
			out, errs, code := runBench(t, benchArgs(wl, b.Addr)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			r := oneResult(t, out)
			checkSane(t, r, wl)
			switch wl {
			case benchkit.WorkloadLatency, benchkit.WorkloadE2E:
				checkLatency(t, r)
			default:
				if r.P50us != 0 {
					t.Fatalf("%s reports a latency: %+v", wl, r)
				}
			}
			switch wl {
			case benchkit.WorkloadConsumeBacklog:
				if r.Msgs != 20000 {
					t.Fatalf("drained %d of a 20,000-message backlog", r.Msgs)
				}
			case benchkit.WorkloadE2E:
				// 1,000 msg/s for 200 ms: paced, so about 200 — but how many fit in the phase
				// depends on the scheduler (a pacer tick at each end, a stalled sender on a
				// loaded machine); an unpaced sender would deliver thousands.
				if r.Msgs < 1 || r.Msgs > 400 {
					t.Fatalf("e2e delivered %d messages", r.Msgs)
				}
			case benchkit.WorkloadTopics1000:
				if r.Topics != 10 || r.BaselineMsgsPerSec <= 0 || r.DegradationRatio <= 0 || !strings.Contains(r.Notes, "5 alternating pairs") {
					t.Fatalf("topics: %+v", r)
				}
			case benchkit.WorkloadPartitions10000:
				if r.Partitions != 20 || r.BaselineMsgsPerSec <= 0 || r.DegradationRatio <= 0 || !strings.Contains(r.Notes, "5 alternating pairs") {
					t.Fatalf("partitions: %+v", r)
				}
			}
		})
	}

	// A topic of 4 partitions: the backlog and the e2e readers cover all of them; --count alone
	// makes a publish phase send exactly that many.
	t.Run("partitions of one topic", func(t *testing.T) {
		for _, wl := range []string{"consume", "e2e"} {
			out, errs, code := runBench(t, "bench", wl, "--json", "--server", b.Addr, "--topic", "multi", "--count", "5000",
				"--duration", "200ms", "--tag", "t1", "--fetch-size", "10000", "--fetch-depth", "3")
			if code != 0 {
				t.Fatalf("%s: exit %d\n%s\n%s", wl, code, out, errs)
			}
			r := oneResult(t, out)
			if r.Error != "" || r.Msgs <= 0 || !strings.Contains(r.Notes, "4 ") {
				t.Fatalf("%s: %+v", wl, r)
			}
			if wl == "consume" && r.Msgs != 5000 {
				t.Fatalf("drained %d of 5,000", r.Msgs)
			}
		}
		out, errs, code := runBench(t, "bench", "produce", "--json", "--server", b.Addr, "--topic", "multi", "--count", "3000")
		if code != 0 {
			t.Fatalf("produce --count: exit %d\n%s\n%s", code, out, errs)
		}
		if r := oneResult(t, out); r.Msgs != 3000 || r.Workload != benchkit.WorkloadPublishAsync {
			t.Fatalf("produce --count 3000: %+v", r)
		}
	})

	t.Run("all, human output", func(t *testing.T) {
		out, errs, code := runBench(t, "bench", "all", "--server", b.Addr, "--duration", "150ms", "--count", "5000",
			"--topics", "10", "--partitions", "20")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{"WORKLOAD", "MSGS/S", "publish-async", "latency", "consume-backlog", "e2e", "topics-1000", "partitions-10000", "µs"} {
			if !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("all skips what is not configured", func(t *testing.T) {
		out, errs, code := runBench(t, "bench", "all", "--json", "--server", b.Addr, "--duration", "100ms", "--count", "2000",
			"--topics", "11", "--partitions", "7")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		rs, err := benchkit.ReadResults(strings.NewReader(out))
		if err != nil || len(rs) != 4 {
			t.Fatalf("want 4 results: %v\n%s", err, out)
		}
		if !strings.Contains(errs, "skipping topics-1000") || !strings.Contains(errs, "skipping partitions-10000") {
			t.Fatalf("stderr:\n%s", errs)
		}
	})
}

// The flush mode is the broker's: publish-durable needs a sync-flush broker, produce labels the
// result after it.
func TestBenchFlushMode(t *testing.T) {
	async := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bench": 1}})
	sync := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bench": 1}, Sync: true})

	out, _, code := runBench(t, benchArgs(benchkit.WorkloadPublishDurable, async.Addr)...)
	if code != ExitFailure {
		t.Fatalf("publish-durable on an async broker: exit %d", code)
	}
	if r := oneResult(t, out); !strings.Contains(r.Error, "flush_mode is async") {
		t.Fatalf("publish-durable on an async broker: %+v", r)
	}
	if _, _, code := runBench(t, "bench", "produce", "--sync", "--server", async.Addr, "--duration", "50ms"); code != ExitFailure {
		t.Fatalf("produce --sync on an async broker: exit %d", code)
	}

	out, errs, code := runBench(t, benchArgs(benchkit.WorkloadPublishDurable, sync.Addr)...)
	if code != 0 {
		t.Fatalf("publish-durable: exit %d\n%s\n%s", code, out, errs)
	}
	r := oneResult(t, out)
	checkSane(t, r, benchkit.WorkloadPublishDurable)
	if !strings.Contains(r.Notes, "flush_mode sync") {
		t.Fatalf("notes %q", r.Notes)
	}
	out, _, code = runBench(t, "bench", "produce", "--json", "--server", sync.Addr, "--duration", "100ms")
	if r := oneResult(t, out); code != 0 || r.Workload != benchkit.WorkloadPublishDurable {
		t.Fatalf("produce on a sync broker: exit %d %+v", code, r)
	}
}

// Without --server the partitions and brokers come from ZooKeeper.
func TestBenchZooKeeper(t *testing.T) {
	zk := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zk, BrokerID: 3, Topics: map[string]int{"bench": 2, "bench-p": 6}})
	p, err := client.NewProducer(client.Config{ZKConnect: zk})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	zktest.Eventually(t, 20*time.Second, func() bool {
		a, _ := p.Partitions(context.Background(), "bench")
		c, _ := p.Partitions(context.Background(), "bench-p")
		return len(a) == 2 && len(c) == 6
	}, "topics not registered in ZooKeeper")

	for _, wl := range []string{"produce", "latency", "consume", "e2e", "partitions"} {
		out, errs, code := runBench(t, "bench", wl, "--json", "--zk", zk, "--duration", "200ms", "--count", "4000",
			"--partitions", "6", "--server-pid", strconv.Itoa(os.Getpid()))
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", wl, code, out, errs)
		}
		r := oneResult(t, out)
		if r.Error != "" || r.Msgs <= 0 || !strings.Contains(r.Notes, "brokers from ZooKeeper") {
			t.Fatalf("%s: %+v", wl, r)
		}
		switch wl {
		case "consume":
			if r.Msgs != 4000 || !strings.Contains(r.Notes, "2 partition(s)") {
				t.Fatalf("consume: %+v", r)
			}
		case "partitions":
			if r.Partitions != 6 || !strings.Contains(r.Notes, "round-robin selector") {
				t.Fatalf("partitions: %+v", r)
			}
		}
	}
	if b.Addr == "" {
		t.Fatal("no broker")
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nonsense"},
		{"bench", "e2e", "--server", "127.0.0.1:1", "--msg-size", "4"},
		{"bench", "produce", "--server", "127.0.0.1:1", "--window", "0"},
		{"bench", "produce", "--server", "127.0.0.1:1", "--duration", "0s"},
		{"bench", "produce", "--server", "127.0.0.1:1", "--tag", "a b"},
	} {
		if _, errs, code := runBench(t, args...); code != ExitUsage {
			t.Errorf("metaq %s: exit %d, want %d\n%s", strings.Join(args, " "), code, ExitUsage, errs)
		}
	}
	if out, _, code := runBench(t, "bench", "--help"); code != 0 || !strings.Contains(out, "partitions-10000") {
		t.Fatalf("bench --help: exit %d\n%s", code, out)
	}

	// Nothing listens: unavailable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, errs, code := runBench(t, "bench", "latency", "--server", addr, "--connect-timeout", "2s"); code != ExitUnavailable {
		t.Fatalf("no broker: exit %d\n%s", code, errs)
	}
}

func TestBenchTable(t *testing.T) {
	var b bytes.Buffer
	r := benchkit.Result{System: "metaq", Workload: "latency", MsgSize: 100, Notes: "n"}
	r.SetThroughput(1000, time.Second)
	r.P50us, r.P99us, r.P999us, r.MaxUs = 20, 150, 12000, 15000
	f := benchkit.Result{System: "metaq", Workload: "e2e", Error: "boom"}
	writeBenchTable(&b, []benchkit.Result{r, f})
	out := b.String()
	for _, want := range []string{"latency", "1,000", "20.0 µs", "150 µs", "12.0 ms", "e2e", "failed", "FAILED: boom", "latency: n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkWorkloads runs each `metaq bench` workload against a broker in this process,
// configured as bench/run.sh configures it (1 GiB segments, 20 MiB index files, MetaQ's async
// flush; sync flush for publish-durable), so that one CPU profile covers the client and the
// broker. Phases last METAQ_BENCH_DURATION (default 3s); the backlog is METAQ_BENCH_COUNT
// (default 1,000,000).
//
//	go test -run '^$' -bench 'Workloads/publish-async' -benchtime 1x -cpuprofile cpu.prof ./tools/cli
//	go tool pprof -top -focus 'metaq/broker' cli.test cpu.prof
func BenchmarkWorkloads(b *testing.B) {
	dur := os.Getenv("METAQ_BENCH_DURATION")
	if dur == "" {
		dur = "3s"
	}
	count := os.Getenv("METAQ_BENCH_COUNT")
	if count == "" {
		count = "1000000"
	}
	for _, wl := range benchkit.Workloads {
		b.Run(wl, func(b *testing.B) {
			topics := map[string]int{"bench": 1}
			switch wl {
			case benchkit.WorkloadTopics1000:
				for i := range 1000 {
					topics["bench-"+strconv.Itoa(i)] = 1
				}
			case benchkit.WorkloadPartitions10000:
				topics["bench-p"] = 10000
			}
			for range b.N {
				br := brokertest.RunBroker(b, brokertest.Options{Topics: topics, SegSize: 1 << 30,
					Sync:      wl == benchkit.WorkloadPublishDurable || wl == benchkit.WorkloadPublishBatchDurable,
					StoreConf: func(c *store.Config) { c.IndexFileSize = store.DefaultIndexFileSize }})
				out, errs, code := runBench(b, "bench", wl, "--json", "--server", br.Addr, "--duration", dur, "--count", count)
				if code != 0 {
					b.Fatalf("exit %d\n%s\n%s", code, out, errs)
				}
				r := oneResult(b, out)
				b.ReportMetric(r.MsgsPerSec, "msgs/s")
				if r.P50us > 0 {
					b.ReportMetric(r.P50us, "p50-µs")
					b.ReportMetric(r.P99us, "p99-µs")
				}
				if r.DegradationRatio > 0 {
					b.ReportMetric(r.DegradationRatio, "ratio")
				}
				br.Stop()
			}
		})
	}
}
