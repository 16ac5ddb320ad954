package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// CommitBatch writes many partitions in multi-ops on the versions of the
// store's own writes, keeps Commit's rules when another writer moved a node
// (no move back), and agrees with what Load reads.
func TestZKOffsetCommitBatch(t *testing.T) {
	addr := zktest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func() *zkmeta.Client {
		zc, err := zkmeta.Connect(ctx, zkmeta.Config{ConnectString: addr, Logger: slogPrintf{testLogger()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { zc.Close() })
		return zc
	}
	group := "batch" + fmt.Sprint(time.Now().UnixNano())
	a := NewZKOffsetStore(connect(), group).(*zkOffsetStore)
	b := NewZKOffsetStore(connect(), group).(*zkOffsetStore)
	const n = 1200 // more than two multi-ops
	cs := make([]offsetCommit, n)
	for i := range cs {
		cs[i] = offsetCommit{"t", Partition{BrokerID: 1, Partition: i}, Offset{MsgID: int64(i), Offset: 10}}
	}
	errs := make([]error, n)
	a.CommitBatch(ctx, cs, errs) // first: no version known, one by one (creates the nodes)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("first commit %d: %v", i, err)
		}
	}
	// Another store moves partition 7 ahead; a moves partition 8 back (its own rewind).
	if err := b.Commit(ctx, "t", Partition{BrokerID: 1, Partition: 7}, Offset{MsgID: 1, Offset: 5000}); err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		cs[i].o.Offset = 20 + int64(i)
	}
	cs[8].o.Offset = 3
	a.CommitBatch(ctx, cs, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("second commit %d: %v", i, err)
		}
	}
	// Versions are learned from the multi-ops: the next batch needs no read.
	a.mu.Lock()
	known := len(a.ver)
	a.mu.Unlock()
	if known < n-2 {
		t.Fatalf("versions known for %d of %d partitions", known, n)
	}
	for i := range cs {
		o, ok, err := a.Load(ctx, "t", cs[i].p)
		want := cs[i].o.Offset
		if i == 7 {
			want = 5000 // never moved back below the other writer's
		}
		if err != nil || !ok || o.Offset != want {
			t.Fatalf("partition %d: %v %v %v, want offset %d", i, o, ok, err, want)
		}
	}
}
