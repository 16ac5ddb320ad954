package benchkit

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Systems lists the known system labels in table column order; others follow
// in order of appearance.
var Systems = []string{"metaq", "jetstream", "jetstream-sync", "nsq", "nsq-disk", "redis", "redis-aof"}

type metricKind int

const (
	kindThroughput  metricKind = iota // msgs_per_sec, higher is better
	kindLatency                       // p50/p99, lower is better
	kindDegradation                   // degradation_ratio, higher is better
)

func kindOf(workload string) metricKind {
	switch workload {
	case WorkloadLatency, WorkloadE2E:
		return kindLatency
	case WorkloadTopics1000, WorkloadPartitions10000:
		return kindDegradation
	}
	return kindThroughput
}

// primary is the value used to pick the median of repeated runs.
func primary(r Result) float64 {
	switch kindOf(r.Workload) {
	case kindLatency:
		return r.P50us
	case kindDegradation:
		return r.DegradationRatio
	}
	return r.MsgsPerSec
}

// Pick returns the result for system×workload; when the same pair was
// measured several times it returns the run with the median primary metric
// (msgs/s, p50, or degradation ratio). Failed runs count only when no run
// succeeded.
func Pick(results []Result, system, workload string) (Result, bool) {
	var ok, failed []Result
	for _, r := range results {
		if r.System != system || r.Workload != workload {
			continue
		}
		if r.Error != "" {
			failed = append(failed, r)
		} else {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		if len(failed) > 0 {
			return failed[len(failed)-1], true
		}
		return Result{}, false
	}
	slices.SortStableFunc(ok, func(a, b Result) int {
		pa, pb := primary(a), primary(b)
		switch {
		case pa < pb:
			return -1
		case pa > pb:
			return 1
		}
		return 0
	})
	return ok[(len(ok)-1)/2], true
}

// WriteTable prints a Markdown table with one row per workload and one
// column per system: base (usually "metaq") first, then the peers. Each peer
// cell holds the peer's number and, when base was measured in the same
// results, the ratio base/peer:
//   - publish-async, publish-durable, consume-backlog: msgs/s; ratio > 1 = base faster;
//   - latency, e2e: p50/p99 (µs, or ms once p99 reaches 10 ms); ratios < 1 = base lower;
//   - topics-1000, partitions-10000: degradation ratio (many/1 topic); ratio > 1 = base degrades less;
//   - a last row "server CPU µs/msg (publish)": publish-async, or publish-durable for
//     configurations only measured durable, compared with base on the same workload;
//     ratio < 1 = base cheaper.
//
// Repeated runs of one system×workload are reduced with Pick.
func WriteTable(w io.Writer, results []Result, base string) error {
	systems := orderedSystems(results, base)
	workloads := orderedWorkloads(results)
	if len(systems) == 0 || len(workloads) == 0 {
		_, err := fmt.Fprintln(w, "(no results)")
		return err
	}
	var b strings.Builder
	b.WriteString("| workload |")
	for _, s := range systems {
		b.WriteString(" " + s + " |")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(systems)))
	b.WriteString("\n")
	for _, wl := range workloads {
		baseR, haveBase := Pick(results, base, wl)
		haveBase = haveBase && baseR.Error == ""
		b.WriteString("| " + wl + " |")
		for _, s := range systems {
			r, ok := Pick(results, s, wl)
			b.WriteString(" " + cell(r, ok, baseR, haveBase && s != base) + " |")
		}
		b.WriteString("\n")
	}
	// Server CPU per message while publishing: publish-async, or
	// publish-durable for configurations measured only durable; the ratio
	// compares with the base system on the same workload.
	if hasCPU(results) {
		b.WriteString("| server CPU µs/msg (publish) |")
		for _, s := range systems {
			c := "—"
			for _, wl := range []string{WorkloadPublishAsync, WorkloadPublishDurable} {
				r, ok := Pick(results, s, wl)
				if !ok || r.Error != "" || r.ServerCPUusPerMsg <= 0 {
					continue
				}
				c = fmtFloat(r.ServerCPUusPerMsg)
				if wl == WorkloadPublishDurable {
					c += " (durable)"
				}
				if br, ok := Pick(results, base, wl); ok && s != base && br.Error == "" && br.ServerCPUusPerMsg > 0 {
					c += " (" + fmtRatio(br.ServerCPUusPerMsg/r.ServerCPUusPerMsg) + ")"
				}
				break
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	// The stall probe of the latency rows (stall.go): p99/max of how late
	// a sleeping thread woke during the run shown above, per system.
	stalls := false
	for _, wl := range workloads {
		if kindOf(wl) != kindLatency || !hasStall(results, wl) {
			continue
		}
		stalls = true
		b.WriteString("| " + wl + ": machine stall p99/max |")
		for _, s := range systems {
			c := "—"
			if r, ok := Pick(results, s, wl); ok && r.Error == "" && r.StallMaxUs > 0 {
				c = fmtLatency(r.StallP99us, r.StallMaxUs)
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRatios in parentheses are " + base + " / peer, measured in the same run: for msgs/s and the\n" +
		"degradation ratio (many topics / 1 topic) above 1 means " + base + " is better; for latency (p50/p99)\n" +
		"and CPU per message below 1 means " + base + " is better. — = not measured.\n")
	if stalls {
		b.WriteString("A machine stall row is how late a thread that only sleeps (1.3 ms at a time) was woken\n" +
			"during the run shown above (benchkit.StallProbe): a p99 near it is the machine's, not the system's.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func hasStall(results []Result, workload string) bool {
	for _, r := range results {
		if r.Workload == workload && r.StallMaxUs > 0 {
			return true
		}
	}
	return false
}

func hasCPU(results []Result) bool {
	for _, r := range results {
		if (r.Workload == WorkloadPublishAsync || r.Workload == WorkloadPublishDurable) && r.ServerCPUusPerMsg > 0 {
			return true
		}
	}
	return false
}

func cell(r Result, ok bool, base Result, ratio bool) string {
	if !ok {
		return "—"
	}
	if r.Error != "" {
		return "failed"
	}
	switch kindOf(r.Workload) {
	case kindLatency:
		if r.P50us == 0 {
			return "—"
		}
		s := fmtLatency(r.P50us, r.P99us)
		if ratio && base.P50us > 0 && r.P99us > 0 {
			s += " (" + strings.TrimSuffix(fmtRatio(base.P50us/r.P50us), "×") + "/" + fmtRatio(base.P99us/r.P99us) + ")"
		}
		return s
	case kindDegradation:
		if r.DegradationRatio == 0 {
			return FormatRate(r.MsgsPerSec)
		}
		s := strconv.FormatFloat(r.DegradationRatio, 'f', 2, 64) + " of " + FormatRate(r.BaselineMsgsPerSec)
		if ratio && base.DegradationRatio > 0 {
			s += " (" + fmtRatio(base.DegradationRatio/r.DegradationRatio) + ")"
		}
		return s
	}
	s := FormatRate(r.MsgsPerSec)
	if ratio && base.MsgsPerSec > 0 && r.MsgsPerSec > 0 {
		s += " (" + fmtRatio(base.MsgsPerSec/r.MsgsPerSec) + ")"
	}
	return s
}

// fmtLatency prints p50/p99 in µs, or in ms when p99 reaches 10 ms.
func fmtLatency(p50, p99 float64) string {
	if p99 >= 10000 {
		return fmtFloat(p50/1000) + "/" + fmtFloat(p99/1000) + " ms"
	}
	return fmtFloat(p50) + "/" + fmtFloat(p99) + " µs"
}

func fmtRatio(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + "×"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64) + "×"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "×"
}

func fmtFloat(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func orderedSystems(results []Result, base string) []string {
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.System] = true
	}
	out := []string{base}
	for _, s := range Systems {
		if s != base && seen[s] {
			out = append(out, s)
		}
	}
	for _, r := range results {
		if !slices.Contains(out, r.System) {
			out = append(out, r.System)
		}
	}
	if !seen[base] && len(out) == 1 {
		return nil
	}
	return out
}

func orderedWorkloads(results []Result) []string {
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Workload] = true
	}
	var out []string
	for _, w := range Workloads {
		if seen[w] {
			out = append(out, w)
		}
	}
	for _, r := range results {
		if !slices.Contains(out, r.Workload) {
			out = append(out, r.Workload)
		}
	}
	return out
}
