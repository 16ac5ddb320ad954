//go:build !race

package broker_test

import "testing"

// The put and get paths do not allocate per request (nats-server style):
// the pipelined benchmarks run here as a test. Background work (the
// dispatcher, timers) is amortised over the hundreds of thousands of
// requests, so anything that allocates per request shows as >= 1. Not
// under -race: the race detector makes sync.Pool drop items on purpose.
func TestHotPathsDoNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs benchmarks")
	}
	for _, bm := range []struct {
		name string
		f    func(*testing.B)
		big  bool // frames of 1,000 messages: check the bytes too
	}{
		{"put async", BenchmarkPipelinedPutAsync, false},
		{"put sync", BenchmarkPipelinedPutSync, false},
		{"get async", BenchmarkPipelinedGetAsync, false},
		{"put+get sync", BenchmarkPipelinedPutGetSync, false},
		{"mput async", BenchmarkPipelinedBatchPutAsync, false},
		{"mput sync", BenchmarkPipelinedBatchPutSync, false},
		{"mput runs async", BenchmarkPipelinedBatchPutRunsAsync, true},
		{"mput runs sync", BenchmarkPipelinedBatchPutRunsSync, true},
		{"put async, authenticated with an ACL", BenchmarkPipelinedPutAuth, false}, // security_bench_test.go
	} {
		r := testing.Benchmark(bm.f)
		if r.N == 0 {
			t.Fatalf("%s: benchmark failed", bm.name)
		}
		if a := r.AllocsPerOp(); a != 0 {
			t.Errorf("%s: %d allocations per request (%d B/op), want 0", bm.name, a, r.AllocedBytesPerOp())
		}
		// An mput of 1,000 messages allocates less than one per message,
		// so it would pass above even allocating a buffer per frame: count
		// its bytes (a ~110 KB data buffer per frame split across reads
		// was ~70 B per message; protocol.Parser.RetainData).
		if bm.big && r.AllocedBytesPerOp() > 16 {
			t.Errorf("%s: %d B allocated per message, want at most 16", bm.name, r.AllocedBytesPerOp())
		}
	}
}
