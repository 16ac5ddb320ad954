package cli

import (
	"strings"
	"testing"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// publish-batch is labelled by the broker's flush mode like produce; accumulation gives its two
// results (publish with the cold reader vs without, the reader vs the disk); zk-offsets measures
// an ensemble without a broker.
func TestBenchBatchAccumulationZK(t *testing.T) {
	async := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bench": 2}, SegSize: 8 << 20})
	sync := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bench": 1}, Sync: true})

	out, errs, code := runBench(t, benchArgs(benchkit.WorkloadPublishBatch, async.Addr, "--batch", "50")...)
	if code != 0 {
		t.Fatalf("publish-batch: exit %d\n%s\n%s", code, out, errs)
	}
	r := oneResult(t, out)
	checkSane(t, r, benchkit.WorkloadPublishBatch)
	if r.Msgs%50 != 0 || !strings.Contains(r.Notes, "50 messages per mput frame") {
		t.Fatalf("publish-batch: %+v", r)
	}
	// --count alone: exactly that many messages, the last frame shorter.
	out, errs, code = runBench(t, "bench", benchkit.WorkloadPublishBatch, "--json", "--server", async.Addr,
		"--topic", "bench", "--batch", "100", "--batch-inflight", "3", "--count", "1234")
	if code != 0 {
		t.Fatalf("publish-batch --count: exit %d\n%s\n%s", code, out, errs)
	}
	if r := oneResult(t, out); r.Msgs != 1234 || !strings.Contains(r.Notes, "3 frames in flight") {
		t.Fatalf("publish-batch --count 1234: %d messages, notes %q", r.Msgs, r.Notes)
	}
	out, errs, code = runBench(t, benchArgs(benchkit.WorkloadPublishBatch, sync.Addr)...)
	if code != 0 {
		t.Fatalf("publish-batch on a sync broker: exit %d\n%s\n%s", code, out, errs)
	}
	if r := oneResult(t, out); r.Workload != benchkit.WorkloadPublishBatchDurable {
		t.Fatalf("publish-batch on a sync broker is labelled %s", r.Workload)
	}
	if out, _, code := runBench(t, benchArgs(benchkit.WorkloadPublishBatchDurable, async.Addr)...); code != ExitFailure ||
		!strings.Contains(oneResult(t, out).Error, "flush_mode is async") {
		t.Fatalf("publish-batch-durable on an async broker: exit %d\n%s", code, out)
	}

	out, errs, code = runBench(t, benchArgs(benchkit.WorkloadAccumulation, async.Addr, "--backlog", "30000", "--fill-batch", "500",
		"--data-dir", async.Dir, "--duration", "1s", "--fetch-size", "65536")...)
	if code != 0 {
		t.Fatalf("accumulation: exit %d\n%s\n%s", code, out, errs)
	}
	rs, err := benchkit.ReadResults(strings.NewReader(out))
	if err != nil || len(rs) != 3 {
		t.Fatalf("accumulation: want 3 results: %v\n%s", err, out)
	}
	pub, rd, alone := rs[0], rs[1], rs[2]
	checkSane(t, pub, benchkit.WorkloadAccumulation)
	if pub.BaselineMsgsPerSec <= 0 || pub.DegradationRatio <= 0 || !strings.Contains(pub.Notes, "backlog of 30,000 messages") {
		t.Fatalf("accumulation: %+v", pub)
	}
	if rd.Workload != benchkit.WorkloadAccumulation+"-reader" || rd.Error != "" || rd.Msgs < 0 || !strings.Contains(rd.Notes, "O_DIRECT") ||
		!strings.Contains(rd.Notes, "reader / disk") {
		t.Fatalf("accumulation-reader: %+v", rd)
	}
	if alone.Workload != benchkit.WorkloadAccumulation+"-reader-alone" || alone.Error != "" || alone.Msgs <= 0 ||
		!strings.Contains(alone.Notes, "reader alone / disk") || !strings.Contains(alone.Notes, "machine CPU busy") {
		t.Fatalf("accumulation-reader-alone: %+v", alone)
	}

	zk := zktest.Server(t)
	ctx := t.Context()
	out, errs, code = runCLI(t, ctx, zk, "", "bench", "zk-offsets", "--json", "--partitions", "50", "--duration", "200ms", "--zk-inflight", "4", "--zk-multi", "10")
	if code != 0 {
		t.Fatalf("zk-offsets: exit %d\n%s\n%s", code, out, errs)
	}
	rs, err = benchkit.ReadResults(strings.NewReader(out))
	if err != nil || len(rs) != 2 || rs[0].Workload != "zk-set" || rs[1].Workload != "zk-multi" || rs[0].Msgs <= 0 || rs[1].Msgs%10 != 0 {
		t.Fatalf("zk-offsets: %v\n%s", err, out)
	}
}
