package broker_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// Five puts and a get at the first of their offsets, sent in one write: the
// get sees the five records (docs/protocol.md, "Ordering on a connection"),
// in sync and async flush, every time. Before the fix the sync case answered
// 404 in 200 of 200 tries.
func TestPipelinedGetSeesEarlierPuts(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			c := b.Dial()
			const tries, puts = 200, 5
			for try := 0; try < tries; try++ {
				part := try % 4
				first := int64(try/4) * puts
				var w strings.Builder
				for i := 0; i < puts; i++ {
					data := fmt.Sprintf("try %d msg %d", try, i)
					fmt.Fprintf(&w, "put test %d %d 0 %d\r\n%s", part, len(data), i, data)
				}
				fmt.Fprintf(&w, "get test g %d %d 65536 %d\r\n", part, first, puts)
				c.Send(w.String())
				for i := 0; i < puts; i++ {
					r := c.Reply()
					if r.Code != 200 || r.Opaque != int32(i) {
						t.Fatalf("try %d put %d: %+v %q", try, i, r, r.Body)
					}
					if _, _, off, _ := protocol.ParsePutResult(r.Body); off != first+int64(i) {
						t.Fatalf("try %d put %d: offset %d, want %d", try, i, off, first+int64(i))
					}
				}
				r := c.Reply()
				if r.Kind != protocol.ReplyValue || r.Opaque != puts {
					t.Fatalf("try %d: get after %d puts on the same connection answered %s %d %q", try, puts, r.Kind, r.Code, r.Body)
				}
				recs := brokertest.Records(t, r.Body)
				if len(recs) != puts {
					t.Fatalf("try %d: get returned %d records, want %d", try, len(recs), puts)
				}
				for i, rec := range recs {
					if want := fmt.Sprintf("try %d msg %d", try, i); string(rec.Data) != want {
						t.Fatalf("try %d record %d: %q, want %q", try, i, rec.Data, want)
					}
				}
			}
		})
	}
}
