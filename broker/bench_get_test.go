package broker_test

import (
	"bufio"
	"net"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// benchGet measures gets over one connection with up to window requests in
// flight, as a consumer with prefetch does: each get reads one 100-byte
// record of a pre-filled partition. withPuts interleaves a put before every
// get on the same connection (a producer and a consumer sharing it, as
// MetaQ's Java client does), so the get has to wait for the put before it
// (see docs/protocol.md "Ordering on a connection").
func benchGet(b *testing.B, sync, withPuts bool, window int) {
	br := brokertest.RunBroker(b, brokertest.Options{Sync: sync, SegSize: 256 << 20})
	body := make([]byte, 100)
	const prefill = 4096
	{
		c := br.Dial()
		var buf []byte
		for i := 0; i < prefill; i++ {
			buf = protocol.AppendPut(buf, "test", 0, 0, protocol.ChecksumNone, "", int32(i), body)
		}
		c.SendBytes(buf)
		for i := 0; i < prefill; i++ {
			if r := c.Reply(); r.Code != 200 {
				b.Fatalf("prefill: %+v", r)
			}
		}
		c.Close()
	}
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	gets := make([][]byte, prefill)
	for i := range gets {
		gets[i] = protocol.AppendGet(nil, "test", "g", 0, int64(i), 200, 1, 0, "")
	}
	put := protocol.AppendPut(nil, "test", 1, 0, protocol.ChecksumNone, "", 2, body)
	perOp := 1
	if withPuts {
		perOp = 2
	}
	credits := make(chan struct{}, window)
	for i := 0; i < window; i++ {
		credits <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 64<<10), 1<<20)
		for i := 0; i < b.N*perOp; i++ {
			r, err := rr.Next()
			if err != nil || (r.Kind == protocol.ReplyResult && r.Code != 200) {
				if err == nil {
					err = &protocol.ReplyFormatError{}
				}
				done <- err
				return
			}
			if r.Opaque == 1 {
				credits <- struct{}{}
			}
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
		if withPuts {
			w.Write(put)
		}
		w.Write(gets[i%prefill])
	}
	w.Flush()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
}

func BenchmarkPipelinedGetAsync(b *testing.B)    { benchGet(b, false, false, 100) }
func BenchmarkPipelinedGetSync(b *testing.B)     { benchGet(b, true, false, 100) }
func BenchmarkPipelinedPutGetAsync(b *testing.B) { benchGet(b, false, true, 100) }
func BenchmarkPipelinedPutGetSync(b *testing.B)  { benchGet(b, true, true, 100) }
