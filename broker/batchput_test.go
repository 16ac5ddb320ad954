package broker_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// mputFrame renders an mput of bodies (flag 0) with a block checksum.
func mputFrame(topic string, partition int, bodies []string, opaque int32) []byte {
	return mputFrameForm(topic, partition, bodies, false, opaque)
}

// mputFrameForm is mputFrame asking for the compact reply when runs.
func mputFrameForm(topic string, partition int, bodies []string, runs bool, opaque int32) []byte {
	var block []byte
	for _, b := range bodies {
		d := protocol.MessageData{Payload: []byte(b)}
		block = protocol.AppendBatchEntry(block, &d)
	}
	hdr := protocol.AppendBatchPutHeader
	if runs {
		hdr = protocol.AppendBatchPutRunsHeader
	}
	f := hdr(nil, topic, int32(partition), len(bodies), len(block), protocol.MessageChecksum(block), opaque)
	return append(f, block...)
}

// Both reply forms give every message its offset and the id of its record:
// the list of ids, and the compact runs of record sizes (the bodies have
// two lengths, so the frame's records two sizes).
func TestBatchPutStoresOneRunWithOffsetsAndIDs(t *testing.T) {
	for _, tc := range []struct{ sync, runs bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		sync := tc.sync
		t.Run(fmt.Sprintf("sync=%v,runs=%v", sync, tc.runs), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			c := b.Dial()
			c.Put("test", 1, "single before", 1) // offset 0
			var bodies []string
			for i := 0; i < 50; i++ {
				bodies = append(bodies, fmt.Sprintf("batch message %d", i))
			}
			c.SendBytes(mputFrameForm("test", 1, bodies, tc.runs, 42))
			r := c.Reply()
			if r.Code != 200 || r.Opaque != 42 {
				t.Fatalf("mput reply %d %d %q", r.Code, r.Opaque, r.Body)
			}
			part, first, ids, err := protocol.ParseBatchPutResult(r.Body, nil)
			if tc.runs {
				if want := " 90x10 91x40"; !strings.HasSuffix(string(r.Body), want) {
					t.Fatalf("runs reply %q, want it to end in %q", r.Body, want)
				}
				part, first, ids, err = protocol.ParseBatchPutRuns(r.Body, len(bodies), nil)
			}
			if err != nil || part != 1 || first != 1 || len(ids) != len(bodies) {
				t.Fatalf("result %d %d %d ids, %v", part, first, len(ids), err)
			}
			c.Put("test", 1, "single after", 2)
			c.Send("get test g 1 0 1048576 3\r\n")
			recs := brokertest.Records(t, c.Reply().Body)
			if len(recs) != len(bodies)+2 {
				t.Fatalf("%d records, want %d", len(recs), len(bodies)+2)
			}
			for i, body := range bodies {
				rec := recs[i+1]
				if string(rec.Data) != body || rec.QueueOffset != first+int64(i) || rec.MsgID != ids[i] {
					t.Fatalf("record %d: %q offset %d id %d; want %q %d %d", i, rec.Data, rec.QueueOffset, rec.MsgID, body, first+int64(i), ids[i])
				}
			}
			// Each id finds its own message.
			c.Send(fmt.Sprintf("query id %d 4\r\n", ids[7]))
			if q := brokertest.Records(t, c.Reply().Body); len(q) != 1 || string(q[0].Data) != bodies[7] {
				t.Fatalf("query id: %v", q)
			}
		})
	}
}

// The broker picks the partition of a `-1` frame once for all its messages;
// properties lines (tags) work per entry.
func TestBatchPutBrokerPartitionAndProperties(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	var block []byte
	for i := 0; i < 3; i++ {
		d := protocol.MessageData{Props: []byte(fmt.Sprintf("tag=t%d", i)), Payload: []byte(fmt.Sprint("p", i))}
		block = protocol.AppendBatchEntry(block, &d)
	}
	frame := protocol.AppendBatchPutHeader(nil, "test", -1, 3, len(block), protocol.ChecksumNone, 5)
	c.SendBytes(append(frame, block...))
	r := c.Reply()
	part, first, ids, err := protocol.ParseBatchPutResult(r.Body, nil)
	if r.Code != 200 || err != nil || len(ids) != 3 {
		t.Fatalf("%d %q %v", r.Code, r.Body, err)
	}
	c.Send(fmt.Sprintf("get test g %d %d 1048576 6 0 t1\r\n", part, first))
	recs := brokertest.Records(t, c.Reply().Body)
	if len(recs) != 1 || string(recs[0].Data) != "p1" || recs[0].MsgID != ids[1] {
		t.Fatalf("tag t1: %+v", recs)
	}
}

