package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many handler goroutines on one partition (found through ZooKeeper): every
// message handled once while handlers succeed; a failing handler's message
// comes back with the next attempt after its backoff.
func TestPushConsumerSharesOnePartition(t *testing.T) {
	cl := newCluster(t, map[string]int{"push": 1}, 0)
	p := cl.producer()
	const n = 300
	for i := 0; i < n; i++ {
		if _, err := p.Send(context.Background(), &Message{Topic: "push", Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string][]int{}
	var running, peak int
	c, err := NewPushConsumer(cl.config(), "g", PushOptions{Concurrency: 32, Invisible: time.Minute, BatchSize: 8,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe("push", "*", func(ctx context.Context, m *Message) error {
		mu.Lock()
		seen[string(m.Body)] = append(seen[string(m.Body)], m.Attempt)
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		if string(m.Body) == "m7" && m.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n && len(seen["m7"]) == 2
	})
	waitFor(t, "acks", func() bool { return c.Stats().Acked.Load() == n })
	mu.Lock()
	defer mu.Unlock()
	for k, a := range seen {
		if k == "m7" {
			if len(a) != 2 || a[0] != 1 || a[1] != 2 {
				t.Fatalf("m7 attempts %v", a)
			}
			continue
		}
		if len(a) != 1 || a[0] != 1 {
			t.Fatalf("%s attempts %v", k, a)
		}
	}
	if peak < 2 {
		t.Logf("handlers never overlapped (peak %d): a loaded machine", peak)
	}
}

// A slow handler keeps its message: the lock is extended while it runs,
// so it is not delivered again; Close waits for it and leaks nothing.
func TestPushConsumerExtendsSlowHandler(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"push": 1}})
	b.Dial().Put("push", 0, "slow", 1)
	cfg := Config{Brokers: []string{b.Addr}, Logger: testLogger()}
	c, err := NewPushConsumer(cfg, "g", PushOptions{Concurrency: 4, Invisible: 2 * time.Second, MaxWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []int
	done := make(chan struct{})
	c.Subscribe("push", "", func(ctx context.Context, m *Message) error {
		mu.Lock()
		calls = append(calls, m.Attempt)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			time.Sleep(5 * time.Second)
			close(done)
		}
		return nil
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
	waitFor(t, "ack", func() bool { return c.Stats().Acked.Load() >= 1 })
	if c.Stats().Extended.Load() == 0 {
		t.Fatal("no extension sent")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// an extension can arrive late on a loaded machine; then the message
	// is delivered a second time — but never to this same handler while it
	// still runs without the broker having seen the lock expire
	if len(calls) > 1 {
		t.Logf("delivered %d times (extension late under load): %v", len(calls), calls)
	}
	// the acknowledgement went through: another member gets nothing
	c2, _ := NewPushConsumer(cfg, "g", PushOptions{MaxWait: 300 * time.Millisecond})
	got := make(chan *Message, 1)
	c2.Subscribe("push", "", func(ctx context.Context, m *Message) error { got <- m; return nil })
	c2.Start(context.Background())
	time.Sleep(time.Second)
	c2.Close()
	select {
	case m := <-got:
		if len(calls) == 1 {
			t.Fatalf("acknowledged message delivered again: %v", m)
		}
	default:
	}
}

// A fetcher sends no pop once Close began, even with free slots: a pop
// sent then takes the messages the closing handlers just released
// (attempt + 1) to release them again, round after round, until
// maxDeliveries sends them to the dead-letter queue. Two ways it did:
// select picks at random between a free slot and the fetcher's cancelled
// context (half of the time), and while Close is inside c.cancel() the
// consumer's context is cancelled (the handlers release) but the fetcher's,
// its child, not yet. Deterministic: fetchLoop is called directly with
// every slot free, in both states.
func TestPushConsumerNoPopAfterClose(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"push": 1}})
	b.Dial().Put("push", 0, "m", 1)
	c, err := NewPushConsumer(Config{Brokers: []string{b.Addr}, Logger: testLogger()}, "g",
		PushOptions{Concurrency: 4, MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe("push", "*", func(context.Context, *Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	conn := c.pool.get(b.Addr)
	ctr := b.PopService().Counters()
	deliveries := func() int64 { return ctr.Delivered.Load() + ctr.Redelivered.Load() }
	check := func(what string) {
		t.Helper()
		if n := deliveries(); n != 0 {
			t.Fatalf("%s: the fetcher popped (%d deliveries)", what, n)
		}
		if len(c.slots) != c.opts.Concurrency {
			t.Fatalf("%s: %d of %d slots free after fetchLoop returned", what, len(c.slots), c.opts.Concurrency)
		}
	}

	// the fetcher's context cancelled, as Close leaves it
	fctx, cancel := context.WithCancel(c.ctx)
	c.cancel()
	for i := 0; i < 64; i++ {
		c.fetchLoop(fctx, c.subs["push"], conn)
		check(fmt.Sprintf("cancelled context, round %d", i))
	}
	cancel()

	// the consumer's context cancelled, the fetcher's not yet
	live, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fetchLoop(live, c.subs["push"], conn)
	}()
	waitFor(t, "the fetcher to return or pop", func() bool {
		select {
		case <-done:
			return true
		default:
			return deliveries() > 0
		}
	})
	stop()
	<-done
	check("consumer's context cancelled")
}

// A broker that leaves the cluster loses its connection in a push
// consumer, as in a Consumer: before, only its fetcher stopped, and the
// connection stayed in the pool re-dialling the departed address (every
// 5 s, with its goroutines) for the consumer's life, one more for each
// broker restarted on a new address.
func TestPushConsumerDropsDepartedBroker(t *testing.T) {
	cl := newCluster(t, map[string]int{"push": 1}, 1, 2)
	c, err := NewPushConsumer(cl.config(), "g", PushOptions{Concurrency: 4, MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe("push", "*", func(context.Context, *Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pooled := func() map[string]bool {
		c.pool.mu.Lock()
		defer c.pool.mu.Unlock()
		m := map[string]bool{}
		for a := range c.pool.conns {
			m[a] = true
		}
		return m
	}
	a1, a2 := cl.brokers[1].Addr, cl.brokers[2].Addr
	waitFor(t, "connections to both brokers", func() bool { m := pooled(); return m[a1] && m[a2] })
	cl.brokers[2].Stop()
	waitFor(t, "the departed broker's connection closed", func() bool { m := pooled(); return m[a1] && !m[a2] })

	// Messages of the remaining broker are still handled and acknowledged.
	p := cl.producer()
	if _, err := p.SendToPartition(ctxT(t, 10*time.Second), &Message{Topic: "push", Body: []byte("x")}, Partition{BrokerID: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ack", func() bool { return c.Stats().Acked.Load() == 1 })
}

// A Backoff beyond what `release` takes (0 to 12 hours) is clamped into it:
// the broker refused the release (400) and the message came back only when
// its lock ended, whatever Backoff said.
func TestReleaseDelayClamped(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{-time.Second, 0}, {0, 0}, {time.Second, time.Second}, {12 * time.Hour, 12 * time.Hour}, {48 * time.Hour, 12 * time.Hour},
	} {
		if got := releaseDelay(c.in); got != c.want {
			t.Errorf("releaseDelay(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if maxReleaseDelay.Milliseconds() != protocol.PopMaxInvisible { // what the broker's parser takes
		t.Fatalf("maxReleaseDelay %v, the broker's bound %d ms", maxReleaseDelay, protocol.PopMaxInvisible)
	}
}
