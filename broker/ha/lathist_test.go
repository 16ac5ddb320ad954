package ha

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every value lands in the bucket whose range holds it, buckets are in
// order and the sparse form sums to the sample count.
func TestAckLatencyBuckets(t *testing.T) {
	for ms := int64(0); ms < 1<<22; ms = ms*17/16 + 1 {
		i := latBucket(ms)
		if lo := latBucketLow(i); lo > ms || (i+1 < latBuckets && latBucketLow(i+1) <= ms) {
			t.Fatalf("%d ms in bucket %d [%d, %d)", ms, i, lo, latBucketLow(i+1))
		}
	}
	for i := 1; i < latBuckets; i++ {
		if latBucketLow(i) <= latBucketLow(i-1) {
			t.Fatalf("bucket %d starts at %d, bucket %d at %d", i, latBucketLow(i), i-1, latBucketLow(i-1))
		}
	}
	var h ackLatency
	for i := 0; i < 990; i++ {
		h.record(time.Duration(i%20) * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		h.record(3 * time.Second) // a stall: 1% of the samples
	}
	s := h.stats()
	if s.Samples != 1000 || s.P50 != 9 || s.P90 != 18 || s.Max != 3000 || s.P999 < 2800 || s.P999 > 3000 {
		t.Fatalf("stats %+v", s)
	}
	if s.P99 >= 64 {
		t.Fatalf("p99 %d: the 990th of 1000 samples is below 20 ms", s.P99)
	}
	var sum uint64
	for _, kv := range strings.Split(s.Hist, ",") {
		c, err := strconv.ParseUint(kv[strings.IndexByte(kv, ':')+1:], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += c
	}
	if sum != 1000 {
		t.Fatalf("histogram %q sums to %d", s.Hist, sum)
	}
	if (&ackLatency{}).stats().Hist != "-" {
		t.Fatal("empty histogram")
	}
}

// An ack covering several sends records one sample per send, and only
// those it covers.
func TestNoteAckRecordsLatency(t *testing.T) {
	r := &replica{} // no link: cur is nil, as from
	t0 := time.Now().Add(-time.Second)
	r.noteSent(nil, 100, t0)
	r.noteSent(nil, 200, t0)
	r.noteSent(nil, 300, t0)
	r.noteAck(nil, 200)
	if s := r.lagStats(); s.Samples != 2 || s.Max < 1000 {
		t.Fatalf("after an ack of 2 sends: %+v", s)
	}
	r.noteAck(nil, 250)
	if s := r.lagStats(); s.Samples != 2 {
		t.Fatalf("an ack inside a send recorded it: %+v", s)
	}
	r.noteAck(nil, 300)
	if s := r.lagStats(); s.Samples != 3 {
		t.Fatalf("after the last ack: %+v", s)
	}
}
