package broker_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// benchPipelinedPut measures puts over one connection with up to window
// requests in flight, as a MetaQ producer pipelines them.
func benchPipelinedPut(b *testing.B, sync bool, window int) {
	br := brokertest.RunBroker(b, brokertest.Options{Sync: sync, SegSize: 256 << 20})
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	body := make([]byte, 100)
	var frame []byte
	frame = protocol.AppendPut(frame, "test", 0, 0, protocol.ChecksumNone, "", 1, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	pipeline(b, nc, frame, b.N, window, 64<<10)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkPipelinedPutAsync(b *testing.B) { benchPipelinedPut(b, false, 1000) }
func BenchmarkPipelinedPutSync(b *testing.B)  { benchPipelinedPut(b, true, 1000) }

// pipeline writes frame n times over nc with at most window frames
// unanswered, as a MetaQ producer pipelines its puts; every frame must be
// answered by one result 200, any other reply fails b. The timer is reset
// just before the first write; callers set SetBytes/ReportAllocs before and
// report their rate after.
func pipeline(b *testing.B, nc net.Conn, frame []byte, n, window, bufSize int) {
	credits := make(chan struct{}, window)
	for range window {
		credits <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, bufSize), 1<<20)
		for i := 0; i < n; i++ {
			r, err := rr.Next()
			if err == nil && r.Code != 200 {
				err = fmt.Errorf("reply %d of %d: result %d %q", i, n, r.Code, r.Body)
			}
			if err != nil {
				done <- err
				return
			}
			credits <- struct{}{}
		}
		done <- nil
	}()
	w := bufio.NewWriterSize(nc, bufSize)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		select {
		case <-credits:
		default:
			w.Flush()
			<-credits
		}
		w.Write(frame)
	}
	w.Flush()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
