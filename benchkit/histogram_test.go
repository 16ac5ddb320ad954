package benchkit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketIndexRange(t *testing.T) {
	if got := bucketIndex(int64(HighestTrackable)); got != numBuckets-1 {
		t.Fatalf("last bucket = %d, want %d", got, numBuckets-1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(v int64) {
		i := bucketIndex(v)
		lo, w := bucketRange(i)
		if v < lo || v >= lo+w {
			t.Fatalf("v=%d bucket %d [%d,%d)", v, i, lo, lo+w)
		}
		if w > 1 && float64(w)/float64(lo) > Precision {
			t.Fatalf("bucket %d width %d too wide for %d", i, w, lo)
		}
	}
	for v := int64(0); v < 5000; v++ {
		check(v)
	}
	for range 100000 {
		check(rng.Int64N(int64(HighestTrackable) + 1))
		check(int64(1) << rng.IntN(36))
	}
	// buckets are contiguous
	prevEnd := int64(0)
	for i := range numBuckets {
		lo, w := bucketRange(i)
		if lo != prevEnd {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevEnd)
		}
		prevEnd = lo + w
	}
	if prevEnd != int64(HighestTrackable)+1 {
		t.Fatalf("buckets end at %d", prevEnd)
	}
}

// oracle returns the exact value at quantile q of sorted values, with the
// histogram's rank rule (ceil(q*n)-th smallest).
func oracle(sorted []int64, q float64) int64 {
	if q <= 0 {
		return sorted[0]
	}
	if q >= 1 {
		return sorted[len(sorted)-1]
	}
	r := int(math.Ceil(q * float64(len(sorted))))
	if r < 1 {
		r = 1
	}
	return sorted[r-1]
}

func TestHistogramAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	dists := map[string]func() int64{
		"uniform-us":   func() int64 { return 1000 + rng.Int64N(1000000) },
		"exponential":  func() int64 { return int64(rng.ExpFloat64() * 80000) },
		"lognormal":    func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5 + 11)) },
		"small-exact":  func() int64 { return rng.Int64N(300) },
		"wide-1us-60s": func() int64 { return int64(math.Exp(rng.Float64()*math.Log(6e7)) * 1000) },
		"bimodal": func() int64 {
			if rng.IntN(100) == 0 {
				return 5e6 + rng.Int64N(1e6)
			}
			return 50000 + rng.Int64N(10000)
		},
	}
	qs := []float64{0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1}
	for name, gen := range dists {
		for _, n := range []int{1, 2, 7, 1000, 100000} {
			h := NewHistogram()
			vals := make([]int64, n)
			var sum float64
			for i := range vals {
				vals[i] = gen()
				sum += float64(vals[i])
				h.RecordValue(vals[i])
			}
			slices.Sort(vals)
			if h.Count() != uint64(n) {
				t.Fatalf("%s: count %d", name, h.Count())
			}
			if int64(h.Min()) != vals[0] || int64(h.Max()) != vals[n-1] {
				t.Fatalf("%s: min/max %v/%v want %d/%d", name, h.Min(), h.Max(), vals[0], vals[n-1])
			}
			if d := math.Abs(float64(h.Mean()) - sum/float64(n)); d > 1 {
				t.Fatalf("%s: mean %v want %v", name, h.Mean(), sum/float64(n))
			}
			for _, q := range qs {
				want := oracle(vals, q)
				got := int64(h.ValueAtQuantile(q))
				if got < want || float64(got) > float64(want)*(1+Precision)+1 {
					t.Errorf("%s n=%d q=%v: got %d want %d (+%.2f%%)", name, n, q, got, want,
						100*float64(got-want)/float64(max(want, 1)))
				}
			}
		}
	}
}

func TestHistogramMergeAndReset(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all, a, b := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 50000 {
		v := time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	m := NewHistogram()
	m.Merge(a)
	m.Merge(nil)
	m.Merge(NewHistogram())
	m.Merge(b)
	if m.Count() != all.Count() || m.Min() != all.Min() || m.Max() != all.Max() {
		t.Fatalf("merge: count/min/max %d/%v/%v want %d/%v/%v", m.Count(), m.Min(), m.Max(), all.Count(), all.Min(), all.Max())
	}
	if d := m.Mean() - all.Mean(); d > 1 || d < -1 {
		t.Fatalf("merge mean %v want %v", m.Mean(), all.Mean())
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		if m.ValueAtQuantile(q) != all.ValueAtQuantile(q) {
			t.Fatalf("merge q=%v %v want %v", q, m.ValueAtQuantile(q), all.ValueAtQuantile(q))
		}
	}
	m.Reset()
	if m.Count() != 0 || m.ValueAtQuantile(0.5) != 0 || m.Mean() != 0 || m.Max() != 0 {
		t.Fatal("reset histogram not empty")
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram // zero value usable
	if h.ValueAtQuantile(0.99) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram should report 0")
	}
	h.Record(-5)
	if h.Min() != 0 || h.Max() != 0 {
		t.Fatalf("negative recorded as %v/%v", h.Min(), h.Max())
	}
	h.Record(10 * time.Minute) // beyond HighestTrackable
	if h.Max() != 10*time.Minute || h.ValueAtQuantile(1) != 10*time.Minute {
		t.Fatalf("max %v", h.Max())
	}
	if got := h.ValueAtQuantile(0.9); got < HighestTrackable/2 {
		t.Fatalf("overflow value counted low: %v", got)
	}
	if h.ValueAtQuantile(math.NaN()) != 0 {
		t.Fatal("NaN quantile should give min")
	}
}

func TestHistogramRecordNoAlloc(t *testing.T) {
	h := NewHistogram()
	v := time.Duration(1)
	if n := testing.AllocsPerRun(1000, func() { h.Record(v); v = v*3 + 17 }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := NewHistogram()
	v := time.Duration(12345)
	for i := 0; b.Loop(); i++ {
		h.Record(v + time.Duration(i&0xffff))
	}
}
