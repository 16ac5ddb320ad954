// Package benchkit holds the pieces shared by `metaq bench` and the peer
// comparison under bench/: a log-linear latency histogram, the Result JSON
// schema, a progress line and comparison table printer, a fixed-rate pacer
// and a reader for a process's CPU time.
//
// Only the standard library and golang.org/x/sys are used.
package benchkit

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout (HDR-style, log-linear). Values are nanoseconds.
// Values below 2*subHalf are counted exactly (one bucket per nanosecond);
// above that every power of two is split into subHalf linear buckets, so a
// bucket's width is at most 1/subHalf (0.78%) of its lower bound.
const (
	subBits  = 7
	subHalf  = 1 << subBits // 128 linear buckets per power of two
	subCount = 2 * subHalf  // values < 256 ns are exact

	// HighestTrackable is the largest value the histogram resolves
	// (2^36-1 ns, about 68.7 s); larger values are counted in the last
	// bucket (Max still reports the true largest value).
	HighestTrackable = time.Duration(1<<36 - 1)

	// Precision is the worst-case relative error of ValueAtQuantile.
	Precision = 1.0 / subHalf
)

// numBuckets = bucketIndex(HighestTrackable) + 1.
const numBuckets = subCount + (36-subBits-1)*subHalf

// bucketIndex maps a non-negative value to its bucket.
func bucketIndex(v int64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // >= 1
	return subCount + (shift-1)*subHalf + int(v>>uint(shift)) - subHalf
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < subCount {
		return int64(i), 1
	}
	j := i - subCount
	shift := uint(j/subHalf + 1)
	m := int64(j%subHalf + subHalf)
	return m << shift, 1 << shift
}

// Histogram is a fixed-size latency histogram covering 1 ns..68 s with
// better than 1% precision (30 KiB). The zero value is ready to use.
// It is not safe for concurrent use: give each goroutine its own and Merge
// them at the end.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64 // ns
	min    int64
	max    int64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return new(Histogram) }

// Record adds one latency. Negative durations count as 0. It never allocates.
func (h *Histogram) Record(d time.Duration) { h.RecordValue(int64(d)) }

// RecordValue adds one value in nanoseconds.
func (h *Histogram) RecordValue(ns int64) {
	if ns < 0 {
		ns = 0
	}
	if h.n == 0 || ns < h.min {
		h.min = ns
	}
	if ns > h.max {
		h.max = ns
	}
	h.n++
	h.sum += float64(ns)
	i := numBuckets - 1
	if ns <= int64(HighestTrackable) {
		i = bucketIndex(ns)
	}
	h.counts[i]++
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Mean is the exact arithmetic mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Max is the exact largest recorded value (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the exact smallest recorded value (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// ValueAtQuantile returns the value below or at which a fraction q (0..1)
// of the recorded values lie: the highest value equivalent to the bucket
// holding the ceil(q*Count())-th smallest value, clamped to [Min, Max]. It
// is never below the exact answer and at most Precision above it.
// q <= 0 gives Min, q >= 1 gives Max; an empty histogram gives 0.
func (h *Histogram) ValueAtQuantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 || math.IsNaN(q) {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + w - 1
			if v > h.max {
				v = h.max
			}
			if v < h.min {
				v = h.min
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
