package broker_test

import (
	"bufio"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// benchGetWhere drains a 100,000-message partition (properties bench=i%10,
// 100-byte bodies) with one 1 MiB get in flight at a time, unfiltered or
// with an expression, and reports the process's CPU per message delivered
// (broker and this raw reader share the process; the reader only frames
// replies). It isolates the broker's get path of metaq bench consume
// --where (docs/filter.md). Run:
//
//	go test -run XXX -bench GetWhere -benchtime 5x ./broker
func benchGetWhere(b *testing.B, where string) {
	br := brokertest.RunBroker(b, brokertest.Options{SegSize: 256 << 20})
	const n = 100000
	body := make([]byte, 100)
	{
		c := br.Dial()
		var buf []byte
		for i := range n {
			data := append([]byte("bench="+strconv.Itoa(i%97%10)+"\n"), body...)
			buf = protocol.AppendPut(buf[:0], "test", 0, 2, protocol.ChecksumNone, "", int32(i), data)
			c.SendBytes(buf)
			if i%1000 == 999 {
				for range 1000 {
					if r := c.Reply(); r.Code != 200 {
						b.Fatalf("prefill: %+v", r)
					}
				}
			}
		}
		c.Close()
	}
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 1<<20), 0)
	var get []byte
	b.ReportAllocs()
	b.ResetTimer()
	c0 := procCPU()
	delivered := 0
	for range b.N {
		for off := int64(0); off < n; {
			get = protocol.AppendGetWhere(get[:0], "test", "g", 0, off, 1<<20, 1, 0, "*", where)
			if _, err := nc.Write(get); err != nil {
				b.Fatal(err)
			}
			r, err := rr.Next()
			if err != nil {
				b.Fatal(err)
			}
			switch {
			case r.Kind == protocol.ReplyValue:
				it := protocol.NewRecordIterator(r.Body)
				for it.Next() {
					off = it.Record().QueueOffset + 1
					delivered++
				}
			case r.Code == 301:
				if off, err = strconv.ParseInt(string(r.Body), 10, 64); err != nil {
					b.Fatal(err)
				}
			default:
				b.Fatalf("get at %d: %d %q", off, r.Code, r.Body)
			}
		}
	}
	b.ReportMetric(float64((procCPU()-c0).Nanoseconds())/float64(delivered), "cpu-ns/msg")
}

func procCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkGetWhereNone(b *testing.B)   { benchGetWhere(b, "") }
func BenchmarkGetWhereBench0(b *testing.B) { benchGetWhere(b, "bench = 0") }
