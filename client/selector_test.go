package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// fakeTable is brokers × partsPerBroker partitions, sorted as routes are;
// the connections are never dialled, only their up flag is used.
func fakeTable(brokers, partsPerBroker int) *routeTable {
	t := &routeTable{}
	for b := 1; b <= brokers; b++ {
		c := &brokerConn{addr: fmt.Sprintf("b%d", b)}
		c.up.Store(true)
		for i := 0; i < partsPerBroker; i++ {
			t.parts = append(t.parts, Partition{BrokerID: b, Partition: i})
			t.conns = append(t.conns, c)
		}
	}
	return t
}

func (t *routeTable) setBrokerUp(id int, up bool) {
	for i, p := range t.parts {
		if p.BrokerID == id {
			t.conns[i].up.Store(up)
		}
	}
}

// spreadOK fails unless every partition in counts not on a skipped broker
// got within one message of the others.
func spreadOK(t *testing.T, what string, counts map[Partition]int, skipped ...int) {
	t.Helper()
	lo, hi := -1, 0
	for p, n := range counts {
		for _, b := range skipped {
			if p.BrokerID == b && n > 0 {
				t.Fatalf("%s: %d messages on partition %s of skipped broker %d", what, n, p, b)
			}
		}
		if n == 0 {
			continue
		}
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi-lo > 1 {
		t.Fatalf("%s: partitions got between %d and %d messages: %v", what, lo, hi, counts)
	}
}

// Round-robin with a broker that is down: its share is spread over the
// partitions of the other brokers, not handed to the partition that follows
// it (the first one of the next broker), on first attempts and on retries.
func TestPickSpreadsSkippedShare(t *testing.T) {
	const brokers, per = 3, 4
	for down := 1; down <= brokers; down++ {
		t.Run(fmt.Sprintf("broker%dDown", down), func(t *testing.T) {
			p := &Producer{opts: &ProducerOptions{Selector: RoundRobin()}}
			tbl := fakeTable(brokers, per)
			tbl.setBrokerUp(down, false)
			counts := map[Partition]int{}
			const n = 12 * 1000
			for range n {
				s := &attemptPos{idx: -1, failedBroker: -1}
				counts[tbl.parts[p.pick(tbl, &Message{}, s)]]++
			}
			spreadOK(t, "first attempts", counts, down)

			// Retries after a failure on the broker that is down (before
			// its connection is marked down): all of them go elsewhere, and
			// evenly.
			tbl.setBrokerUp(down, true)
			retries := map[Partition]int{}
			for i := range n {
				idx := (down-1)*per + i%per // a partition of the failed broker
				s := &attemptPos{attempt: 1, idx: idx, failedBroker: down}
				retries[tbl.parts[p.pick(tbl, &Message{}, s)]]++
			}
			spreadOK(t, "retries", retries, down)

			// Retries when the failed broker's neighbour is down too: the
			// last healthy broker takes them all, evenly.
			other := down%brokers + 1
			tbl.setBrokerUp(other, false)
			retries = map[Partition]int{}
			for i := range n {
				s := &attemptPos{attempt: 1, idx: (down-1)*per + i%per, failedBroker: down}
				retries[tbl.parts[p.pick(tbl, &Message{}, s)]]++
			}
			spreadOK(t, "retries with two brokers out", retries, down, other)
		})
	}

	// Ordered messages stay where the selector put them, up or down.
	p := &Producer{opts: &ProducerOptions{Selector: RoundRobin()}}
	tbl := fakeTable(2, 2)
	tbl.setBrokerUp(1, false)
	s := &attemptPos{idx: -1, failedBroker: -1, ordered: true}
	if i := p.pick(tbl, &Message{}, s); i != 0 {
		t.Fatalf("ordered message moved to %d", i)
	}
	// Nothing healthy: the selector's choice, and retries move on by one.
	tbl.setBrokerUp(2, false)
	if i := p.pick(tbl, &Message{}, &attemptPos{idx: -1, failedBroker: -1}); i != 1 {
		t.Fatalf("with every broker down: %d, want the selector's choice 1", i)
	}
	one := fakeTable(1, 2)
	if i := p.pick(one, &Message{}, &attemptPos{attempt: 1, idx: 1, failedBroker: 1}); i != 0 {
		t.Fatalf("retry with one broker: %d", i)
	}
}

// Through real brokers: with one of three brokers' servers gone while
// ZooKeeper still lists it, round-robin sends land evenly on the other
// brokers' partitions (before the fix, the partition after the dead broker's
// took its whole share: twice the others).
func TestRoundRobinEvenWithBrokerDown(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 3}, 1, 2, 3)
	p := cl.producer(func(c *Config) { c.Producer.SendTimeout = 10 * time.Second })
	ctx := ctxT(t, 60*time.Second)
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = cl.brokers[2].Server.Shutdown(sctx) // still registered in ZooKeeper
	cancel()
	// Until the producer notices, sends to broker 2 fail and are retried.
	zktest.Eventually(t, 15*time.Second, func() bool {
		tbl := mustRoute(t, p, "orders")
		for i, q := range tbl.parts {
			if q.BrokerID == 2 {
				return !tbl.conns[i].healthy()
			}
		}
		return false
	}, "connection to broker 2 seen down")

	var mu sync.Mutex
	counts := map[Partition]int{}
	var wg sync.WaitGroup
	const senders, each = 4, 600
	for range senders {
		wg.Go(func() {
			for range each {
				r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counts[r.Partition]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("per partition: %v", counts)
	if len(counts) != 6 {
		t.Fatalf("sends reached %d partitions, want the 6 of brokers 1 and 3: %v", len(counts), counts)
	}
	want := senders * each / 6
	for q, n := range counts {
		if q.BrokerID == 2 {
			t.Fatalf("%d sends stored on broker 2, which is down", n)
		}
		// Exact round-robin gives ±1 per concurrent sender; allow 3%.
		if d := n - want; d > want*3/100 || -d > want*3/100 {
			t.Fatalf("partition %s got %d messages, want %d ± 3%%: %v", q, n, want, counts)
		}
	}
}

func mustRoute(t *testing.T, p *Producer, topic string) *routeTable {
	t.Helper()
	r, err := p.route(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return r.table()
}
