package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func sendN(t testing.TB, p *Producer, topic, prefix string, n int) []SendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []SendResult
	for i := 0; i < n; i++ {
		r, err := p.Send(ctx, &Message{Topic: topic, Body: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// Broadcast: every consumer of the group receives every message; offsets
// live in a local file per consumer, and a restarted consumer resumes from
// it.
func TestBroadcast(t *testing.T) {
	cl := newCluster(t, map[string]int{"news": 3}, 1, 2)
	p := cl.producer()
	dir1, dir2 := t.TempDir(), t.TempDir()
	bc := func(dir string) func(*Config) {
		return func(c *Config) { c.Consumer.Broadcast = true; c.Consumer.OffsetDir = dir }
	}
	col1, col2 := newCollector(), newCollector()
	c1 := cl.consumer("readers", "news", "*", col1.handler, bc(dir1))
	c2 := cl.consumer("readers", "news", "*", col2.handler, bc(dir2))
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1, c2); return n == 12 }, "each consumer reads all 6 partitions")
	sendN(t, p, "news", "a", 30)
	col1.waitDistinct(t, 30, 10*time.Second)
	col2.waitDistinct(t, 30, 10*time.Second)

	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir2, "readers.json")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no offset file: %v", err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir2, "*.tmp-*")); len(tmp) > 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	fs, err := NewFileOffsetStore(dir2, "readers")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, pt := range []Partition{{BrokerID: 1, Partition: 0}, {BrokerID: 1, Partition: 1}, {BrokerID: 1, Partition: 2}, {BrokerID: 2, Partition: 0}, {BrokerID: 2, Partition: 1}, {BrokerID: 2, Partition: 2}} {
		o, ok, _ := fs.Load(context.Background(), "news", pt)
		if !ok {
			t.Fatalf("no offset for %s in %s", pt, file)
		}
		sum += o.Offset
	}
	if sum != 30 {
		t.Fatalf("offsets in the file sum to %d, want 30", sum)
	}
	// An anonymous consumer: broadcast with offsets in memory.
	anon := newCollector()
	ca := cl.consumer("anon-1", "news", "*", anon.handler, func(c *Config) {
		c.Consumer.Broadcast, c.Consumer.OffsetStore, c.Consumer.From = true, NewMemoryOffsetStore(), FromEarliest
	})
	anon.waitDistinct(t, 30, 10*time.Second)
	ca.Close()
	if got := cl.committed("readers", "news"); len(got) != 0 {
		t.Fatalf("broadcast consumers committed to ZooKeeper: %v", got)
	}

	sendN(t, p, "news", "b", 12)
	col3 := newCollector()
	c3 := cl.consumer("readers", "news", "*", col3.handler, bc(dir2))
	col3.waitDistinct(t, 12, 10*time.Second)
	col1.waitDistinct(t, 42, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	for _, m := range col3.snapshot() {
		if m.Body[0] != 'b' {
			t.Fatalf("restarted consumer got an old message again: %s", m.Body)
		}
	}
	if col3.count() != 12 || col1.count() != 42 {
		t.Fatalf("deliveries: restarted %d (want 12), other %d (want 42)", col3.count(), col1.count())
	}
	c3.Close()
	c1.Close()
}

