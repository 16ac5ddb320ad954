package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// 2 brokers × 4 partitions, 3 consumers of one group in ordered mode,
// 100,000 messages produced while they consume. One consumer crashes
// mid-run (ZooKeeper session and connections closed, nothing committed):
// its partitions move, nothing is lost, per-partition order holds within
// each consumer, and the only duplicates are messages the crashed consumer
// handled after its last commit.
func TestGroup100kWithCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 messages: skipped with -short")
	}
	const total = 100_000
	cl := newCluster(t, map[string]int{"orders": 4}, 1, 2)
	start := time.Now()

	type mkey struct {
		p   Partition
		off int64
	}
	type ckey struct {
		c int
		p Partition
	}
	var (
		mu         sync.Mutex
		deliveries = map[mkey][]int{} // message → consumers that handled it
		last       = map[ckey]int64{}
		inflight   = map[ckey]*atomic.Int32{}
		distinct   atomic.Int64
		orderErr   atomic.Value
	)
	handler := func(ci int) Handler {
		return func(ctx context.Context, m *Message) error {
			k := ckey{ci, m.Partition}
			mu.Lock()
			f := inflight[k]
			if f == nil {
				f = new(atomic.Int32)
				inflight[k] = f
			}
			mu.Unlock()
			// Held across the whole handler: an overlap has a window to show.
			if f.Add(1) != 1 {
				orderErr.Store(fmt.Sprintf("consumer %d: two handlers at once on partition %s", ci, m.Partition))
			}
			defer f.Add(-1)
			mu.Lock()
			if prev, ok := last[k]; ok && m.Offset <= prev {
				orderErr.Store(fmt.Sprintf("consumer %d partition %s: offset %d after %d", ci, m.Partition, m.Offset, prev))
			}
			last[k] = m.Offset
			pk := mkey{m.Partition, m.Offset}
			if len(deliveries[pk]) == 0 {
				distinct.Add(1)
			}
			deliveries[pk] = append(deliveries[pk], ci)
			mu.Unlock()
			return nil
		}
	}
	var cs []*Consumer
	for i := range 3 {
		cs = append(cs, cl.consumer("g", "orders", "*", handler(i)))
	}
	zktest.Eventually(t, 15*time.Second, func() bool {
		n, each := totalAssigned(cs...)
		sort.Ints(each)
		return n == 8 && each[0] == 2 && each[2] == 3
	}, "8 partitions balanced over 3 consumers: %v %v %v", cs[0].Assigned(), cs[1].Assigned(), cs[2].Assigned())

	// Produce in the background. A send that times out is retried and may
	// then be stored twice (at-least-once); this test counts messages
	// exactly, so no attempt may time out, however loaded the machine.
	p := cl.producer(func(c *Config) { c.Producer.SendTimeout = 5 * time.Minute })
	var sent, sendErrs atomic.Int64
	maxOff := map[Partition]int64{}
	var pmu sync.Mutex
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		var wg sync.WaitGroup
		body := make([]byte, 100)
		ctx := context.Background()
		for i := 0; i < total; i++ {
			wg.Add(1)
			p.SendAsync(ctx, &Message{Topic: "orders", Body: body}, func(r SendResult, err error) {
				defer wg.Done()
				if err != nil {
					sendErrs.Add(1)
					return
				}
				sent.Add(1)
				pmu.Lock()
				maxOff[r.Partition] = max(maxOff[r.Partition], r.Offset+1)
				pmu.Unlock()
			})
		}
		wg.Wait()
	}()

	// Crash consumer 2 once a third of the messages are in.
	zktest.Eventually(t, 60*time.Second, func() bool { return distinct.Load() >= total/3 }, "a third consumed")
	crashed := cs[2]
	owned := crashed.Assigned()["orders"]
	before := cl.committed("g", "orders") // commits only move forward: a lower bound of the crash-time offsets
	crashed.crash()
	t.Logf("crashed consumer 2 owning %v after %d messages (%s)", owned, distinct.Load(), time.Since(start).Round(time.Millisecond))

	<-prodDone
	if sendErrs.Load() != 0 || sent.Load() != total {
		t.Fatalf("sent %d, %d errors", sent.Load(), sendErrs.Load())
	}
	zktest.Eventually(t, 60*time.Second, func() bool { return distinct.Load() == total }, "every message consumed (%d of %d)", distinct.Load(), total)
	zktest.Eventually(t, 15*time.Second, func() bool {
		n, each := totalAssigned(cs[:2]...)
		return n == 8 && each[0] == 4
	}, "partitions moved to the survivors")
	for _, c := range cs[:2] {
		c.Close()
	}
	if e := orderErr.Load(); e != nil {
		t.Fatal(e)
	}

	mu.Lock()
	defer mu.Unlock()
	var n int64
	for part, m := range maxOff {
		n += m
		for off := int64(0); off < m; off++ {
			if len(deliveries[mkey{part, off}]) == 0 {
				t.Fatalf("message %s@%d lost", part, off)
			}
		}
	}
	if n != total {
		t.Fatalf("partitions hold %d messages, want %d", n, total)
	}
	// Duplicates: only messages the crashed consumer handled at or after
	// its last commit on the partitions it owned.
	ownedSet := map[Partition]bool{}
	for _, q := range owned {
		ownedSet[q] = true
	}
	window := 0
	for k, who := range deliveries {
		off := k.off
		for _, c := range who {
			if c == 2 && ownedSet[k.p] && off >= before[k.p].Offset {
				window++
				break
			}
		}
	}
	dups := 0
	for k, who := range deliveries {
		if len(who) == 1 {
			continue
		}
		dups += len(who) - 1
		off := k.off
		by2 := false
		for _, c := range who {
			by2 = by2 || c == 2
		}
		if !by2 || !ownedSet[k.p] || off < before[k.p].Offset || len(who) > 2 {
			t.Fatalf("unexpected duplicate %s@%d delivered to %v (crashed owned %v, committed %v)", k.p, off, who, owned, before[k.p])
		}
	}
	if dups > window {
		t.Fatalf("%d duplicates > %d messages in the uncommitted window", dups, window)
	}
	t.Logf("100,000 messages, %d duplicates (uncommitted window %d messages), %s", dups, window, time.Since(start).Round(time.Millisecond))
}

