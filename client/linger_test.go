package client

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// silentBroker accepts connections and reads everything, answering nothing:
// a broker that is slow (stalled disk, GC pause) but reachable. drop closes
// the connections accepted so far.
func silentBroker(t *testing.T) (addr string, drop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	drop = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
		conns = nil
	}
	t.Cleanup(func() { ln.Close(); drop() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			go io.Copy(io.Discard, nc)
		}
	}()
	return ln.Addr().String(), drop
}

// Under Linger, SendAsync waits for room (bounded by its ctx) when the
// connection's lingering messages are at their bound, and the message fails
// with the context's error: it does not block until the window frees.
func TestLingerSendAsyncHonoursCtx(t *testing.T) {
	addr, drop := silentBroker(t)
	// A SendTimeout far beyond the test's deadlines: the window does not
	// free while the test waits.
	cfg := Config{Brokers: []string{addr}, Logger: testLogger(), MaxInFlight: 1, HeartbeatInterval: time.Hour,
		Producer: ProducerOptions{Linger: time.Hour, BatchSize: 1, SendTimeout: time.Minute, SendRetries: -1}}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer drop()                                                                    // fails the unanswered send: Close need not wait for it
	p.SendAsync(context.Background(), &Message{Topic: "q", Body: []byte("1")}, nil) // the only room, never answered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		p.SendAsync(ctx, &Message{Topic: "q", Body: []byte("2")}, func(_ SendResult, err error) { errc <- err })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("SendAsync did not return after its ctx ended (window full, Linger on)")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SendAsync's callback got %v, want the context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback of the SendAsync whose ctx ended was not called")
	}
}

// Under Linger, a slow broker does not make the producer hold an unbounded
// number of messages or goroutines: SendAsync waits (bounded by ctx) once a
// connection holds MaxInFlight × BatchSize lingering messages, and due
// batches wait in their partition's queue, not in a goroutine each.
func TestLingerBoundedWhenBrokerSlow(t *testing.T) {
	addr, _ := silentBroker(t)
	cfg := Config{Brokers: []string{addr}, Logger: testLogger(), MaxInFlight: 1, HeartbeatInterval: time.Hour,
		Producer: ProducerOptions{Linger: time.Millisecond, BatchSize: 10, SendTimeout: 3 * time.Second, SendRetries: -1}}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	g0 := runtime.NumGoroutine()
	var pending atomic.Int64
	deadline := time.Now().Add(500 * time.Millisecond)
	sent, maxG := 0, 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		pending.Add(1)
		p.SendAsync(ctx, &Message{Topic: "q", Body: []byte("m")}, func(SendResult, error) { pending.Add(-1) })
		cancel()
		sent++
		maxG = max(maxG, runtime.NumGoroutine()-g0)
		time.Sleep(100 * time.Microsecond)
	}
	n := pending.Load()
	t.Logf("sent %d, still held by the producer %d, goroutines at most +%d", sent, n, maxG)
	// Bound: MaxInFlight × BatchSize messages.
	if limit := int64(10); n > limit {
		t.Fatalf("the producer holds %d unsent messages with MaxInFlight 1, BatchSize 10; want ≤ %d", n, limit)
	}
	// The connection's reader and writer, the partition's sender, a few
	// timers firing: nowhere near one per due batch.
	if limit := 30; maxG > limit {
		t.Fatalf("the producer ran up to %d more goroutines; want ≤ %d", maxG, limit)
	}
}

// Ordered sends under Linger keep their order within the partition: the
// batches of one partition are sent one after the other in the order they
// were closed, whether they filled up on a caller's goroutine or came due
// by their timer, also while they wait for window slots.
func TestLingerKeepsPartitionOrder(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 1}, Logger: testLogger()})
	cfg := Config{Brokers: []string{b.Addr}, Logger: testLogger(), MaxInFlight: 1,
		Producer: ProducerOptions{Linger: time.Millisecond, BatchSize: 3,
			Selector: OrderedSelector(func(*Message, []Partition) int { return 0 })}}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	var failed atomic.Int64
	for i := 0; i < n; i++ {
		p.SendAsync(context.Background(), &Message{Topic: "q", Body: []byte(strconv.Itoa(i))}, func(_ SendResult, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
		if i%7 == 0 {
			time.Sleep(50 * time.Microsecond) // let some batches come due by their timer
		}
	}
	p.Close()
	if failed.Load() != 0 {
		t.Fatalf("%d sends failed", failed.Load())
	}
	a, _ := NewAdmin(Config{Logger: testLogger()})
	defer a.Close()
	var got []int
	for off := int64(0); len(got) < n; {
		res, err := a.Fetch(context.Background(), b.Addr, "q", 0, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			break
		}
		for _, m := range res.Messages {
			v, _ := strconv.Atoi(string(m.Body))
			got = append(got, v)
		}
		off = res.NextOffset
	}
	if len(got) != n {
		t.Fatalf("stored %d of %d", len(got), n)
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("send order inverted in the partition at offset %d: %v", i, got[max(0, i-4):min(len(got), i+4)])
		}
	}
}
