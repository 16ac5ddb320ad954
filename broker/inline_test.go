package broker_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// Replies written by the reader itself (inline.go), by woken parked gets and
// by the writer goroutine share one socket: on a connection that mixes
// pipelined puts with long polls that wake while the puts stream in, every
// request is answered exactly once, put replies keep request order, and each
// parked get carries the record that woke it.
func TestInlineRepliesMixedWithParkedGets(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			nc, err := net.Dial("tcp", b.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			const gets = 50    // opaques 1..gets: parked gets on partition 3, offset 0
			const puts = 20000 // opaques gets+1..: puts to partition i%3, the middle one to partition 3
			w := bufio.NewWriterSize(nc, 64<<10)
			for i := 1; i <= gets; i++ {
				fmt.Fprintf(w, "get test g 3 0 65536 %d 30000\r\n", i)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return stat(t, b, "long_polls") >= gets })
			done := make(chan error, 1)
			go func() {
				body := make([]byte, 100)
				for i := 0; i < puts; i++ {
					p := i % 3
					if i == puts/2 { // wakes every parked get while puts stream in
						p = 3
					}
					copy(body, strconv.Itoa(i))
					fmt.Fprintf(w, "put test %d %d 0 %d\r\n", p, len(body), gets+1+i)
					w.Write(body)
				}
				done <- w.Flush()
			}()
			_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
			rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 64<<10), 1<<20)
			seen := make(map[int32]bool)
			lastPut := int32(gets)
			for len(seen) < gets+puts {
				r, err := rr.Next()
				if err != nil {
					t.Fatalf("after %d replies: %v", len(seen), err)
				}
				if seen[r.Opaque] || r.Opaque < 1 || r.Opaque > gets+puts {
					t.Fatalf("reply %+v: unexpected or repeated opaque", r)
				}
				seen[r.Opaque] = true
				if r.Opaque <= gets {
					recs := brokertest.Records(t, r.Body)
					if r.Kind != protocol.ReplyValue || len(recs) == 0 {
						t.Fatalf("parked get %d: %+v", r.Opaque, r)
					}
					continue
				}
				if r.Code != 200 {
					t.Fatalf("put %d: %+v %q", r.Opaque, r, r.Body)
				}
				if r.Opaque != lastPut+1 {
					t.Fatalf("put reply %d after %d: out of order", r.Opaque, lastPut)
				}
				lastPut = r.Opaque
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
