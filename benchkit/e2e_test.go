package benchkit

import (
	"sync"
	"testing"
	"time"
)

func TestE2E(t *testing.T) {
	e := NewE2E()
	t0 := time.Unix(1000, 0)
	body := make([]byte, 64)
	// Before SetWarmupEnd nothing is recorded, but deliveries are counted.
	e.Deliver(StampedCopy(body, t0), t0.Add(time.Millisecond))
	e.SetWarmupEnd(t0.Add(time.Second))
	e.Deliver(StampedCopy(body, t0.Add(500*time.Millisecond)), t0.Add(2*time.Second)) // warm-up
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				e.Deliver(StampedCopy(body, t0.Add(time.Second)), t0.Add(time.Second+300*time.Microsecond))
			}
		}()
	}
	wg.Wait()
	e.Deliver([]byte{1, 2}, t0) // no stamp: ignored
	if got := e.Received(); got != 102 {
		t.Fatalf("received %d, want 102", got)
	}
	h := e.Histogram()
	if h.Count() != 100 {
		t.Fatalf("recorded %d, want 100 (warm-up excluded)", h.Count())
	}
	if p := h.ValueAtQuantile(0.5); p < 290*time.Microsecond || p > 310*time.Microsecond {
		t.Fatalf("p50 %v, want ~300µs", p)
	}
	if st, ok := Stamp(StampedCopy(body, t0)); !ok || !st.Equal(t0) || body[0] != 0 {
		t.Fatal("StampedCopy must stamp a copy, not the original")
	}
}