// A third broker joins: the producer starts sending to its partitions and
// the group starts consuming them, without a restart.
func TestBrokerJoins(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1, 2)
	ctx := ctxT(t, 60*time.Second)
	p := cl.producer()
	col := newCollector()
	c1 := cl.consumer("g", "orders", "*", col.handler)
	c2 := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1, c2); return n == 4 }, "4 partitions assigned")
	for i := 0; i < 20; i++ {
		if _, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("before")}); err != nil {
			t.Fatal(err)
		}
	}
	cl.start(3)
	zktest.Eventually(t, 10*time.Second, func() bool {
		ps, _ := p.Partitions(ctx, "orders")
		n, each := totalAssigned(c1, c2)
		return len(ps) == 6 && n == 6 && each[0] == 3
	}, "broker 3's partitions in use")
	on3 := 0
	for i := 0; i < 60; i++ {
		r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("after")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition.BrokerID == 3 {
			on3++
		}
	}
	if on3 != 20 {
		t.Fatalf("%d of 60 round-robin sends went to broker 3, want 20", on3)
	}
	col.waitDistinct(t, 80, 15*time.Second)
	got3 := 0
	for _, m := range col.snapshot() {
		if m.Partition.BrokerID == 3 {
			got3++
		}
	}
	if got3 != 20 {
		t.Fatalf("consumed %d messages of broker 3, want 20", got3)
	}
}

