package auth

import (
	"net"
	"sync"
	"time"
)

// FailLimiter slows down failed authentication per client address: a token
// bucket per address (burst attempts, refilled at rate per second). Every
// checked attempt takes a token up front (so parallel connections from one
// address cannot all be checked at once) and a successful one gives it
// back. When the bucket is empty the attempt waits until a token would be
// there; when that is longer than maxDelay it is refused unchecked, which
// costs the broker nothing (no bcrypt run). The map is bounded: full
// buckets are forgotten first, and when every address is throttled the
// oldest are dropped.
type FailLimiter struct {
	rate     float64
	burst    float64
	maxDelay time.Duration
	max      int
	now      func() time.Time

	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewFailLimiter returns a limiter; zero values take the defaults (1/s, 5, 2s).
func NewFailLimiter(rate float64, burst int, maxDelay time.Duration) *FailLimiter {
	if rate <= 0 {
		rate = 1
	}
	if burst <= 0 {
		burst = 5
	}
	if maxDelay < 0 {
		maxDelay = 0
	}
	return &FailLimiter{rate: rate, burst: float64(burst), maxDelay: maxDelay, max: 16384, now: time.Now, m: map[string]*bucket{}}
}

// Host is the address part the limiter keys on (the IP without the port).
func Host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Admit reserves an attempt from host. It returns how long to wait before
// checking it, and false when the attempt is refused unchecked.
func (l *FailLimiter) Admit(host string) (time.Duration, bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[host]
	if b == nil {
		if len(l.m) >= l.max {
			l.evictLocked(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.m[host] = b
	}
	l.refillLocked(b, now)
	var wait time.Duration
	if b.tokens < 1 {
		wait = time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
		if wait > l.maxDelay {
			return 0, false
		}
	}
	b.tokens--
	return wait, true
}

// Succeeded gives back the token of a successful attempt.
func (l *FailLimiter) Succeeded(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[host]; b != nil {
		b.tokens = min(b.tokens+1, l.burst)
	}
}

func (l *FailLimiter) refillLocked(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.last = now
	}
}

func (l *FailLimiter) evictLocked(now time.Time) {
	for h, b := range l.m {
		l.refillLocked(b, now)
		if b.tokens >= l.burst {
			delete(l.m, h)
		}
	}
	for h := range l.m {
		if len(l.m) < l.max*3/4 {
			break
		}
		delete(l.m, h) // every address is throttled: forget some (random order)
	}
}

// Len is the number of addresses tracked.
func (l *FailLimiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
