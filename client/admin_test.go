package client

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// The building blocks the CLI uses: fetch, min/max offsets, seek by time,
// query by id and key, stats, version.
func TestAdmin(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	addr := cl.brokers[1].Addr
	p := cl.producer()
	ctx := ctxT(t, 30*time.Second)
	var results []SendResult
	var mid time.Time
	for i := 0; i < 10; i++ {
		if i == 5 {
			time.Sleep(20 * time.Millisecond)
			mid = time.Now()
			time.Sleep(20 * time.Millisecond)
		}
		r, err := p.SendToPartition(ctx, &Message{Topic: "orders", Body: []byte{'0' + byte(i)}, Tag: "t", Keys: []string{"order-" + string(rune('a'+i%2))}}, Partition{BrokerID: 1, Partition: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition != (Partition{BrokerID: 1, Partition: 1}) || r.Offset != int64(i) {
			t.Fatalf("send %d: %+v", i, r)
		}
		results = append(results, r)
	}
	a, err := NewAdmin(cl.config())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	res, err := a.Fetch(ctx, addr, "orders", 1, 3, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 7 || res.NextOffset != 10 || res.Moved || string(res.Messages[0].Body) != "3" || res.Messages[0].Tag != "t" {
		t.Fatalf("fetch: %+v", res)
	}
	if res, err = a.Fetch(ctx, addr, "orders", 1, 10, 1<<20); err != nil || len(res.Messages) != 0 || res.NextOffset != 10 || res.Moved {
		t.Fatalf("fetch at the end: %+v %v", res, err)
	}
	if res, err = a.Fetch(ctx, addr, "orders", 1, 99, 1<<20); err != nil || !res.Moved || res.NextOffset != 10 {
		t.Fatalf("fetch beyond the end: %+v %v", res, err)
	}
	if res, err = a.FetchWith(ctx, addr, FetchRequest{Topic: "orders", Partition: 1, Offset: 0, MaxBytes: 1}); err != nil || len(res.Messages) != 1 {
		t.Fatalf("maxBytes 1 still returns one message: %+v %v", res, err)
	}
	if lo, err := a.MinOffset(ctx, addr, "orders", 1); err != nil || lo != 0 {
		t.Fatalf("min %d %v", lo, err)
	}
	if hi, err := a.MaxOffset(ctx, addr, "orders", 1); err != nil || hi != 10 {
		t.Fatalf("max %d %v", hi, err)
	}
	if hi, err := a.MaxOffset(ctx, addr, "orders", 0); err != nil || hi != 0 {
		t.Fatalf("max of an empty partition %d %v", hi, err)
	}
	if off, err := a.OffsetForTime(ctx, addr, "orders", 1, mid); err != nil || off != 5 {
		t.Fatalf("offset for time %d %v", off, err)
	}
	if off, err := a.OffsetForTime(ctx, addr, "orders", 1, time.Now().Add(time.Hour)); err != nil || off != 10 {
		t.Fatalf("offset for a future time %d %v", off, err)
	}
	m, err := a.QueryID(ctx, "", results[7].MsgID) // broker found through ZooKeeper
	if err != nil || string(m.Body) != "7" || m.Offset != 7 || m.MsgID != results[7].MsgID {
		t.Fatalf("query id: %+v %v", m, err)
	}
	var be *BrokerError
	if _, err := a.QueryID(ctx, addr, results[9].MsgID+1000); !errors.As(err, &be) || be.Code != protocol.StatusNotFound {
		t.Fatalf("query of an unknown id: %v", err)
	}
	ms, err := a.QueryKey(ctx, addr, "orders", "order-b", 100)
	if err != nil || len(ms) != 5 {
		t.Fatalf("query key: %d messages, %v", len(ms), err)
	}
	for _, m := range ms {
		if m.Keys[0] != "order-b" {
			t.Fatalf("query key returned %v", m.Keys)
		}
	}
	if ms, err := a.QueryKey(ctx, addr, "orders", "nobody", 10); err != nil || len(ms) != 0 {
		t.Fatalf("query key without match: %v %v", ms, err)
	}
	stats, err := a.Stats(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range stats {
		found = found || (s.Key == "broker_id" && s.Value == "1")
	}
	if !found {
		t.Fatalf("stats without broker_id 1: %v", stats)
	}
	if v, err := a.Version(ctx, addr); err != nil || v == "" {
		t.Fatalf("version %q %v", v, err)
	}
	if got, err := a.BrokerAddr(ctx, 1); err != nil || got != addr {
		t.Fatalf("broker addr %q %v", got, err)
	}
	if _, err := a.Fetch(ctx, addr, "nosuchtopic", 0, 0, 100); !errors.As(err, &be) && err != nil {
		t.Fatalf("fetch of an unknown topic: %v", err)
	}
}

// Without ZooKeeper: a producer over a broker list (the broker picks the
// partition), SendToPartition, and an Admin by address.
func TestDirectMode(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{BrokerID: 5, Topics: map[string]int{"logs": 3}, Logger: testLogger()})
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxT(t, 20*time.Second)
	for i := 0; i < 9; i++ {
		r, err := p.Send(ctx, &Message{Topic: "logs", Body: []byte("line"), Tag: "app"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition.BrokerID != 5 || r.Partition.Partition < 0 || r.Partition.Partition > 2 {
			t.Fatalf("result %+v", r)
		}
	}
	r, err := p.SendToPartition(ctx, &Message{Topic: "logs", Body: []byte("two")}, Partition{BrokerID: 5, Partition: 2})
	if err != nil || r.Partition.Partition != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var total int64
	for part := 0; part < 3; part++ {
		n, err := a.MaxOffset(ctx, b.Addr, "logs", part)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 10 {
		t.Fatalf("%d messages stored, want 10", total)
	}
	if _, err := NewConsumer(Config{Brokers: []string{b.Addr}}, "g"); err == nil {
		t.Fatal("a consumer without ZooKeeper")
	}
}

// Per-call deadlines: a timed-out call leaves the pending table, its late
// reply is dropped and the connection goes on; async sends block on a full
// window instead of failing.
func TestCallDeadlinesAndWindow(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 1}, Logger: testLogger()})
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := ctxT(t, 20*time.Second)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = a.FetchWith(short, b.Addr, FetchRequest{Topic: "q", MaxWait: 800 * time.Millisecond})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("long poll past its context: %v", err)
	}
	c := a.pool.get(b.Addr)
	pending := func() int { c.mu.Lock(); defer c.mu.Unlock(); return c.pending.len() }
	if n := pending(); n != 0 {
		t.Fatalf("%d calls still pending after the timeout", n)
	}
	if _, err := a.Version(ctx, b.Addr); err != nil {
		t.Fatal(err)
	}
	// The sweeper enforces deadlines of calls nobody waits on with a context.
	cl, err := c.do(context.Background(), kindGet, 100*time.Millisecond, func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, "q", "g", 0, 0, 1024, op, 800, "")
	})
	if !errors.Is(err, ErrTimeout) || cl != nil {
		t.Fatalf("call past its deadline: %v", err)
	}
	time.Sleep(900 * time.Millisecond) // both late 404s arrive and are dropped
	if _, err := a.Version(ctx, b.Addr); err != nil || !c.healthy() {
		t.Fatalf("connection after late replies: %v", err)
	}

	// Opaques wrap around int32 and skip one still pending.
	c.mu.Lock()
	c.nextOp = math.MaxInt32 - 3
	if !c.window.tryAcquire() {
		t.Fatal("window full")
	}
	stuck := &call{opaque: 1, done: make(chan struct{}, 1)}
	c.pending.put(stuck)
	c.mu.Unlock()
	for i := 0; i < 6; i++ {
		if _, err := a.Version(ctx, b.Addr); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	next := c.nextOp
	c.pending.take(1)
	c.mu.Unlock()
	c.window.release(1)
	if next != 5 { // MaxInt32-2, MaxInt32-1, (MaxInt32 and pending 1 skipped) 2, 3, 4, 5
		t.Fatalf("next opaque %d after wrapping", next)
	}

	// A window of 4: 500 async sends all complete.
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, MaxInFlight: 4, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	var fails atomic.Int64
	for i := 0; i < 500; i++ {
		wg.Add(1)
		p.SendAsync(ctx, &Message{Topic: "q", Body: []byte("x")}, func(_ SendResult, err error) {
			if err != nil {
				fails.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if fails.Load() != 0 {
		t.Fatalf("%d sends failed", fails.Load())
	}
}

// A broker that accepts but never answers: heartbeats time out, the
// connection is closed and dialled again.
func TestHeartbeatTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var conns sync.WaitGroup
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns.Add(1)
			go func() {
				defer conns.Done()
				io.Copy(io.Discard, nc) // read, never answer
				nc.Close()
			}()
		}
	}()
	defer func() { ln.Close(); <-acceptDone; conns.Wait() }()
	a, err := NewAdmin(Config{Logger: testLogger(), HeartbeatInterval: 100 * time.Millisecond, RequestTimeout: 200 * time.Millisecond, ReconnectBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = a.Version(context.Background(), ln.Addr().String())
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !IsRetriable(err) {
		t.Fatalf("version from a silent broker: %v", err)
	}
	if !strings.Contains(err.Error(), ln.Addr().String()) { // which broker did not answer
		t.Fatalf("the timeout does not name the broker: %v", err)
	}
	zktest.Eventually(t, 5*time.Second, func() bool { return accepted.Load() >= 2 }, "reconnected after a heartbeat timeout")
}

func TestBrokerErrorText(t *testing.T) {
	e := &BrokerError{Addr: "h:1", Code: 500, Message: "boom"}
	if !strings.Contains(e.Error(), "500 InternalServerError: boom") || !IsRetriable(e) {
		t.Fatal(e.Error())
	}
	if IsRetriable(&BrokerError{Code: 400}) || IsRetriable(ErrClosed) || !IsRetriable(&ConnError{Addr: "x", Err: io.EOF}) {
		t.Fatal("retriable classification")
	}
}
