package zkmeta_test

import (
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A persistent node left where an ephemeral one belongs (a hand-made node, an old tool) is
// replaced, and the replacement is logged.
func TestEphemeralReplacesPersistentNode(t *testing.T) {
	c, lg := connect(t, zktest.Server(t))
	ctx := ctxT(t, 10*time.Second)
	must(t, c.Put(ctx, "/meta/brokers/ids/9/master", []byte("meta://old:1")))
	n, err := c.Ephemeral("/meta/brokers/ids/9/master", []byte("meta://new:1"))
	must(t, err)
	must(t, n.Wait(ctx))
	wantEphemeral(t, c, "/meta/brokers/ids/9/master", "meta://new:1")
	if !lg.contains("a persistent node sits at") {
		t.Error("the replacement was not logged")
	}
}

// ReleasePartition deletes only the node this session created for this consumer id: another
// consumer id of the same session (data differs) leaves it alone.
func TestReleasePartitionOtherIDSameSession(t *testing.T) {
	c, _ := connect(t, zktest.Server(t))
	ctx := ctxT(t, 10*time.Second)
	p := zkmeta.Partition{BrokerID: 1, Partition: 0}
	const path = "/meta/consumers/g/owners/t/1-0"
	if ok, _, err := c.ClaimPartition(ctx, "g", "t", p, "c1"); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	must(t, c.ReleasePartition(ctx, "g", "t", p, "c2"))
	wantEphemeral(t, c, path, "g_c1")
	must(t, c.ReleasePartition(ctx, "g", "t", p, "c1"))
	wantAbsent(t, c, path)
	must(t, c.ReleasePartition(ctx, "g", "t", p, "c1")) // already gone: fine
}