// Start positions of a new group: earliest (the default), latest, a time.
func TestStartPositions(t *testing.T) {
	cl := newCluster(t, map[string]int{"events": 2}, 1)
	p := cl.producer()
	sendN(t, p, "events", "a", 10)
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	sendN(t, p, "events", "b", 10)

	early := newCollector()
	cl.consumer("g-early", "events", "*", early.handler)
	early.waitDistinct(t, 20, 10*time.Second)

	latest := newCollector()
	cLatest := cl.consumer("g-latest", "events", "*", latest.handler, func(c *Config) { c.Consumer.From = FromLatest })
	atTime := newCollector()
	cTime := cl.consumer("g-time", "events", "*", atTime.handler, func(c *Config) { c.Consumer.From = FromTime(mid) })
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(cLatest, cTime); return n == 4 }, "assigned")
	// The start position is committed at once: a latest group that restarts
	// before consuming anything does not skip what was sent meanwhile.
	zktest.Eventually(t, 5*time.Second, func() bool { return len(cl.committed("g-latest", "events")) == 2 }, "start offsets committed")
	sendN(t, p, "events", "c", 6)
	latest.waitDistinct(t, 6, 10*time.Second)
	atTime.waitDistinct(t, 16, 10*time.Second)
	early.waitDistinct(t, 26, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	for _, m := range latest.snapshot() {
		if m.Body[0] != 'c' {
			t.Fatalf("FromLatest delivered %s", m.Body)
		}
	}
	for _, m := range atTime.snapshot() {
		if m.Body[0] == 'a' {
			t.Fatalf("FromTime delivered %s, sent before the time", m.Body)
		}
	}
	if latest.count() != 6 || atTime.count() != 16 || early.count() != 26 {
		t.Fatalf("latest %d (6), time %d (16), earliest %d (26)", latest.count(), atTime.count(), early.count())
	}
	// An existing group ignores From: it resumes from its committed offsets.
	cLatest.Close()
	sendN(t, p, "events", "d", 4)
	again := newCollector()
	cl.consumer("g-latest", "events", "*", again.handler, func(c *Config) { c.Consumer.From = FromLatest })
	again.waitDistinct(t, 4, 10*time.Second)
}

// Concurrent mode: while one message stalls in its handler, the others go
// on, and the committed offset never passes the stalled one.
func TestConcurrentStall(t *testing.T) {
	cl := newCluster(t, map[string]int{"jobs": 1}, 1)
	p := cl.producer()
	sendN(t, p, "jobs", "j", 50)
	release := make(chan struct{})
	var handled atomic.Int64
	var parallel, maxParallel atomic.Int32
	h := func(ctx context.Context, m *Message) error {
		n := parallel.Add(1)
		defer parallel.Add(-1)
		for {
			old := maxParallel.Load()
			if n <= old || maxParallel.CompareAndSwap(old, n) {
				break
			}
		}
		if m.Offset == 5 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		time.Sleep(time.Millisecond)
		handled.Add(1)
		return nil
	}
	c := cl.consumer("workers", "jobs", "*", h, func(c *Config) { c.Consumer.Concurrency = 4 })
	zktest.Eventually(t, 10*time.Second, func() bool { return handled.Load() == 49 }, "49 messages handled around the stalled one")
	if err := c.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o := cl.committed("workers", "jobs")[Partition{BrokerID: 1, Partition: 0}]; o.Offset != 5 {
		t.Fatalf("committed %v while offset 5 is in its handler", o)
	}
	close(release)
	zktest.Eventually(t, 10*time.Second, func() bool {
		c.Commit(context.Background())
		return cl.committed("workers", "jobs")[Partition{BrokerID: 1, Partition: 0}].Offset == 50
	}, "committed to the end once it finished")
	if maxParallel.Load() < 2 {
		t.Fatalf("at most %d handlers ran at once with Concurrency 4", maxParallel.Load())
	}
}

// A handler error redelivers the message in place with a growing delay; in
// ordered mode the partition waits meanwhile.
func TestHandlerErrorRedelivery(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1}, 1)
	p := cl.producer()
	sendN(t, p, "pay", "m", 3)
	var mu sync.Mutex
	var attempts []time.Time
	var order []int64
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Offset == 1 && len(attempts) < 4 {
			attempts = append(attempts, time.Now())
			if len(attempts) < 4 {
				return errors.New("downstream unavailable")
			}
		}
		order = append(order, m.Offset)
		return nil
	}
	policy := &BackoffRetry{Initial: 40 * time.Millisecond, Max: time.Second}
	cl.consumer("g", "pay", "*", h, func(c *Config) { c.Consumer.RetryPolicy = policy })
	zktest.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 3 }, "all handled")
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[0 1 2]" {
		t.Fatalf("order %v", order)
	}
	// Each redelivery waits at least the policy's delay (40, 80, 160 ms).
	// No upper bound: a loaded machine may stretch any wait; the policy's
	// exact delays are checked by TestBackoffDelay, without a clock.
	for i, want := range []time.Duration{40, 80, 160} {
		if got := attempts[i+1].Sub(attempts[i]); got < want*time.Millisecond {
			t.Fatalf("delay before attempt %d: %s, want at least %dms (all: %v)", i+2, got, want, attempts)
		}
	}
}

