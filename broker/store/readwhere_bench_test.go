package store

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// The filtered read's broker-side cost (docs/protocol.md, "Expression
// filters", Costs). The backlog is metaq bench consume --where's: four
// partitions written round-robin (so a partition's records are interleaved
// in the commit log as on a real broker), 100-byte bodies, properties
// bench=i%10. Each benchmark reads partition 0 from start to end in 1 MiB
// gets; ns/unit is the time per index unit scanned, cpu-ns/unit and
// cpu-ns/kept the process's CPU time per unit scanned and per record
// served (what a loaded machine does not distort much). Run:
//
//	go test -run XXX -bench ReadWhere -benchtime 20x ./broker/store
func benchReadWhere(b *testing.B, where string) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = 100000
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	const n = 400000 // 100k per partition
	for i := range n {
		m := &Message{Topic: "bench", Partition: int32(i % 4), Data: make([]byte, 100),
			Properties: []byte("bench=" + strconv.Itoa((i/4)%97%10))}
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	waitDispatched(s)
	var f *protocol.TagFilter
	if where != "" {
		e, err := filter.Compile(where)
		if err != nil {
			b.Fatal(err)
		}
		f = (*protocol.TagFilter)(nil).WithRecordMatcher(e)
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0, c0 := time.Now(), cpuTime()
	units, kept := 0, 0
	for range b.N {
		for off := int64(0); off < n/4; {
			r, err := s.Read("bench", 0, off, 1<<20, f)
			if err != nil {
				b.Fatal(err)
			}
			if r.Status != ReadFound && r.Status != ReadFiltered {
				b.Fatal("status ", r.Status)
			}
			kept += r.Count
			units += int(r.NextOffset - off)
			off = r.NextOffset
			r.Release()
		}
	}
	el, cpu := time.Since(t0), cpuTime()-c0
	b.ReportMetric(float64(el.Nanoseconds())/float64(units), "ns/unit")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(units), "cpu-ns/unit")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(kept), "cpu-ns/kept")
}

// cpuTime is the process's CPU time (user + system): on a loaded machine it
// barely moves while wall-clock time does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkReadWhereNone(b *testing.B)   { benchReadWhere(b, "") }
func BenchmarkReadWhereBench0(b *testing.B) { benchReadWhere(b, "bench = 0") }
