package client

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoBroker answers `echo <token> <opaque>` with a result whose body is the
// token. It drops one request in dropEvery (that call times out), answers one
// in lateEvery after a pause, and closes the connection instead of
// answering one request in closeEvery.
func echoBroker(t *testing.T, dropEvery, lateEvery, closeEvery int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				r := bufio.NewReader(nc)
				var wmu sync.Mutex
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					f := strings.Fields(line)
					if len(f) < 2 {
						continue
					}
					token, op := f[1], f[len(f)-1]
					if f[0] == "version" {
						token = "v"
					}
					reply := fmt.Sprintf("result 200 %d %s\r\n%s", len(token), op, token)
					switch n := rand.IntN(1000); {
					case closeEvery > 0 && n%closeEvery == 0:
						return
					case dropEvery > 0 && n%dropEvery == 1:
						continue
					case lateEvery > 0 && n%lateEvery == 2:
						wg.Go(func() {
							time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
							wmu.Lock()
							_, _ = nc.Write([]byte(reply))
							wmu.Unlock()
						})
						continue
					}
					wmu.Lock()
					_, err = nc.Write([]byte(reply))
					wmu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

func echoEncoder(token string) func(dst []byte, opaque int32) []byte {
	return func(dst []byte, opaque int32) []byte {
		return fmt.Appendf(dst, "echo %s %d\r\n", token, opaque)
	}
}

// Sync and async requests from many goroutines, with the broker dropping,
// delaying and cutting connections, contexts cancelled at random and
// connections closed under the calls: every request gets exactly its own
// reply or an error, whoever reads it (the reader goroutine or a lone
// caller: selfread.go), and every async callback runs once.
func TestSelfReadHandoff(t *testing.T) {
	addr := echoBroker(t, 97, 89, 331)
	cfg := &connConfig{dialTimeout: 30 * time.Second, writeTimeout: 60 * time.Second, heartbeat: 100 * time.Millisecond,
		requestTimeout: 250 * time.Millisecond, backoffMin: time.Millisecond, backoffMax: 20 * time.Millisecond,
		window: 8, maxReplyBody: 1 << 20, log: testLogger()}
	c := newBrokerConn(addr, cfg)
	defer c.close(nil)
	var ok, failed, asyncDone atomic.Int64
	var asyncSent atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for w := range 6 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				token := fmt.Sprintf("w%d-%d", w, i)
				switch rand.IntN(4) {
				case 0: // async
					cl := getCall(kindOther)
					var once atomic.Bool
					cl.onDone = func(cl *call) {
						if !once.CompareAndSwap(false, true) {
							t.Errorf("%s: completed twice", token)
						}
						if cl.err == nil && string(cl.body) != token {
							t.Errorf("async %s got the reply %q", token, cl.body)
						}
						putCall(cl)
						asyncDone.Add(1)
					}
					if err := c.begin(context.Background(), cl, c.deadlineFor(context.Background(), cfg.requestTimeout)); err != nil {
						putCall(cl)
						continue
					}
					asyncSent.Add(1)
					c.wbuf = echoEncoder(token)(c.wbuf, cl.opaque)
					c.endAsync()
				case 1: // sync with a context cancelled at random
					ctx, cancel := context.WithCancel(context.Background())
					go func() {
						time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
						cancel()
					}()
					cl, err := c.do(ctx, kindOther, cfg.requestTimeout, echoEncoder(token))
					if err == nil {
						if string(cl.body) != token {
							t.Errorf("sync %s got the reply %q", token, cl.body)
						}
						putCall(cl)
						ok.Add(1)
					} else {
						failed.Add(1)
					}
					cancel()
				default: // sync
					cl, err := c.do(context.Background(), kindOther, cfg.requestTimeout, echoEncoder(token))
					if err == nil {
						if string(cl.body) != token {
							t.Errorf("sync %s got the reply %q", token, cl.body)
						}
						putCall(cl)
						ok.Add(1)
					} else {
						failed.Add(1)
					}
					if rand.IntN(50) == 0 { // a lone caller now and then
						time.Sleep(time.Millisecond)
					}
				}
			}
		})
	}
	wg.Go(func() { // cut the socket under the calls now and then
		for time.Now().Before(deadline) {
			time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
			c.mu.Lock()
			g := c.cur
			c.mu.Unlock()
			if g != nil {
				g.nc.Close()
			}
		}
	})
	wg.Wait()
	for end := time.Now().Add(60 * time.Second); asyncDone.Load() < asyncSent.Load(); {
		if time.Now().After(end) {
			t.Fatalf("%d of %d async requests never completed", asyncSent.Load()-asyncDone.Load(), asyncSent.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok.Load() == 0 {
		t.Fatal("no sync request succeeded")
	}
	t.Logf("sync: %d ok, %d failed; async: %d", ok.Load(), failed.Load(), asyncSent.Load())
}

// A lone synchronous call on an idle connection reads its own reply: the
// reader goroutine is idle while it does, and idle again after.
func TestSelfReadLoneCall(t *testing.T) {
	addr := echoBroker(t, 0, 0, 0)
	cfg := &connConfig{dialTimeout: 30 * time.Second, writeTimeout: 60 * time.Second, heartbeat: time.Hour,
		requestTimeout: 2 * time.Second, backoffMin: time.Millisecond, backoffMax: 20 * time.Millisecond,
		window: 8, maxReplyBody: 1 << 20, log: testLogger()}
	c := newBrokerConn(addr, cfg)
	defer c.close(nil)
	self, first := 0, -1
	for i := range 100 {
		token := fmt.Sprint("t", i)
		cl := getCall(kindOther)
		if err := c.begin(context.Background(), cl, c.deadlineFor(context.Background(), time.Minute)); err != nil {
			t.Fatal(err)
		}
		switch {
		case cl.selfg != nil:
			self++
			if first < 0 {
				first = i
			}
		case first >= 0:
			// Once a caller read its own reply the read side stays idle
			// between lone calls: nothing but this call can take it.
			t.Fatalf("call %d did not read its own reply though call %d did", i, first)
		}
		c.wbuf = echoEncoder(token)(c.wbuf, cl.opaque)
		c.endSync()
		if err := c.wait(context.Background(), cl); err != nil || string(cl.body) != token {
			t.Fatalf("%s: %q, %v", token, cl.body, err)
		}
		putCall(cl)
	}
	// The first calls may find the reader goroutine still on the socket:
	// it parks only after completing a reply, racing the next call's
	// registration (another P may run the woken caller at once).
	if self < 50 {
		t.Fatalf("%d of 100 lone calls read their own reply (the first at call %d)", self, first)
	}
}
