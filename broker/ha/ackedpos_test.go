package ha

import (
	"log/slog"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// An async-flush master answers a put once it is written, before its fsync:
// what it may have acknowledged (AckedPos, the target of a planned switch)
// is past its durable position until the next flush.
func TestAckedPosCoversUnflushedPuts(t *testing.T) {
	st, err := store.Open(store.Config{Dir: t.TempDir(), BrokerID: 1, UnflushThreshold: 1 << 20,
		UnflushInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := New(Config{Store: st, SlaveID: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(&store.Message{Topic: "t", Data: []byte("acknowledged")}); err != nil {
		t.Fatal(err)
	}
	vis := st.VisiblePos()
	if n.DurablePos() >= vis {
		t.Fatalf("setup: the put is durable already (%d >= %d)", n.DurablePos(), vis)
	}
	if got := n.AckedPos(); got != vis {
		t.Fatalf("AckedPos %d, want the written end %d (durable %d)", got, vis, n.DurablePos())
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := n.AckedPos(); got != st.FlushedPos() {
		t.Fatalf("after the flush AckedPos %d, want %d", got, st.FlushedPos())
	}
}