// A panicking handler is an error (redelivered), and a policy that gives up
// lets the partition move on.
func TestRetryPolicyDone(t *testing.T) {
	cl := newCluster(t, map[string]int{"pay": 1}, 1)
	p := cl.producer()
	sendN(t, p, "pay", "m", 3)
	var seen sync.Map
	var calls atomic.Int64
	h := func(ctx context.Context, m *Message) error {
		calls.Add(1)
		seen.Store(m.Offset, true)
		if m.Offset == 0 {
			panic("boom")
		}
		return nil
	}
	var failures atomic.Int64
	policy := RetryPolicyFunc(func(ctx context.Context, m *Message, attempt int, err error) RetryDecision {
		failures.Add(1)
		var hp *HandlerPanic
		if !errors.As(err, &hp) {
			t.Errorf("not a HandlerPanic: %v", err)
		}
		return RetryDecision{Delay: 10 * time.Millisecond, Done: attempt >= 2}
	})
	cl.consumer("g", "pay", "*", h, func(c *Config) { c.Consumer.RetryPolicy = policy })
	zktest.Eventually(t, 10*time.Second, func() bool { _, ok := seen.Load(int64(2)); return ok }, "moved past the failing message")
	if failures.Load() != 2 || calls.Load() != 4 {
		t.Fatalf("%d failures, %d calls", failures.Load(), calls.Load())
	}
	zktest.Eventually(t, 5*time.Second, func() bool { return cl.committed("g", "pay")[Partition{BrokerID: 1, Partition: 0}].Offset == 3 }, "committed past it")
}

// Session expiry: owner nodes are gone; the consumer re-registers, claims
// its partitions again and goes on consuming.
func TestSessionExpiry(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	p := cl.producer()
	col := newCollector()
	c := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c); return n == 2 }, "assigned")
	sendN(t, p, "orders", "a", 10)
	col.waitDistinct(t, 10, 10*time.Second)
	zc := cl.zkClient()
	defer zc.Close()
	zktest.ExpireSession(t, c.zk)
	// Owners come back with the new session.
	zktest.Eventually(t, 15*time.Second, func() bool {
		for _, pt := range []Partition{{BrokerID: 1, Partition: 0}, {BrokerID: 1, Partition: 1}} {
			owner, err := zc.PartitionOwner(context.Background(), "g", "orders", pt)
			if err != nil || owner != "g_"+c.ID() {
				return false
			}
		}
		n, _ := totalAssigned(c)
		return n == 2
	}, "owner nodes re-created after the expiry")
	sendN(t, p, "orders", "b", 10)
	col.waitDistinct(t, 20, 10*time.Second)
}

// Rebalancing between live consumers hands partitions over without
// duplicates: the old owner commits before it releases.
func TestRebalanceNoDuplicates(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 4}, 1)
	p := cl.producer()
	col := newCollector()
	var stop atomic.Bool
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if _, err := p.Send(context.Background(), &Message{Topic: "orders", Body: []byte("x")}); err == nil {
				sent.Add(1)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	c1 := cl.consumer("g", "orders", "*", col.handler)
	time.Sleep(200 * time.Millisecond)
	c2 := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { _, e := totalAssigned(c1, c2); return e[0] == 2 && e[1] == 2 }, "balanced 2/2")
	time.Sleep(200 * time.Millisecond)
	c3 := cl.consumer("g", "orders", "*", col.handler)
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c1, c2, c3); return n == 4 }, "balanced over 3")
	time.Sleep(200 * time.Millisecond)
	c1.Close()
	zktest.Eventually(t, 10*time.Second, func() bool { n, _ := totalAssigned(c2, c3); return n == 4 }, "balanced over 2")
	stop.Store(true)
	<-done
	col.waitDistinct(t, int(sent.Load()), 10*time.Second)
	if col.count() != col.distinct() {
		t.Fatalf("%d deliveries of %d messages: a graceful rebalance must not duplicate", col.count(), col.distinct())
	}
}
