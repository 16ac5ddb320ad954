package broker_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// The test brokers' maxMessageSize (brokertest.INI).
const testMaxMessage = 524288

// stats reads the broker's system stats (missing keys are absent).
func stats(t *testing.T, b *brokertest.Broker) map[string]int64 {
	t.Helper()
	c := b.Dial()
	defer c.Close()
	c.Send("stats 1\r\n")
	r := c.Reply()
	list, err := protocol.ParseStats(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, s := range list {
		if v, err := strconv.ParseInt(s.Value, 10, 64); err == nil {
			m[s.Key] = v
		}
	}
	return m
}

// liveHeap is the heap in use after a full collection (the broker runs in
// this process).
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// stalledPut opens a connection that announces a put of n bytes and sends
// all but the last one, then stalls. The write runs in the background
// (the broker may stop reading); the connection is closed by cleanup.
func stalledPut(t *testing.T, addr string, payload []byte, opaque int, wg *sync.WaitGroup) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		hdr := fmt.Sprintf("put test 0 %d 0 %d\r\n", len(payload), opaque)
		if _, err := nc.Write([]byte(hdr)); err != nil {
			return
		}
		_, _ = nc.Write(payload[:len(payload)-1]) // returns when the test closes nc
	}()
	return nc
}

// Issue 11.4: 100 connections that announce a large put, send all but its
// last byte and stall hold no more than maxPendingPutBytes of broker memory
// (the others wait, unread), and the memory comes back once they close.
// Before the budget the broker held every connection's partial data (here
// ~50 MiB of live heap; 579 MiB for 100 × 4 MiB puts).
func TestStalledLargePutsAreBounded(t *testing.T) {
	const budget = 2 << 20
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) {
		o.MaxPendingPutBytes = budget
		o.PutDataTimeout = time.Hour // this test is about memory, not deadlines
		o.IdleTimeout = time.Hour
	}})
	base := liveHeap()
	payload := make([]byte, testMaxMessage)
	const conns = 100
	var wg sync.WaitGroup
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		ncs[i] = stalledPut(t, b.Addr, payload, i, &wg)
	}
	// The bound, with a generous margin for the test's own allocations and
	// the waiting connections' first reads.
	limit := int64(budget + 12<<20)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if grown := liveHeap() - base; grown > limit {
			t.Fatalf("broker heap grew by %d MiB with %d stalled puts; budget is %d MiB", grown>>20, conns, budget>>20)
		}
		st := stats(t, b)
		holders := st["put_buffer_bytes"] / testMaxMessage
		if _, ok := st["put_buffer_bytes"]; ok && holders+st["put_buffer_waiting"] == conns {
			if st["put_buffer_bytes"] > budget {
				t.Fatalf("put_buffer_bytes %d over the budget %d", st["put_buffer_bytes"], budget)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled puts not all accounted for: %v (heap +%d MiB)", st, (liveHeap()-base)>>20)
		}
		time.Sleep(20 * time.Millisecond)
	}
	grown := liveHeap() - base
	t.Logf("heap +%d KiB with %d stalled %d-byte puts (budget %d KiB)", grown>>10, conns, testMaxMessage, budget>>10)
	if grown > limit {
		t.Fatalf("broker heap grew by %d MiB; budget is %d MiB", grown>>20, budget>>20)
	}
	// The clients give up: every reservation comes back, the waiting
	// connections see EOF once they get room, and the memory is returned.
	for _, nc := range ncs {
		nc.Close()
	}
	wg.Wait()
	waitFor(t, func() bool {
		st := stats(t, b)
		return st["put_buffer_bytes"] == 0 && st["put_buffer_waiting"] == 0 && st["curr_connections"] == 1
	})
	waitFor(t, func() bool { return stats(t, b)["put_memory_returns"] >= 1 })
	waitFor(t, func() bool { return liveHeap()-base < 4<<20 })
	// And the broker still takes large puts.
	c := b.Dial()
	c.Put("test", 1, strings.Repeat("x", testMaxMessage), 7)
}

