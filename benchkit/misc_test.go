package benchkit

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// comm with spaces and parentheses; utime=250 stime=50 ticks
	line := "1234 (my (weird) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 1000 10 18446744073709551615\n"
	d, err := parseProcStat([]byte(line))
	if err != nil || d != 3*time.Second {
		t.Fatalf("got %v %v", d, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a b 0"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestProcCPUTimeSelf(t *testing.T) {
	m, err := StartCPUMeter(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the meter sees at least 30 ms (3 ticks).
	deadline := time.Now().Add(20 * time.Second)
	x := 0
	for {
		for range 1_000_000 {
			x++
		}
		d, err := m.Elapsed()
		if err != nil {
			t.Fatal(err)
		}
		if d >= 30*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu meter stuck at %v (x=%d)", d, x)
		}
	}
	if _, err := ProcCPUTime(1 << 30); err == nil {
		t.Fatal("no error for missing pid")
	}
}

func TestPacer(t *testing.T) {
	p := NewPacer(1000) // 1 ms apart
	ctx := context.Background()
	var last time.Time
	// The property is checked against the pacer's own schedule, never
	// against a clock read taken by the test: a "took at least 49 ms"
	// measured from a time.Now() after NewPacer is short by the few ns
	// between the two reads and failed ~1 run in 20 under -race.
	for i := range 50 {
		it, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !it.Equal(p.Intended(int64(i))) {
			t.Fatalf("send %d: intended %v, schedule says %v", i, it, p.Intended(int64(i)))
		}
		if time.Now().Before(it) {
			t.Fatalf("send %d returned before its intended time", i)
		}
		if i > 0 && it.Sub(last) != time.Millisecond {
			t.Fatalf("intended times %v apart", it.Sub(last))
		}
		last = it
	}
	if d := last.Sub(p.Intended(0)); d != 49*time.Millisecond {
		t.Fatalf("50 sends at 1000/s spread over %v of schedule", d)
	}
	if p.Sent() != 50 {
		t.Fatalf("sent %d", p.Sent())
	}
	// Falling behind: the schedule is kept, Wait returns at once with past times.
	time.Sleep(20 * time.Millisecond)
	if p.Behind() < 15*time.Millisecond {
		t.Fatalf("behind %v", p.Behind())
	}
	// (Checked by the intended time it returns, not by how fast it returned:
	// a timed upper bound failed on a loaded machine.)
	it, _ := p.Wait(ctx)
	if !it.Equal(last.Add(time.Millisecond)) || time.Since(it) < 15*time.Millisecond {
		t.Fatal("late sender was rescheduled instead of measured from the intended time")
	}
	// Cancellation.
	slow := NewPacer(1.0 / 3600) // the second send is an hour away
	slow.Wait(ctx)               // first send is immediate
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := slow.Wait(cctx); err == nil {
		t.Fatal("cancelled wait returned nil")
	}
	cancel()
	if _, err := NewPacer(1).Wait(cctx); err == nil {
		t.Fatal("wait on done ctx returned nil")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("rate 0 accepted")
		}
	}()
	NewPacer(0)
}

func TestStamp(t *testing.T) {
	b := make([]byte, 100)
	now := time.Now()
	PutStamp(b, now.Add(-250*time.Microsecond))
	if d := SinceStamp(b, now); d != 250*time.Microsecond {
		t.Fatalf("since %v", d)
	}
	if st, ok := Stamp(b); !ok || !st.Equal(now.Add(-250*time.Microsecond).Round(0)) {
		t.Fatalf("stamp %v", st)
	}
	if _, ok := Stamp(b[:3]); ok || SinceStamp(b[:3], now) != 0 {
		t.Fatal("short stamp accepted")
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestProgress(t *testing.T) {
	var n atomic.Int64
	var out syncBuf
	p := NewProgressWriter(&out, true, "publish-async jetstream", n.Load)
	p.Start(5 * time.Millisecond)
	for i := 0; i < 20 || (!strings.Contains(out.String(), " msgs ") && i < 2000); i++ {
		n.Add(1000)
		time.Sleep(2 * time.Millisecond)
	}
	p.Stop()
	p.Stop() // idempotent
	s := out.String()
	if !strings.HasPrefix(s, "\r") || !strings.Contains(s, "publish-async jetstream") ||
		!strings.Contains(s, " msgs ") || !strings.HasSuffix(s, "\r\x1b[K") || strings.Contains(s, "\n") {
		t.Fatalf("progress output %q", s)
	}

	var quiet syncBuf
	q := NewProgressWriter(&quiet, false, "x", n.Load)
	q.Start(time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	q.Stop()
	if quiet.String() != "" {
		t.Fatalf("disabled progress wrote %q", quiet.String())
	}
	NewProgressWriter(&quiet, true, "never started", n.Load).Stop()

	// A pipe is not a terminal: NewProgress must stay quiet.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) || NewProgress(w, "x", n.Load).Enabled() || IsTerminal(nil) {
		t.Fatal("pipe treated as terminal")
	}
}

func TestProgressLine(t *testing.T) {
	p := NewProgressWriter(nil, false, "L", nil)
	t0 := time.Now()
	p.start, p.lastT = t0, t0
	got := p.line(t0.Add(2*time.Second), 456000)
	if got != "L    2.0s  456,000 msgs  228k/s (now 228k/s)" {
		t.Fatalf("%q", got)
	}
	got = p.line(t0.Add(3*time.Second), 556000)
	if !strings.HasSuffix(got, "185k/s (now 100k/s)") {
		t.Fatalf("%q", got)
	}
}

// BenchmarkPacerWakeError reports the pacer's wake-up error (how long
// after the intended time Wait returns), median and p99 over the run: a few
// µs on an idle machine, against ~0.5 ms for Go timers. A benchmark, not a
// test: on a loaded machine a spinning goroutine is preempted and the error
// is the scheduler's (a test bound of 200 µs was a flake in waiting).
func BenchmarkPacerWakeError(b *testing.B) {
	p := NewPacer(2000)
	var late []time.Duration
	for b.Loop() {
		it, _ := p.Wait(context.Background())
		late = append(late, time.Since(it))
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Nanoseconds()), "ns-late-p50")
	b.ReportMetric(float64(late[len(late)*99/100].Nanoseconds()), "ns-late-p99")
}
