package benchkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// Workload names shared by `metaq bench` and bench/cmd/peerbench.
const (
	WorkloadPublishAsync    = "publish-async"    // 1 connection, window 1,000 in flight, async flush
	WorkloadPublishDurable  = "publish-durable"  // same, durable at ack (sync flush / fsync always)
	WorkloadLatency         = "latency"          // one request at a time: p50/p99/p999
	WorkloadConsumeBacklog  = "consume-backlog"  // pre-fill then drain at full speed
	WorkloadE2E             = "e2e"              // fixed rate, publish→delivery latency
	WorkloadTopics1000      = "topics-1000"      // async publish over 1,000 topics vs 1 topic
	WorkloadPartitions10000 = "partitions-10000" // async publish over 10,000 partitions vs 1 (metaq only)
	// Batched publish: metaq mput frames (Producer.SendBatch), NSQ MPUB, Redis XADD pipelines;
	// the -durable variant on the durable configurations (sync flush, fsync always).
	WorkloadPublishBatch        = "publish-batch"
	WorkloadPublishBatchDurable = "publish-batch-durable"
	// Accumulation (metaq only, run alone): publish while a group drains a cold backlog.
	WorkloadAccumulation = "accumulation"
)

// Workloads lists the workload names in report order.
var Workloads = []string{
	WorkloadPublishAsync, WorkloadPublishDurable, WorkloadLatency, WorkloadConsumeBacklog,
	WorkloadE2E, WorkloadTopics1000, WorkloadPartitions10000,
	WorkloadPublishBatch, WorkloadPublishBatchDurable,
}

// Result is one measurement: one system running one workload. It is printed
// as one JSON object per line. Latency fields are omitted when the workload
// did not measure latency (a zero value means "not measured"), and so are
// the other optional fields when zero.
type Result struct {
	System   string  `json:"system"`   // "metaq", "jetstream", "jetstream-sync", "nsq", "nsq-disk", "redis", "redis-aof"
	Workload string  `json:"workload"` // one of Workloads
	MsgSize  int     `json:"msg_size"` // payload bytes per message
	Msgs     int64   `json:"msgs"`     // messages completed in the measured interval
	Seconds  float64 `json:"seconds"`  // length of the measured interval

	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"` // payload bytes / 1e6 per second

	P50us  float64 `json:"p50_us,omitempty"`
	P99us  float64 `json:"p99_us,omitempty"`
	P999us float64 `json:"p999_us,omitempty"`
	MaxUs  float64 `json:"max_us,omitempty"`

	// ServerCPUusPerMsg is the broker process's user+system CPU time during
	// the measured interval divided by Msgs, in µs.
	ServerCPUusPerMsg float64 `json:"server_cpu_us_per_msg,omitempty"`

	// Topics and Partitions describe the spread of the workload when it
	// is not a single topic/partition (topics-1000, partitions-10000).
	Topics     int `json:"topics,omitempty"`
	Partitions int `json:"partitions,omitempty"`
	// BaselineMsgsPerSec is the same workload on 1 topic (1 partition)
	// measured in the same run, and DegradationRatio is
	// MsgsPerSec / BaselineMsgsPerSec (1 = no loss, 0.27 = lost 73%).
	BaselineMsgsPerSec float64 `json:"baseline_msgs_per_sec,omitempty"`
	DegradationRatio   float64 `json:"degradation_ratio,omitempty"`

	// StallP99us and StallMaxUs are a StallProbe's overruns during the run
	// (latency and e2e): how late the machine woke a thread that only
	// slept, in the same minutes as this system's run (stall.go).
	StallP99us float64 `json:"stall_p99_us,omitempty"`
	StallMaxUs float64 `json:"stall_max_us,omitempty"`

	Notes string `json:"notes,omitempty"`
	Error string `json:"error,omitempty"` // set when the run failed; other numbers are then meaningless
}

// SetThroughput fills Msgs, Seconds, MsgsPerSec and MBPerSec (MsgSize must be set).
func (r *Result) SetThroughput(msgs int64, elapsed time.Duration) {
	r.Msgs = msgs
	r.Seconds = round(elapsed.Seconds(), 3)
	if elapsed <= 0 {
		r.MsgsPerSec, r.MBPerSec = 0, 0
		return
	}
	rate := float64(msgs) / elapsed.Seconds()
	r.MsgsPerSec = round(rate, 1)
	r.MBPerSec = round(rate*float64(r.MsgSize)/1e6, 2)
}

// SetLatency fills the latency fields from h (left untouched when h is empty).
func (r *Result) SetLatency(h *Histogram) {
	if h == nil || h.Count() == 0 {
		return
	}
	r.P50us = us(h.ValueAtQuantile(0.50))
	r.P99us = us(h.ValueAtQuantile(0.99))
	r.P999us = us(h.ValueAtQuantile(0.999))
	r.MaxUs = us(h.Max())
}

// SetServerCPU fills ServerCPUusPerMsg from the CPU time the server used for msgs messages.
func (r *Result) SetServerCPU(cpu time.Duration, msgs int64) {
	r.ServerCPUusPerMsg = CPUPerMsgUS(cpu, msgs)
}

// SetBaseline fills BaselineMsgsPerSec and DegradationRatio from the 1-topic rate.
func (r *Result) SetBaseline(baselineMsgsPerSec float64) {
	r.BaselineMsgsPerSec = round(baselineMsgsPerSec, 1)
	if baselineMsgsPerSec > 0 {
		r.DegradationRatio = round(r.MsgsPerSec/baselineMsgsPerSec, 3)
	}
}

// Validate reports a Result that lacks its identity.
func (r *Result) Validate() error {
	if r.System == "" || r.Workload == "" {
		return fmt.Errorf("benchkit: result without system or workload: %+v", *r)
	}
	return nil
}

// WriteJSON writes r as one JSON line.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadResults reads JSON lines as written by WriteJSON. Blank lines and lines
// that do not start with '{' (log output mixed into a file) are skipped; a
// line that starts with '{' but is not a valid Result is an error.
func ReadResults(rd io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] != '{' {
			continue
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return out, fmt.Errorf("benchkit: line %d: %w", line, err)
		}
		if err := r.Validate(); err != nil {
			return out, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

func us(d time.Duration) float64 { return round(float64(d)/1e3, 1) }

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}
