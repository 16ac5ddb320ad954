package benchkit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestResultJSON(t *testing.T) {
	r := Result{System: "metaq", Workload: WorkloadPublishAsync, MsgSize: 100, Notes: "n"}
	r.SetThroughput(1_000_000, 2*time.Second)
	if r.MsgsPerSec != 500000 || r.MBPerSec != 50 || r.Seconds != 2 || r.Msgs != 1_000_000 {
		t.Fatalf("throughput: %+v", r)
	}
	r.SetServerCPU(3*time.Second, 1_000_000)
	if r.ServerCPUusPerMsg != 3 {
		t.Fatalf("cpu: %v", r.ServerCPUusPerMsg)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	line := buf.String()
	if !strings.HasSuffix(line, "}\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("not one JSON line: %q", line)
	}
	// latency not measured: fields omitted
	for _, k := range []string{"p50_us", "p99_us", "p999_us", "max_us", "error", "topics", "degradation_ratio"} {
		if strings.Contains(line, `"`+k+`"`) {
			t.Fatalf("%s should be omitted: %s", k, line)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "workload", "msg_size", "msgs", "seconds", "msgs_per_sec", "mb_per_sec", "server_cpu_us_per_msg", "notes"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("missing %s in %s", k, line)
		}
	}

	h := NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	l := Result{System: "nsq", Workload: WorkloadLatency, MsgSize: 100}
	l.SetLatency(h)
	l.SetLatency(NewHistogram()) // empty: no change
	if l.P50us < 500 || l.P50us > 505 || l.P99us < 990 || l.P99us > 998 || l.MaxUs != 1000 || l.P999us < 999 {
		t.Fatalf("latency: %+v", l)
	}
	buf.Reset()
	WriteJSON(&buf, l)
	if !strings.Contains(buf.String(), `"p50_us"`) {
		t.Fatal("p50 missing")
	}

	in := "starting nats-server...\n\n" + line + buf.String() + "  \n"
	got, err := ReadResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != r || got[1] != l {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := ReadResults(strings.NewReader("{bad\n")); err == nil {
		t.Fatal("bad JSON accepted")
	}
	if _, err := ReadResults(strings.NewReader(`{"msgs":1}` + "\n")); err == nil {
		t.Fatal("result without identity accepted")
	}
}

func TestSetBaselineAndZeroElapsed(t *testing.T) {
	r := Result{System: "jetstream", Workload: WorkloadTopics1000, MsgSize: 100, Topics: 1000}
	r.SetThroughput(60000, time.Second)
	r.SetBaseline(240000)
	if r.DegradationRatio != 0.25 || r.BaselineMsgsPerSec != 240000 {
		t.Fatalf("%+v", r)
	}
	z := Result{MsgSize: 100}
	z.SetThroughput(10, 0)
	if z.MsgsPerSec != 0 {
		t.Fatal("rate with zero elapsed")
	}
	if CPUPerMsgUS(time.Second, 0) != 0 {
		t.Fatal("cpu per 0 msgs")
	}
}
