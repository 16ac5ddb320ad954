package benchkit

import (
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	rs := []Result{
		{System: "jetstream", Workload: WorkloadPublishAsync, MsgsPerSec: 200000, ServerCPUusPerMsg: 4},
		{System: "metaq", Workload: WorkloadPublishAsync, MsgsPerSec: 800000, ServerCPUusPerMsg: 1},
		{System: "redis", Workload: WorkloadPublishAsync, MsgsPerSec: 1600000},
		{System: "metaq", Workload: WorkloadLatency, P50us: 50, P99us: 150},
		{System: "nsq", Workload: WorkloadLatency, P50us: 100, P99us: 300},
		{System: "metaq", Workload: WorkloadTopics1000, MsgsPerSec: 720000, BaselineMsgsPerSec: 800000, DegradationRatio: 0.9},
		{System: "jetstream", Workload: WorkloadTopics1000, MsgsPerSec: 54000, BaselineMsgsPerSec: 200000, DegradationRatio: 0.27},
		{System: "nsq", Workload: WorkloadE2E, Error: "boom"},
		{System: "jetstream", Workload: WorkloadE2E, P50us: 13500, P99us: 1585447},
		{System: "custom", Workload: "my-load", MsgsPerSec: 10},
		{System: "metaq", Workload: WorkloadPublishDurable, MsgsPerSec: 300000, ServerCPUusPerMsg: 3},
		{System: "jetstream-sync", Workload: WorkloadPublishDurable, MsgsPerSec: 4500, ServerCPUusPerMsg: 90},
		// repeated runs: median (300k) is picked
		{System: "nsq", Workload: WorkloadConsumeBacklog, MsgsPerSec: 100000},
		{System: "nsq", Workload: WorkloadConsumeBacklog, MsgsPerSec: 900000},
		{System: "nsq", Workload: WorkloadConsumeBacklog, MsgsPerSec: 300000},
	}
	var sb strings.Builder
	if err := WriteTable(&sb, rs, "metaq"); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	if lines[0] != "| workload | metaq | jetstream | jetstream-sync | nsq | redis | custom |" {
		t.Fatalf("header: %q", lines[0])
	}
	want := []string{
		"| publish-async | 800k/s | 200k/s (4.00×) | — | — | 1.60M/s (0.50×) | — |",
		"| publish-durable | 300k/s | — | 4.50k/s (66.7×) | — | — | — |",
		"| latency | 50.0/150 µs | — | — | 100/300 µs (0.50/0.50×) | — | — |",
		"| consume-backlog | — | — | — | 300k/s | — | — |",
		"| e2e | — | 13.5/1585 ms | — | failed | — | — |",
		"| topics-1000 | 0.90 of 800k/s | 0.27 of 200k/s (3.33×) | — | — | — | — |",
		"| my-load | — | — | — | — | — | 10/s |",
		"| server CPU µs/msg (publish) | 1.00 | 4.00 (0.25×) | 90.0 (durable) (0.03×) | — | — | — |",
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("missing row %q", w)
		}
	}
	// order of rows follows Workloads
	if strings.Index(out, "| publish-async") > strings.Index(out, "| latency") ||
		strings.Index(out, "| topics-1000") > strings.Index(out, "| my-load") {
		t.Error("row order")
	}
	sb.Reset()
	WriteTable(&sb, nil, "metaq")
	if !strings.Contains(sb.String(), "no results") {
		t.Error("empty table")
	}
}

func TestPickPrefersSuccess(t *testing.T) {
	rs := []Result{
		{System: "a", Workload: "w", Error: "x"},
		{System: "a", Workload: "w", MsgsPerSec: 5},
	}
	r, ok := Pick(rs, "a", "w")
	if !ok || r.MsgsPerSec != 5 {
		t.Fatalf("%+v", r)
	}
	if _, ok := Pick(rs, "b", "w"); ok {
		t.Fatal("found missing system")
	}
}

func TestFormat(t *testing.T) {
	cases := map[float64]string{0: "0/s", 850: "850/s", 4600: "4.60k/s", 228000: "228k/s", 1410000: "1.41M/s", 22500: "22.5k/s", 2.5e9: "2.50G/s"}
	for v, want := range cases {
		if got := FormatRate(v); got != want {
			t.Errorf("FormatRate(%v)=%q want %q", v, got, want)
		}
	}
	counts := map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"}
	for v, want := range counts {
		if got := FormatCount(v); got != want {
			t.Errorf("FormatCount(%v)=%q want %q", v, got, want)
		}
	}
}

// The latency rows' stall probe (stall.go) gets a row of its own per
// workload, from the same picked run as the row above it.
func TestWriteTableStallRows(t *testing.T) {
	rs := []Result{
		{System: "metaq", Workload: WorkloadE2E, P50us: 200, P99us: 900, StallP99us: 80, StallMaxUs: 4500},
		{System: "redis", Workload: WorkloadE2E, P50us: 210, P99us: 1200, StallP99us: 95, StallMaxUs: 12000},
		{System: "metaq", Workload: WorkloadLatency, P50us: 30, P99us: 200},
	}
	var sb strings.Builder
	if err := WriteTable(&sb, rs, "metaq"); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	if !strings.Contains(out, "| e2e: machine stall p99/max | 80.0/4500 µs | 0.10/12.0 ms |\n") {
		t.Errorf("stall row missing:\n%s", out)
	}
	if strings.Contains(out, "latency: machine stall") {
		t.Errorf("a stall row without a probe:\n%s", out)
	}
}

// The probe records at least one nap however soon it is stopped.
func TestStallProbe(t *testing.T) {
	h := StartStallProbe().Stop()
	if h.Count() == 0 {
		t.Fatal("no nap recorded")
	}
	var r Result
	r.SetStall(h)
	if r.StallMaxUs < r.StallP99us || r.StallMaxUs < 0 {
		t.Fatalf("stall p99 %v max %v", r.StallP99us, r.StallMaxUs)
	}
}
