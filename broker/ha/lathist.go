package ha

import (
	"math/bits"
	"strconv"
	"time"
)

// ackLatency is the distribution of a slave's replication latency as the
// master sees it (docs/replication.md, "The slave's lag"): one sample per
// send of the stream, the time from the earliest moment the send's oldest
// byte can have been written here (the mark the lag figure uses,
// replica.noteSent) to the arrival of the slave's ack that covers its last
// byte, i.e. until every byte of it is durable there. It is an upper bound
// of each byte's write → durable-on-the-slave time. Samples are taken at
// every ack, not at a polling cadence, so a run gives thousands of them and
// a stall counts once per send it held up, however long it was.
//
// Buckets are milliseconds: exact below 64 ms, then 16 per power of two
// (≤ 6.25% wide) up to about 2^31 ms. The zero value is ready; it is
// guarded by the replica's mu.
type ackLatency struct {
	counts [latBuckets]uint64
	n      uint64
	max    int64 // ms
}

const (
	latExact   = 64 // ms values below this have their own bucket
	latSubBits = 4  // 16 buckets per power of two above
	latBuckets = latExact + (31-6)*(1<<latSubBits)
)

func latBucket(ms int64) int {
	if ms < latExact {
		return int(max(ms, 0))
	}
	shift := bits.Len64(uint64(ms)) - latSubBits - 1 // ≥ 2 for ms ≥ 64
	i := latExact + (shift-2)*(1<<latSubBits) + int(ms>>uint(shift)) - (1 << latSubBits)
	return min(i, latBuckets-1)
}

// latBucketLow is the smallest value of bucket i (ms).
func latBucketLow(i int) int64 {
	if i < latExact {
		return int64(i)
	}
	j := i - latExact
	shift := uint(j>>latSubBits + 2)
	return int64(j&(1<<latSubBits-1)+1<<latSubBits) << shift
}

func (h *ackLatency) record(d time.Duration) {
	ms := d.Milliseconds()
	h.counts[latBucket(ms)]++
	h.n++
	h.max = max(h.max, ms)
}

// quantile is the lower bound of the bucket holding the q-th sample (ms).
func (h *ackLatency) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(latBucketLow(i), h.max)
		}
	}
	return h.max
}

// appendSparse appends the non-empty buckets as "low:count" pairs joined
// by commas ("-" when empty): the form `stats` prints, so that a benchmark
// can merge the histograms of several runs.
func (h *ackLatency) appendSparse(b []byte) []byte {
	start := len(b)
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, latBucketLow(i), 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, c, 10)
	}
	if len(b) == start {
		b = append(b, '-')
	}
	return b
}

// LagStats is a summary of a replica's ackLatency.
type LagStats struct {
	Samples             uint64
	P50, P90, P99, P999 int64  // ms (a bucket's lower bound)
	Max                 int64  // ms
	Hist                string // "low:count,…" ("-": no sample)
}

func (h *ackLatency) stats() LagStats {
	return LagStats{Samples: h.n, P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99),
		P999: h.quantile(0.999), Max: h.max, Hist: string(h.appendSparse(nil))}
}
