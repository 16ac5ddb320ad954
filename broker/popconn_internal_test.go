package broker

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// In async-flush mode an ack's done record is durable only once the
// reader's write-out at the end of the batch succeeds: when that fails,
// the ack's 200 must become a failure as a put's does, not tell the client
// its ack took effect.
func TestAsyncAckFailsWithWriteOut(t *testing.T) {
	st, err := store.Open(store.Config{Dir: filepath.Join(t.TempDir(), "data"), SegmentSize: 1 << 20, UnflushThreshold: 1000, Logger: slog.New(slog.DiscardHandler)}) // async flush
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := store.Message{Topic: "t", Data: []byte("m")}
	if _, err := st.Append(&m); err != nil {
		t.Fatal(err)
	}
	p, err := pop.Open(pop.Config{Store: st, Topics: func(topic string) (int, bool) { return 1, topic == "t" }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := p.Receive(ctx, "g", "t", nil, 1, time.Hour)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %d", err, len(ds))
	}
	srv := &Server{}
	srv.pop.Store(p)
	c := &conn{srv: srv, log: slog.New(slog.DiscardHandler)}
	for _, op := range []protocol.Op{protocol.OpExtend, protocol.OpAck} {
		c.handleFinish(&protocol.Command{Op: op, Group: []byte("g"), Key: []byte(ds[0].Handle), Millis: 60000, Opaque: 5})
	}
	if len(c.rq.replies) != 2 || c.rq.replies[0].code != protocol.StatusSuccess || c.rq.replies[1].code != protocol.StatusSuccess {
		t.Fatalf("replies %+v, want extend and ack answered 200", c.rq.replies)
	}
	if n := c.rq.failUnflushedPuts(protocol.StatusInternalServerError, "write-out failed"); n != 1 || c.rq.replies[1].code != protocol.StatusInternalServerError {
		t.Fatalf("a failed write-out turned %d replies into failures (ack now %d), want the ack's", n, c.rq.replies[1].code)
	}
	c.rq.releaseAll()
}
