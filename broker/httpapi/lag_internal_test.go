package httpapi

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A lag pass that lasts longer than lagReadTimeout (many groups and
// partitions at lagReadsPerSecond) completes: the deadline bounds each
// ZooKeeper read, not the pass (docs/observability.md).
func TestLagPassLongerThanReadTimeout(t *testing.T) {
	defer func(d time.Duration) { lagReadTimeout = d }(lagReadTimeout)
	lagReadTimeout = time.Second
	zkAddr := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 7, Topics: map[string]int{"orders": 3}})
	c := b.Dial()
	for p := 0; p < 3; p++ {
		c.Put("orders", p, "m", int32(p))
	}
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for p := 0; p < 3; p++ {
		if err := zc.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 7, Partition: p}, zkmeta.Offset{MsgID: -1, Offset: 0}); err != nil {
			t.Fatal(err)
		}
	}
	l := newLagTracker(zc, b.Store, 7, time.Hour, 100, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The pace lets the first read go, then holds the others until more
	// than lagReadTimeout has passed since the pass began.
	pace := make(chan time.Time)
	go func() {
		for i := 0; ; i++ {
			if i == 1 {
				time.Sleep(lagReadTimeout + 500*time.Millisecond)
			}
			select {
			case pace <- time.Now():
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := l.pass(ctx, pace); err != nil {
		t.Fatalf("a pass longer than the read timeout: %v", err)
	}
	if lags, members, _, _ := l.lags(); len(lags) != 3 || members["billing"] != 0 {
		t.Fatalf("lags %v, members %v: want 3 partitions of billing", lags, members)
	}
}