// A bad frame is answered 400 (or as a put would be), nothing of it is
// stored, and the connection goes on.
func TestBatchPutBadInput(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	good := mputFrame("test", 2, []string{"a", "b"}, 9)
	block := good[strings.Index(string(good), "\r\n")+2:]
	cases := []struct {
		name, send, want string
		code             int
	}{
		{"count 0", fmt.Sprintf("mput test 2 0 %d 9\r\n%s", len(block), block), "count", 400},
		{"count above limit", fmt.Sprintf("mput test 2 10001 %d 9\r\n%s", len(block), block), "count", 400},
		{"fewer entries than count", fmt.Sprintf("mput test 2 3 %d 9\r\n%s", len(block), block), "entry 3", 400},
		{"more entries than count", fmt.Sprintf("mput test 2 1 %d 9\r\n%s", len(block), block), "bytes after", 400},
		{"bad entry header", "mput test 2 1 6 9\r\nx y\r\nz", "entry 1", 400},
		{"entry size past block", "mput test 2 1 7 9\r\n9 0\r\nab", "past the end", 400},
		{"checksum mismatch", fmt.Sprintf("mput test 2 2 %d 123 9\r\n%s", len(block), block), "checksum", 400},
		{"wrong field count", fmt.Sprintf("mput test 2 2 %d 1 2 9\r\n%s", len(block), block), "usage", 400},
		{"bad topic", fmt.Sprintf("mput a/b 2 2 %d 9\r\n%s", len(block), block), "topic", 400},
		{"system topic", fmt.Sprintf("mput %%SCHEDULE%% 0 2 %d 9\r\n%s", len(block), block), "system topics", 403},
		{"wrong partition", fmt.Sprintf("mput test 17 2 %d 9\r\n%s", len(block), block), "wrong partition", 500},
		{"bad properties line", "mput test 2 1 8 9\r\n3 2\r\nabc", "properties", 400},
		{"transactional message", "mput test 2 1 18 9\r\n12 2\r\ntx=half\nabcd", "transactional", 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := b.Dial()
			c.Send(tc.send)
			r := c.Reply()
			if r.Kind != protocol.ReplyResult || r.Code != tc.code || !strings.Contains(string(r.Body), tc.want) {
				t.Fatalf("reply %s %d %q, want %d containing %q", r.Kind, r.Code, r.Body, tc.code, tc.want)
			}
			c.Put("test", 2, "after "+tc.name, 77)
		})
	}
	c := b.Dial()
	c.Send("get test g 2 0 1048576 1\r\n")
	recs := brokertest.Records(t, c.Reply().Body)
	if len(recs) != len(cases) {
		t.Fatalf("partition 2 holds %d records, want %d (only the good puts)", len(recs), len(cases))
	}
	// A block longer than maxMessageSize cannot be framed: 400, then closed.
	c = b.Dial()
	c.Send("mput test 2 1 999999999 9\r\n")
	if r := c.Reply(); r.Code != 400 || !strings.Contains(string(r.Body), "exceeds maxMessageSize") {
		t.Fatalf("oversized block: %d %q", r.Code, r.Body)
	}
	c.ExpectClosed(30e9)
}

// benchPipelinedBatchPut measures mput frames of batch messages over one
// connection, frames in flight; b.N counts messages.
func benchPipelinedBatchPut(b *testing.B, sync bool, batch, frames int) {
	benchPipelinedBatchPutForm(b, sync, false, batch, frames)
}

