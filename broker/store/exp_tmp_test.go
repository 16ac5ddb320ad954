package store

import (
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"
)

// TEMPORARY: steady-state profile of round-robin appends (removed before hand-off).
func TestExpRoundRobinProfile(t *testing.T) {
	out := os.Getenv("EXP_PROF")
	if out == "" {
		t.Skip()
	}
	parts, _ := strconv.Atoi(os.Getenv("EXP_PARTS"))
	if parts == 0 {
		parts = 10000
	}
	cfg := benchConfig(&testing.B{})
	cfg.Dir = t.TempDir()
	cfg.UnflushThreshold = benchThreshold()
	cfg.UnflushInterval = time.Second
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	m := &Message{Topic: "bench", Data: make([]byte, 100)}
	for p := 0; p < parts; p++ {
		m.Partition = int32(p)
		s.AppendAsync(m)
	}
	waitDispatched(s)
	s.Flush()
	f, _ := os.Create(out)
	pprof.StartCPUProfile(f)
	t0 := time.Now()
	st0 := s.Stats()
	n := 0
	for time.Since(t0) < 5*time.Second {
		for j := 0; j < 1000; j++ {
			m.Partition = int32(n % parts)
			if _, _, err := s.AppendAsync(m); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	d := time.Since(t0)
	waitDispatched(s)
	e2e := time.Since(t0)
	pprof.StopCPUProfile()
	f.Close()
	st := s.Stats()
	t.Logf("parts %d: %.0f msgs/s, e2e %.0f, units/pwrite %.1f", parts, float64(n)/d.Seconds(), float64(n)/e2e.Seconds(),
		float64(st.DispatchedRecords-st0.DispatchedRecords)/float64(st.IndexWrites-st0.IndexWrites))
}