// A put whose data stops arriving is answered (400, with its opaque) and
// its connection closed after putDataTimeoutMs, long before idleTimeout.
func TestStalledPutTimesOut(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) {
		o.PutDataTimeout = 300 * time.Millisecond
		o.IdleTimeout = time.Hour
	}})
	c := b.Dial()
	c.Send("put test 0 1000 0 42\r\n" + strings.Repeat("x", 400))
	r, err := c.TryReply(60 * time.Second)
	if err != nil {
		t.Fatalf("no reply to a put stalled for longer than putDataTimeoutMs: %v", err)
	}
	if r.Code != 400 || r.Opaque != 42 || !strings.Contains(string(r.Body), "put data incomplete: 400 of 1000 bytes") {
		t.Fatalf("stalled put answered %+v %q", r, r.Body)
	}
	c.ExpectClosed(10 * time.Second)
	waitFor(t, func() bool { return stats(t, b)["put_buffer_bytes"] == 0 })
	if n := stats(t, b)["put_data_timeouts"]; n != 1 {
		t.Fatalf("put_data_timeouts = %d", n)
	}
	// The broker goes on serving (a put in pieces within the deadline is in
	// TestPutBudgetWaiterProceeds and TestPutBudgetBackpressure, whose
	// deadline a loaded machine cannot reach).
	b.Dial().Put("test", 0, "after", 1)
}

// A put that waits for budget (the broker does not read its connection) is
// read and acknowledged once the put holding the budget completes.
func TestPutBudgetWaiterProceeds(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) {
		o.MaxPendingPutBytes = testMaxMessage
		o.PutDataTimeout = time.Hour
	}})
	holder := b.Dial()
	holder.Send(fmt.Sprintf("put test 0 %d 0 1\r\n%s", testMaxMessage, strings.Repeat("x", 1000)))
	waitFor(t, func() bool { return stats(t, b)["put_buffer_bytes"] == testMaxMessage })
	waiter := b.Dial()
	waiter.Send(fmt.Sprintf("put test 1 %d 0 2\r\n%s", 1000, strings.Repeat("y", 10)))
	waitFor(t, func() bool { return stats(t, b)["put_buffer_waiting"] == 1 })
	waiter.Send(strings.Repeat("y", 990)) // unread until the waiter gets room
	holder.Send(strings.Repeat("x", testMaxMessage-1000))
	if r := holder.Reply(); r.Code != 200 || r.Opaque != 1 {
		t.Fatalf("holder: %+v %q", r, r.Body)
	}
	if r := waiter.Reply(); r.Code != 200 || r.Opaque != 2 {
		t.Fatalf("waiter: %+v %q", r, r.Body)
	}
	waitFor(t, func() bool { return stats(t, b)["put_buffer_bytes"] == 0 })
	if st := stats(t, b); st["put_buffer_waits"] != 1 || st["put_buffer_refused"] != 0 {
		t.Fatalf("stats %v", st)
	}
}

// Many connections pushing large puts through a budget of two: they take
// turns (backpressure) and every put is acknowledged.
func TestPutBudgetBackpressure(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) {
		o.MaxPendingPutBytes = 2 * testMaxMessage
	}})
	payload := strings.Repeat("p", testMaxMessage-100)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", b.Addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			var frames strings.Builder
			for k := 0; k < 3; k++ {
				fmt.Fprintf(&frames, "put test %d %d 0 %d\r\n%s", i%4, len(payload), k, payload)
			}
			go func() { _, _ = nc.Write([]byte(frames.String())) }()
			_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
			rr := protocol.NewReplyReader(nc, 1024)
			for k := 0; k < 3; k++ {
				r, err := rr.Next()
				if err != nil || r.Code != 200 {
					errs <- fmt.Errorf("conn %d put %d: %+v %v %q", i, k, r, err, r.Body)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, func() bool { return stats(t, b)["put_buffer_bytes"] == 0 })
}

// After large puts complete, connections that stay open hold almost
// nothing: the parser drops the put's buffer (and no longer keeps it alive
// through the last command), and a quiet connection's large read buffer is
// replaced by a small one. Before, 40 idle connections kept ~30 MiB (their
// last put's data and a 256 KiB read buffer each).
func TestIdleConnectionsAfterLargePutsHoldLittle(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	base := liveHeap()
	const conns = 40
	payload := strings.Repeat("d", testMaxMessage)
	var clients []*brokertest.Client
	for i := 0; i < conns; i++ {
		c := b.Dial()
		c.Send(fmt.Sprintf("put test %d %d 0 %d\r\n%s", i%4, len(payload), i, payload[:1000]))
		c.Send(payload[1000:])
		if r := c.Reply(); r.Code != 200 {
			t.Fatalf("put %d: %+v %q", i, r, r.Body)
		}
		clients = append(clients, c)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		grown := liveHeap() - base
		if grown < 12<<20 {
			t.Logf("heap +%d KiB with %d idle connections after %d-byte puts", grown>>10, conns, testMaxMessage)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still hold %d MiB after their large puts", conns, grown>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range clients {
		c.Send("version 1\r\n") // still served
		if r := c.Reply(); r.Code != 200 {
			t.Fatalf("version: %+v", r)
		}
	}
}
