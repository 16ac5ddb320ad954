package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// 100,000 puts written before any reply is read: every reply arrives,
// matched by opaque, with consecutive offsets per partition.
func TestPipelining(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			nc, err := net.Dial("tcp", b.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			const n = 100000
			body := make([]byte, 100)
			w := bufio.NewWriterSize(nc, 256<<10)
			for i := 0; i < n; i++ {
				fmt.Fprintf(w, "put test %d %d 0 %d\r\n", i%4, len(body), i)
				w.Write(body)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
			rr := protocol.NewReplyReader(bufio.NewReaderSize(nc, 256<<10), 1024)
			seen := make([]bool, n)
			next := make([]int64, 4)
			for i := 0; i < n; i++ {
				r, err := rr.Next()
				if err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				if r.Code != 200 || r.Opaque < 0 || int(r.Opaque) >= n || seen[r.Opaque] {
					t.Fatalf("reply %d: %+v %q", i, r, r.Body)
				}
				seen[r.Opaque] = true
				_, p, off, err := protocol.ParsePutResult(r.Body)
				if err != nil || int(p) != int(r.Opaque)%4 || off != next[p] {
					t.Fatalf("reply for %d: partition %d offset %d (want %d) err %v", r.Opaque, p, off, next[p], err)
				}
				next[p]++
			}
		})
	}
}

// A parked get is woken by a put on another connection (long before its
// deadline), and answered at its deadline with 404 when nothing arrives.
func TestLongPoll(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			consumer := b.Dial()
			// A deadline of an hour: only the wake-up can answer it within
			// the test's wait.
			consumer.Send("get test g 2 0 65536 1 3600000\r\n")
			waitFor(t, func() bool { return stat(t, b, "long_polls") >= 1 })
			producer := b.Dial()
			producer.Put("test", 2, "wake up", 5)
			r, err := consumer.TryReply(60 * time.Second)
			if err != nil {
				t.Fatalf("the parked get was not woken by the put: %v", err)
			}
			recs := brokertest.Records(t, r.Body)
			if r.Opaque != 1 || len(recs) != 1 || string(recs[0].Data) != "wake up" {
				t.Fatalf("long poll reply %+v", r)
			}
			// Deadline: 404.
			start := time.Now()
			consumer.Send("get test g 2 1 65536 2 200\r\n")
			r = consumer.Reply()
			if r.Code != 404 || r.Opaque != 2 || time.Since(start) < 150*time.Millisecond {
				t.Fatalf("deadline reply %+v after %v", r, time.Since(start))
			}
		})
	}
}

// Thousands of parked gets on one connection all wake on their puts.
func TestManyParkedGets(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"many": 1000}})
	c := b.Dial()
	const n = 1000
	for i := 0; i < n; i++ {
		c.Send(fmt.Sprintf("get many g %d 0 1024 %d 20000\r\n", i, i))
	}
	waitFor(t, func() bool { return stat(t, b, "long_polls") >= n })
	p := b.Dial()
	for i := 0; i < n; i++ {
		p.Send(fmt.Sprintf("put many %d 1 0 %d\r\nx", i, i))
	}
	for i := 0; i < n; i++ {
		if r := p.Reply(); r.Code != 200 {
			t.Fatalf("put: %+v", r)
		}
	}
	seen := map[int32]bool{}
	for i := 0; i < n; i++ {
		r := c.Reply()
		if r.Kind != protocol.ReplyValue || seen[r.Opaque] {
			t.Fatalf("parked get reply %+v", r)
		}
		seen[r.Opaque] = true
	}
}

// A client that pipelines gets and never reads is cut off instead of
// growing the broker's memory.
func TestStalledReaderIsCutOff(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) { o.WriteTimeout = 500 * time.Millisecond }})
	p := b.Dial()
	body := string(make([]byte, 60000))
	for i := 0; i < 16; i++ {
		p.Put("test", 0, body, int32(i))
	}
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	done := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(nc)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "get test g 0 0 1048576 %d\r\n", i); err != nil {
				done <- err
				return
			}
			if i%100 == 0 {
				if err := w.Flush(); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	select {
	case <-done: // the broker closed the connection: writes fail
	case <-time.After(30 * time.Second):
		t.Fatal("stalled reader was not cut off")
	}
	waitFor(t, func() bool { return b.Server.NumConnections() <= 1 })
}

// Shutdown answers what was read: in-flight sync puts are acknowledged
// after their fsync, parked gets get 404, then connections close.
func TestGracefulShutdown(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	parked := b.Dial()
	parked.Send("get test g 0 0 1024 1 60000\r\n")
	waitFor(t, func() bool { return stat(t, b, "long_polls") >= 1 })
	var wg sync.WaitGroup
	c := b.Dial()
	for i := 0; i < 100; i++ {
		c.Send(fmt.Sprintf("put test 1 1 0 %d\r\nx", i))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 100; i++ {
			if r := c.Reply(); r.Code != 200 {
				t.Errorf("put %d: %+v", i, r)
				return
			}
		}
	}()
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Server.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if r := parked.Reply(); r.Code != 404 || r.Opaque != 1 {
		t.Fatalf("parked get at shutdown: %+v", r)
	}
	parked.ExpectClosed(5 * time.Second)
	if _, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

func stat(t *testing.T, b *brokertest.Broker, key string) int64 {
	t.Helper()
	c := b.Dial()
	defer c.Close()
	c.Send("stats 1\r\n")
	r := c.Reply()
	stats, err := protocol.ParseStats(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Key == key {
			v, _ := strconv.ParseInt(s.Value, 10, 64)
			return v
		}
	}
	t.Fatalf("no stat %q", key)
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = os.Getpid
