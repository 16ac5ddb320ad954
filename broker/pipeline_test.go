package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// One write holding several mput frames of ~100 KB and ~600 KB of single
// puts (more than one read of the broker's largest read buffer) is answered
// in request order, with the offsets the appends gave them, in both flush
// modes; a get written right behind them on the same connection sees every
// one (ordering.go).
func TestLargePipelinedWriteAnswersInOrder(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync, Topics: map[string]int{"test": 1}})
			c := b.Dial()
			body := strings.Repeat("d", 100)
			bodies := make([]string, 1000)
			for i := range bodies {
				bodies[i] = body
			}
			const frames, puts = 4, 3000
			var w []byte
			for i := 0; i < frames; i++ {
				w = append(w, mputFrameForm("test", 0, bodies, true, int32(i))...)
			}
			for i := 0; i < puts; i++ {
				w = fmt.Appendf(w, "put test 0 %d 0 %d\r\n%s", len(body), frames+i, body)
			}
			w = fmt.Appendf(w, "get test g 0 %d 1048576 %d\r\n", frames*len(bodies)+puts-1, frames+puts)
			c.SendBytes(w)
			next := int64(0)
			for i := 0; i < frames; i++ {
				r := c.Reply()
				if r.Code != 200 || r.Opaque != int32(i) {
					t.Fatalf("frame %d: reply %d opaque %d %q", i, r.Code, r.Opaque, r.Body)
				}
				_, first, ids, err := protocol.ParseBatchPutRuns(r.Body, len(bodies), nil)
				if err != nil || first != next || len(ids) != len(bodies) {
					t.Fatalf("frame %d: first offset %d (want %d), %d ids, %v", i, first, next, len(ids), err)
				}
				next += int64(len(bodies))
			}
			for i := 0; i < puts; i++ {
				r := c.Reply()
				if r.Code != 200 || r.Opaque != int32(frames+i) {
					t.Fatalf("put %d: reply %d opaque %d %q", i, r.Code, r.Opaque, r.Body)
				}
				f := strings.Fields(string(r.Body))
				if len(f) != 3 || f[2] != fmt.Sprint(next) {
					t.Fatalf("put %d: %q, want offset %d", i, r.Body, next)
				}
				next++
			}
			r := c.Reply()
			if r.Opaque != int32(frames+puts) {
				t.Fatalf("get: reply %d opaque %d %q", r.Code, r.Opaque, r.Body)
			}
			recs := brokertest.Records(t, r.Body)
			if len(recs) != 1 || recs[0].QueueOffset != next-1 || string(recs[0].Data) != body {
				t.Fatalf("get after the puts: %d records %+v", len(recs), recs)
			}
		})
	}
}