// Producer failover: a broker that stops gracefully (unregisters first) and
// one whose server goes away while still registered — sends continue on the
// remaining partitions without a single error; errors surface only when
// every partition fails.
func TestProducerFailover(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 4}, 1, 2, 3)
	p := cl.producer(func(c *Config) { c.Producer.SendTimeout = 2 * time.Second })
	ctx := ctxT(t, 60*time.Second)

	var (
		mu      sync.Mutex
		ok      = map[int]int{}
		errs    []error
		stop    atomic.Bool
		wg      sync.WaitGroup
		phase   atomic.Int32 // 0 all up, 1 broker 3 cut, 2 broker 2 stopped
		wrongly atomic.Int64 // successes on a dead broker after it died
	)
	record := func(r SendResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		ok[r.Partition.BrokerID]++
	}
	body := make([]byte, 100)
	for g := 0; g < 2; g++ { // two sync senders
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				ph := phase.Load()
				r, err := p.Send(ctx, &Message{Topic: "orders", Body: body})
				if err == nil && ((ph >= 1 && r.Partition.BrokerID == 3) || (ph >= 2 && r.Partition.BrokerID == 2)) {
					wrongly.Add(1)
				}
				record(r, err)
			}
		}()
	}
	wg.Add(1)
	go func() { // an async sender with a window
		defer wg.Done()
		sem := make(chan struct{}, 64)
		var inner sync.WaitGroup
		for !stop.Load() {
			sem <- struct{}{}
			inner.Add(1)
			p.SendAsync(ctx, &Message{Topic: "orders", Body: body}, func(r SendResult, err error) {
				defer inner.Done()
				record(r, err)
				<-sem
			})
		}
		inner.Wait()
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return ok[1] + ok[2] + ok[3]
	}
	waitMore := func(n int) {
		target := count() + n
		zktest.Eventually(t, 20*time.Second, func() bool { return count() >= target }, "%d more sends", n)
	}
	waitMore(500)
	// Broker 3's server goes away; ZooKeeper still lists it. (A short
	// context: the broker cuts the connections when it ends — see
	// TestBrokerShutdownWithBusyClient for why a graceful shutdown would
	// wait for the whole context here.)
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = cl.brokers[3].Server.Shutdown(sctx)
	cancel()
	phase.Store(1)
	waitMore(1000)
	// Broker 2 stops gracefully.
	cl.brokers[2].Stop()
	phase.Store(2)
	waitMore(1000)
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	if len(errs) > 0 {
		mu.Unlock()
		t.Fatalf("%d sends failed while a broker was left, first: %v", len(errs), errs[0])
	}
	t.Logf("sends per broker: %v", ok)
	mu.Unlock()
	if wrongly.Load() > 0 {
		t.Fatalf("%d sends succeeded on a dead broker", wrongly.Load())
	}
	// The last broker stops: now every partition fails.
	cl.brokers[1].Stop()
	zktest.Eventually(t, 15*time.Second, func() bool {
		_, err := p.Send(ctx, &Message{Topic: "orders", Body: body})
		return err != nil
	}, "sends fail once every broker is gone")
	done := make(chan error, 1)
	p.SendAsync(ctx, &Message{Topic: "orders", Body: body}, func(_ SendResult, err error) { done <- err })
	if err := <-done; err == nil {
		t.Fatal("async send succeeded with no broker")
	}
}

