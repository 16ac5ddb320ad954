//go:build !race

package pop_test

// Not under -race: the race detector makes sync.Pool drop items on purpose.

import (
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/pop"
)

// The TCP hot path (Poll of a batch, Finish of its handles) does not
// allocate per message once warm.
func TestPollFinishAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"test": 1}})
	c := b.Dial()
	for i := 0; i < 3000; i++ {
		c.Put("test", 0, "x", int32(i))
	}
	p := b.PopService()
	var batch pop.Batch
	hs := make([]pop.Handle, 0, 64)
	var scratch []byte
	topic, group := []byte("test"), []byte("g")
	round := func() {
		if err := p.Poll("g", "test", nil, 16, time.Minute, &batch); err != nil {
			t.Fatal(err)
		}
		hs = hs[:0]
		for _, it := range batch.Items {
			hs = append(hs, pop.Handle{Topic: topic, Partition: it.Partition, Offset: it.Offset, Attempt: it.Attempt})
		}
		batch.Release()
		var err error
		_, _, _, scratch, err = p.Finish(group, hs, pop.OpAck, 0, scratch)
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(50, round); n > 2 {
		t.Fatalf("%.1f allocations per round of 16 messages", n)
	}
}
