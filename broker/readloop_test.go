package broker_test

import (
	"bufio"
	"net"
	"syscall"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// BenchmarkPutRoundTrip measures one put at a time over one connection: write
// the put, read its reply, on one goroutine, as a synchronous producer does.
// It reports the process's CPU time per put (user+system) besides ns/op.
func BenchmarkPutRoundTrip(b *testing.B) {
	br := brokertest.RunBroker(b, brokertest.Options{SegSize: 256 << 20})
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	body := make([]byte, 100)
	frame := protocol.AppendPut(nil, "test", 0, 0, protocol.ChecksumNone, "", 1, body)
	rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 4<<10), 1<<20)
	b.ReportAllocs()
	var r0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := nc.Write(frame); err != nil {
			b.Fatal(err)
		}
		r, err := rr.Next()
		if err != nil || r.Code != 200 {
			b.Fatalf("put %d: %v %+v", i, err, r)
		}
	}
	b.StopTimer()
	var r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := syscall.TimevalToNsec(r1.Utime) - syscall.TimevalToNsec(r0.Utime) + syscall.TimevalToNsec(r1.Stime) - syscall.TimevalToNsec(r0.Stime)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// The reader answers every request in order, whether it arrives alone after
// the socket went empty, byte by byte over many reads, or pipelined in one
// write that takes several full reads (the read buffer grows meanwhile).
func TestReadLoopSplitsAndBursts(t *testing.T) {
	br := brokertest.RunBroker(t, brokertest.Options{})
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
	body := make([]byte, 100)
	put := func(op int32) []byte {
		return protocol.AppendPut(nil, "test", 0, 0, protocol.ChecksumNone, "", op, body)
	}
	want := func(op int32) {
		t.Helper()
		r, err := rr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 200 || r.Opaque != op {
			t.Fatalf("reply %+v, want result 200 for opaque %d", r, op)
		}
	}
	op := int32(1)
	for range 20 { // one at a time: the reader waits on an empty socket each time
		if _, err := nc.Write(put(op)); err != nil {
			t.Fatal(err)
		}
		want(op)
		op++
	}
	for _, c := range put(op) { // one put over many writes (and reads)
		if _, err := nc.Write([]byte{c}); err != nil {
			t.Fatal(err)
		}
	}
	want(op)
	op++
	var many []byte
	first := op
	for range 500 { // ~60 KB in one write: full reads of a growing buffer
		many = append(many, put(op)...)
		op++
	}
	if _, err := nc.Write(many); err != nil {
		t.Fatal(err)
	}
	for o := first; o < op; o++ {
		want(o)
	}
	if _, err := nc.Write(put(op)); err != nil { // alone again after the burst
		t.Fatal(err)
	}
	want(op)
}
