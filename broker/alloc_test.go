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
	}{
		{"put async", BenchmarkPipelinedPutAsync},
		{"put sync", BenchmarkPipelinedPutSync},
		{"get async", BenchmarkPipelinedGetAsync},
		{"put+get sync", BenchmarkPipelinedPutGetSync},
		{"mput async", BenchmarkPipelinedBatchPutAsync},
		{"mput sync", BenchmarkPipelinedBatchPutSync},
		{"mput runs async", BenchmarkPipelinedBatchPutRunsAsync},
		{"mput runs sync", BenchmarkPipelinedBatchPutRunsSync},
		{"put async, authenticated with an ACL", BenchmarkPipelinedPutAuth}, // security_bench_test.go
	} {
		r := testing.Benchmark(bm.f)
		if r.N == 0 {
			t.Fatalf("%s: benchmark failed", bm.name)
		}
		if a := r.AllocsPerOp(); a != 0 {
			t.Errorf("%s: %d allocations per request (%d B/op), want 0", bm.name, a, r.AllocedBytesPerOp())
		}
	}
}
