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

// The same with puts spread over more partitions than the connection tracks
// exactly (maxOwnPartitions, 32): a get on the first partition and one on
// the last, after 40 puts to 40 partitions in the same write, each see
// their put.
func TestPipelinedGetSeesEarlierPutsManyPartitions(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			const parts = 40
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync, Topics: map[string]int{"spread": parts}})
			c := b.Dial()
			for try := 0; try < 20; try++ {
				var w strings.Builder
				for part := 0; part < parts; part++ {
					data := fmt.Sprintf("try %d part %d", try, part)
					fmt.Fprintf(&w, "put spread %d %d 0 %d\r\n%s", part, len(data), part, data)
				}
				for i, part := range []int{0, parts - 1} {
					fmt.Fprintf(&w, "get spread g %d %d 65536 %d\r\n", part, try, parts+i)
				}
				c.Send(w.String())
				for part := 0; part < parts; part++ {
					if r := c.Reply(); r.Code != 200 || r.Opaque != int32(part) {
						t.Fatalf("try %d put %d: %+v %q", try, part, r, r.Body)
					}
				}
				for i, part := range []int{0, parts - 1} {
					r := c.Reply()
					if r.Kind != protocol.ReplyValue || r.Opaque != int32(parts+i) {
						t.Fatalf("try %d: get on partition %d after its put on the same connection answered %s %d %q", try, part, r.Kind, r.Code, r.Body)
					}
					recs := brokertest.Records(t, r.Body)
					if want := fmt.Sprintf("try %d part %d", try, part); len(recs) == 0 || string(recs[0].Data) != want {
						t.Fatalf("try %d partition %d: %d records, want first %q", try, part, len(recs), want)
					}
				}
			}
		})
	}
}

// A long-polling get that parks is never answered before the replies of the
// requests sent before it (docs/protocol.md, "Ordering on a connection"):
// a put on partition 1, then a get that parks at the tail of partition 0,
// then a long run of cheap commands, in one write; another connection puts
// on partition 0 meanwhile and wakes the get. Before the fix the woken get
// went straight to the writer while the first put's reply still waited in
// the reader's batch.
func TestParkedGetKeepsOrder(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			c, other := b.Dial(), b.Dial()
			const tries, versions = 50, 2000
			tail := strings.Repeat("version 4\r\n", versions)
			for try := 0; try < tries; try++ {
				c.Send(fmt.Sprintf("put test 1 1 0 1\r\naget test g 0 %d 65536 2 30000\r\n%s", try, tail))
				other.Put("test", 0, "b", 3)
				var order []int32
				for len(order) < 2+versions {
					r := c.Reply()
					if r.Opaque == 2 && r.Kind != protocol.ReplyValue {
						t.Fatalf("try %d: get answered %d %q", try, r.Code, r.Body)
					}
					order = append(order, r.Opaque)
				}
				if order[0] != 1 {
					t.Fatalf("try %d: replies begin %v: the parked get overtook the put sent before it", try, order[:3])
				}
			}
		})
	}
}
