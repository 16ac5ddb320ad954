package broker_test

import (
	"bufio"
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
	credits := make(chan struct{}, window)
	for i := 0; i < window; i++ {
		credits <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 64<<10), 1024)
		for i := 0; i < b.N; i++ {
			r, err := rr.Next()
			if err != nil || r.Code != 200 {
				done <- err
				return
			}
			credits <- struct{}{}
		}
		done <- nil
	}()
	w := bufio.NewWriterSize(nc, 64<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
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
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkPipelinedPutAsync(b *testing.B) { benchPipelinedPut(b, false, 1000) }
func BenchmarkPipelinedPutSync(b *testing.B)  { benchPipelinedPut(b, true, 1000) }
