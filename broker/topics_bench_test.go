package broker_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// benchPipelinedPutTopics is benchPipelinedPut round-robin over topics
// topics of one partition each (the broker's share of the topics-1000 row,
// docs/scaling.md), against the same on one topic:
//
//	go test -run '^$' -bench 'PipelinedPutTopics' -benchtime 1000000x -count 3 ./broker
func benchPipelinedPutTopics(b *testing.B, topics int) {
	tm := map[string]int{}
	for i := range topics {
		tm["bench-"+strconv.Itoa(i)] = 1
	}
	br := brokertest.RunBroker(b, brokertest.Options{SegSize: 256 << 20, Topics: tm})
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	body := make([]byte, 100)
	// One put per topic, written in rotation, putsPerWrite at a time with
	// 1,000 puts in flight as in BenchmarkPipelinedPutAsync.
	const putsPerWrite = 10
	chunks := make([][]byte, max(1, topics/putsPerWrite))
	for i := range len(chunks) * putsPerWrite {
		c := &chunks[i/putsPerWrite]
		*c = protocol.AppendPut(*c, "bench-"+strconv.Itoa(i%topics), 0, 0, protocol.ChecksumNone, "", 1, body)
	}
	pipelineFrames(b, nc, chunks, putsPerWrite, len(chunks), len(chunks)) // prime: every topic's partition and index exist
	// A get of the last topic's first message waits until the broker has
	// indexed everything before it (read-your-writes).
	if _, err := nc.Write(protocol.AppendGet(nil, "bench-"+strconv.Itoa(topics-1), "g", 0, 0, 1<<10, 1, 0, "")); err != nil {
		b.Fatal(err)
	}
	if r, err := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20).Next(); err != nil || r.Kind != protocol.ReplyValue {
		b.Fatalf("get after priming: %+v %v", r, err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := max(1, b.N/putsPerWrite)
	cpu0 := processCPU()
	pipelineFrames(b, nc, chunks, putsPerWrite, n, 1000/putsPerWrite)
	b.ReportMetric(float64(n*putsPerWrite)/b.Elapsed().Seconds(), "msgs/s")
	// CPU per message of the whole process (broker and this client): what
	// bounds the rate on a shared 2-core machine, and steadier under load
	// than the rate.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n*putsPerWrite), "cpu-ns/msg")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pipelineFrames writes n chunks of k requests each (chunks in rotation)
// over nc with at most window chunks unanswered; every request must be
// answered 200. The timer is reset just before the first write.
func pipelineFrames(b *testing.B, nc net.Conn, chunks [][]byte, k, n, window int) {
	credits := make(chan struct{}, window)
	for range window {
		credits <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 64<<10), 1<<20)
		for i := 0; i < n*k; i++ {
			r, err := rr.Next()
			if err == nil && r.Code != 200 {
				err = fmt.Errorf("reply %d: result %d %q", i, r.Code, r.Body)
			}
			if err != nil {
				done <- err
				return
			}
			if i%k == k-1 {
				credits <- struct{}{}
			}
		}
		done <- nil
	}()
	b.ResetTimer()
	w := bufio.NewWriterSize(nc, 64<<10)
	for i := range n {
		select {
		case <-credits:
		default:
			w.Flush()
			<-credits
		}
		if _, err := w.Write(chunks[i%len(chunks)]); err != nil {
			b.Fatal(err)
		}
	}
	w.Flush()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPipelinedPutTopics1(b *testing.B)    { benchPipelinedPutTopics(b, 1) }
func BenchmarkPipelinedPutTopics1000(b *testing.B) { benchPipelinedPutTopics(b, 1000) }
