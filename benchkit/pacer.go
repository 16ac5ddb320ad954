package benchkit

import (
	"context"
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Pacer schedules sends at a fixed rate for latency measurements that are
// coordinated-omission aware: the n-th send is intended at start + n/rate,
// whatever happened to earlier sends, and latency is measured from that
// intended time. A sender that falls behind is not given a new schedule: it
// sends at once, and the time it was late counts in its latency.
//
// Because latency counts from the intended time, the pacer's own wake-up
// delay would count too. Go's timers can fire up to ~1 ms late in an idle
// process (the runtime's poller sleeps in whole milliseconds), so Wait
// sleeps with nanosleep(2) instead and spins for the last Spin before the
// intended time: a few µs of error instead of ~0.5 ms, for about
// Spin × rate of CPU (10% of a core at 1,000 msg/s).
type Pacer struct {
	// Spin is how long before the intended time Wait stops sleeping and
	// busy-waits (DefaultSpin; 0 = sleep only).
	Spin     time.Duration
	start    time.Time
	interval float64 // ns between sends
	n        int64
}

// DefaultSpin is the busy-wait a new Pacer uses.
const DefaultSpin = 100 * time.Microsecond

// maxNap bounds one nanosleep so that Wait notices a cancelled context.
const maxNap = 5 * time.Millisecond

// NewPacer returns a pacer for rate sends per second, starting now.
func NewPacer(rate float64) *Pacer {
	if !(rate > 0) {
		panic("benchkit: pacer rate must be > 0")
	}
	return &Pacer{Spin: DefaultSpin, start: time.Now(), interval: 1e9 / rate}
}

// Intended returns the intended time of send number n (0-based).
func (p *Pacer) Intended(n int64) time.Time {
	return p.start.Add(time.Duration(float64(n) * p.interval))
}

// Sent is the number of send times Wait has handed out.
func (p *Pacer) Sent() int64 { return p.n }

// Wait blocks until the intended time of the next send and returns it. When
// the sender is already late it returns at once, still with the intended
// (past) time. It returns ctx.Err() if ctx ends first.
func (p *Pacer) Wait(ctx context.Context) (time.Time, error) {
	t := p.Intended(p.n)
	for {
		if err := ctx.Err(); err != nil {
			return t, err
		}
		d := time.Until(t)
		if d <= 0 {
			break
		}
		if d > p.Spin {
			nap := min(d-p.Spin, maxNap)
			ts := unix.NsecToTimespec(int64(nap))
			_ = unix.Nanosleep(&ts, nil) // EINTR: loop and recompute
			continue
		}
		for time.Now().Before(t) {
		}
		break
	}
	p.n++
	return t, nil
}

// Behind is how late the sender is now relative to the next intended send
// (0 when on time).
func (p *Pacer) Behind() time.Duration {
	if d := time.Since(p.Intended(p.n)); d > 0 {
		return d
	}
	return 0
}

// StampSize is the number of payload bytes PutStamp uses.
const StampSize = 8

// PutStamp writes t (unix nanoseconds, big-endian) into b[:8]; b must hold
// at least StampSize bytes. Producers stamp the intended send time into the
// payload and consumers compute the end-to-end latency with SinceStamp.
func PutStamp(b []byte, t time.Time) { binary.BigEndian.PutUint64(b, uint64(t.UnixNano())) }

// Stamp reads a time written by PutStamp; ok is false when b is too short.
func Stamp(b []byte) (t time.Time, ok bool) {
	if len(b) < StampSize {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), true
}

// SinceStamp returns now - the stamp in b (0 when b is too short).
func SinceStamp(b []byte, now time.Time) time.Duration {
	if len(b) < StampSize {
		return 0
	}
	return time.Duration(now.UnixNano() - int64(binary.BigEndian.Uint64(b)))
}