// benchPipelinedBatchPutForm is benchPipelinedBatchPut asking for the
// compact reply when runs.
func benchPipelinedBatchPutForm(b *testing.B, sync, runs bool, batch, frames int) {
	br := brokertest.RunBroker(b, brokertest.Options{Sync: sync, SegSize: 256 << 20})
	nc, err := net.Dial("tcp", br.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	bodies := make([]string, batch)
	for i := range bodies {
		bodies[i] = strings.Repeat("x", 100)
	}
	frame := mputFrameForm("test", 0, bodies, runs, 1)
	n := (b.N + batch - 1) / batch
	b.SetBytes(100)
	b.ReportAllocs()
	pipeline(b, nc, frame, n, frames, 256<<10)
	b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkPipelinedBatchPutAsync(b *testing.B) { benchPipelinedBatchPut(b, false, 100, 10) }
func BenchmarkPipelinedBatchPutSync(b *testing.B)  { benchPipelinedBatchPut(b, true, 100, 10) }

// The client's form: 1,000 per frame, 5 in flight, the compact reply.
func BenchmarkPipelinedBatchPutRunsAsync(b *testing.B) {
	benchPipelinedBatchPutForm(b, false, true, 1000, 5)
}
func BenchmarkPipelinedBatchPutRunsSync(b *testing.B) {
	benchPipelinedBatchPutForm(b, true, true, 1000, 5)
}

// Frames larger than the first read buffer arrive split across reads, and
// the reader keeps one data buffer for them (protocol.Parser.RetainData):
// every frame is stored with its own bytes, a bad one in between (checksum
// mismatch) is refused with nothing stored, and the next one is intact.
func TestBatchPutSplitFramesReuseBuffer(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			c := b.Dial()
			var want []string
			for f := 0; f < 4; f++ {
				bodies := make([]string, 300) // ~60 KB: split, with a 4 KiB first read buffer
				for i := range bodies {
					bodies[i] = fmt.Sprintf("frame %d message %03d %s", f, i, strings.Repeat(string(rune('a'+f)), 170))
				}
				frame := mputFrameForm("test", 3, bodies, true, int32(10+f))
				code := 200
				if f == 2 { // corrupt the last byte of the block: the checksum no longer matches
					frame[len(frame)-1] ^= 1
					code = 400
				} else {
					want = append(want, bodies...)
				}
				c.SendBytes(frame)
				if r := c.Reply(); r.Code != code || r.Opaque != int32(10+f) {
					t.Fatalf("frame %d: %d %d %q, want %d", f, r.Code, r.Opaque, r.Body, code)
				}
			}
			var got []string
			for off := 0; len(got) < len(want); {
				c.Send(fmt.Sprintf("get test g 3 %d 1048576 5\r\n", off))
				r := c.Reply()
				if r.Code != 0 && r.Code != 200 {
					t.Fatalf("get at %d: %d %q", off, r.Code, r.Body)
				}
				recs := brokertest.Records(t, r.Body)
				if len(recs) == 0 {
					break
				}
				for _, rec := range recs {
					got = append(got, string(rec.Data))
				}
				off += len(recs)
			}
			if len(got) != len(want) {
				t.Fatalf("%d records stored, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("record %d: %q, want %q", i, got[i], want[i])
				}
			}
		})
	}
}

// An mput header announcing more messages than its block can hold (an entry
// takes at least protocol.MinBatchEntry bytes) is refused from the header,
// before the broker sizes anything from the count; the connection stays
// open. (A 27-byte frame announcing 10000 messages made each connection
// allocate and keep scratch for all of them: TestBatchScratchFollowsTheBlock.)
func TestBatchPutCountBeyondTheBlock(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	c.Send(fmt.Sprintf("mput test 0 %d 4 1\r\n0 0\nversion 2\r\n", protocol.MaxBatchCount))
	if r := c.Reply(); r.Code != 400 || r.Opaque != 1 || !strings.Contains(string(r.Body), "an entry takes at least 4") {
		t.Fatalf("mput of %d messages in 4 bytes: %d %q, want 400 from the header", protocol.MaxBatchCount, r.Code, r.Body)
	}
	if r := c.Reply(); r.Opaque != 2 {
		t.Fatalf("after the refused mput: %+v", r)
	}
}
