package benchkit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// E2E collects publish→delivery latencies of messages stamped with PutStamp
// (the intended send time, so the latency is coordinated-omission aware).
// Deliver may be called from many goroutines. Messages stamped before the
// warm-up end are counted but not recorded; until SetWarmupEnd is called
// nothing is recorded.
type E2E struct {
	received atomic.Int64
	warmEnd  atomic.Int64 // unix ns
	mu       sync.Mutex
	h        *Histogram
}

// NewE2E returns an empty collector.
func NewE2E() *E2E {
	e := &E2E{h: NewHistogram()}
	e.warmEnd.Store(math.MaxInt64)
	return e
}

// SetWarmupEnd records only messages stamped at or after t.
func (e *E2E) SetWarmupEnd(t time.Time) { e.warmEnd.Store(t.UnixNano()) }

// Deliver accounts for one delivered message body received at now; bodies
// without a stamp are ignored.
func (e *E2E) Deliver(body []byte, now time.Time) {
	st, ok := Stamp(body)
	if !ok {
		return
	}
	e.received.Add(1)
	if st.UnixNano() < e.warmEnd.Load() {
		return
	}
	e.mu.Lock()
	e.h.Record(now.Sub(st))
	e.mu.Unlock()
}

// Received is the number of stamped messages delivered so far.
func (e *E2E) Received() int64 { return e.received.Load() }

// Histogram returns the recorded latencies; call it once deliveries stopped.
func (e *E2E) Histogram() *Histogram {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h
}

// StampedCopy returns a copy of body with t stamped into its first StampSize
// bytes (PutStamp).
func StampedCopy(body []byte, t time.Time) []byte {
	b := make([]byte, len(body))
	copy(b, body)
	PutStamp(b, t)
	return b
}