// A broker restarted on the same address: connections come back by
// themselves (reconnect with backoff); requests while it is down fail fast.
func TestReconnect(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 1}, 1)
	addr := cl.brokers[1].Addr
	dir := cl.brokers[1].Dir
	a, err := NewAdmin(Config{Brokers: []string{addr}, Logger: testLogger(), ReconnectBackoff: 10 * time.Millisecond, MaxReconnectBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A send timeout longer than the test: a send that fails at all while
	// the broker is down failed fast, not by waiting (no clock involved).
	p, err := NewProducer(Config{Brokers: []string{addr}, Logger: testLogger(), ReconnectBackoff: 10 * time.Millisecond, MaxReconnectBackoff: 200 * time.Millisecond,
		Producer: ProducerOptions{SendTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxT(t, 30*time.Second)
	if _, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	cl.brokers[1].Stop()
	zktest.Eventually(t, 5*time.Second, func() bool {
		_, err := a.Version(ctx, addr)
		return err != nil
	}, "broker down")
	_, err = p.Send(ctx, &Message{Topic: "orders", Body: []byte("down")})
	if err == nil || !IsRetriable(err) {
		t.Fatalf("send to a stopped broker: %v", err)
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send to a down broker waited for a deadline instead of failing fast: %v", err)
	}
	cl.start(1, func(o *brokertest.Options) {
		o.Dir = dir
		o.Server = func(so *broker.Options) { so.Addr = addr }
	})
	zktest.Eventually(t, 10*time.Second, func() bool {
		_, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("two")})
		return err == nil
	}, "producer reconnected")
	zktest.Eventually(t, 10*time.Second, func() bool {
		max, err := a.MaxOffset(ctx, addr, "orders", 0)
		return err == nil && max >= 2
	}, "admin reconnected; both messages stored")
}

// Server.Shutdown must not wait out its context while a client keeps
// sending: the reader re-arms its idle deadline on every read, so it must
// check the shutdown flag after doing so (broker/conn.go readLoop).
func TestBrokerShutdownWithBusyClient(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"orders": 1}, Logger: testLogger()})
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	go io.Copy(io.Discard, nc)
	go func() { // a client that never pauses: the broker's Read always has data
		req := []byte(strings.Repeat("version 1\r\n", 2000))
		for {
			if _, err := nc.Write(req); err != nil {
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	// Shutdown returns the context's error when it had to wait it out and
	// cut the connections: nil means it finished by itself (no clock).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Server.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown waited out its context with a busy client: %v", err)
	}
}

// ZooKeeper goes away for a while: sends and consumption go on (routes and
// assignments are kept, brokers do not need ZooKeeper to serve), commits
// resume when it is back.
func TestZooKeeperOutage(t *testing.T) {
	z := zktest.StartZooKeeper(t)
	cl := &cluster{t: t, zk: z.Addr() + "/outage", brokers: map[int]*brokertest.Broker{}, topics: map[string]int{"orders": 2}}
	cl.start(1)
	p := cl.producer()
	col := newCollector()
	c := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c); return n == 2 }, "assigned")
	sendN(t, p, "orders", "a", 10)
	col.waitDistinct(t, 10, 10*time.Second)

	z.Stop(t)
	sendN(t, p, "orders", "b", 10)
	col.waitDistinct(t, 20, 10*time.Second)
	z.Start(t)

	sum := func() int64 {
		var n int64
		for _, o := range cl.committed("g", "orders") {
			n += o.Offset
		}
		return n
	}
	zktest.Eventually(t, 20*time.Second, func() bool { return sum() == 20 }, "offsets committed after the outage (%d)", sum())
	sendN(t, p, "orders", "c", 10)
	col.waitDistinct(t, 30, 10*time.Second)
	if col.count() != 30 {
		t.Fatalf("%d deliveries of 30 messages", col.count())
	}
}

// Keyed (ordered) sends are never moved to another partition: when their
// partition's broker is gone they fail, while unkeyed sends go elsewhere.
func TestOrderedSendsNotRetried(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1, 2)
	p := cl.producer(func(c *Config) { c.Producer.Selector = HashByKey() })
	ctx := ctxT(t, 30*time.Second)
	keyOn := map[int]string{}
	for i := 0; len(keyOn) < 2; i++ {
		k := fmt.Sprintf("key-%d", i)
		r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Keys: []string{k}})
		if err != nil {
			t.Fatal(err)
		}
		keyOn[r.Partition.BrokerID] = k
	}
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = cl.brokers[2].Server.Shutdown(sctx) // gone, but still registered
	cancel()
	zktest.Eventually(t, 5*time.Second, func() bool {
		_, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Keys: []string{keyOn[2]}})
		return err != nil && IsRetriable(err)
	}, "a keyed send to the dead broker fails")
	for i := 0; i < 10; i++ {
		if r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Keys: []string{keyOn[1]}}); err != nil || r.Partition.BrokerID != 1 {
			t.Fatalf("keyed send to the live broker: %+v %v", r, err)
		}
		if r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x")}); err != nil || r.Partition.BrokerID != 1 {
			t.Fatalf("unkeyed send: %+v %v", r, err)
		}
	}
}
