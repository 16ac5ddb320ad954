package benchkit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAlternateOrderAndMedian(t *testing.T) {
	var order []string
	// Base runs at 1000/s; the spread side at 900/s except its third phase (a stall: 300/s).
	a, err := Alternate(5, func(spread bool, i int) (PhaseRun, error) {
		if spread {
			order = append(order, "S")
			n := int64(900)
			if i == 2 {
				n = 300
			}
			return PhaseRun{Msgs: n, Elapsed: time.Second, ServerCPU: 9 * time.Millisecond}, nil
		}
		order = append(order, "B")
		return PhaseRun{Msgs: 1000, Elapsed: time.Second}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "BSSBBSSBBS" {
		t.Fatalf("order %s, want BSSBBSSBBS (each pair adjacent, first side alternating)", got)
	}
	if len(a.Ratios) != 5 || a.Ratios[2] != 0.3 {
		t.Fatalf("ratios %v", a.Ratios)
	}
	if m := a.Median(); m != 0.9 {
		t.Fatalf("median %v, want 0.9 (the stalled pair must not move it)", m)
	}
	r := Result{System: "x", Workload: WorkloadTopics1000, MsgSize: 100}
	r.SetAlternation(a)
	if r.DegradationRatio != 0.9 || r.BaselineMsgsPerSec != 1000 || r.Msgs != 3900 || r.Seconds != 5 {
		t.Fatalf("result %+v", r)
	}
	if r.ServerCPUusPerMsg == 0 || !strings.Contains(r.Notes, "median of the pairs [0.900 0.900 0.300 0.900 0.900]") {
		t.Fatalf("result %+v", r)
	}
}

func TestAlternateStopsOnError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	_, err := Alternate(3, func(spread bool, i int) (PhaseRun, error) {
		calls++
		if spread {
			return PhaseRun{}, boom
		}
		return PhaseRun{Msgs: 1, Elapsed: time.Second}, nil
	})
	if !errors.Is(err, boom) || calls != 2 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	if _, err := Alternate(0, nil); err == nil {
		t.Fatal("0 pairs accepted")
	}
}

func TestPhaseLength(t *testing.T) {
	if d := PhaseLength(10*time.Second, 5); d != 2*time.Second {
		t.Fatal(d)
	}
	if d := PhaseLength(time.Second, 50); d != 100*time.Millisecond {
		t.Fatal(d)
	}
	if d := PhaseLength(time.Second, 0); d != time.Second {
		t.Fatal(d)
	}
}
