package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/pop"
)

// popProxy forwards connections to a broker and records when each pop
// command went through.
type popProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	pops []time.Time
	wg   sync.WaitGroup
}

func newPopProxy(t *testing.T, target string) *popProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &popProxy{ln: ln}
	var conns []net.Conn
	var cmu sync.Mutex
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			bc, err := net.Dial("tcp", target)
			if err != nil {
				nc.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, nc, bc)
			cmu.Unlock()
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				defer nc.Close()
				_, _ = io.Copy(nc, bc)
			}()
			go func() {
				defer p.wg.Done()
				defer bc.Close()
				r := bufio.NewReader(nc)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "pop ") {
						p.mu.Lock()
						p.pops = append(p.pops, time.Now())
						p.mu.Unlock()
					}
					if _, err := bc.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *popProxy) popTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.pops...)
}

// A pop answered 404 at once — here the broker does not serve the topic;
// a broker shutting down does the same — is not a long poll that found
// nothing: the fetcher waits before the next pop instead of spinning on
// the broker. (Gaps are only checked from below: a loaded machine makes
// them longer, never shorter.)
func TestPushConsumerBacksOffOnImmediate404(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"push": 1}})
	px := newPopProxy(t, b.Addr)
	c, err := NewPushConsumer(Config{Brokers: []string{px.ln.Addr().String()}, Logger: testLogger()}, "g",
		PushOptions{Concurrency: 1, MaxWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("elsewhere", "", func(context.Context, *Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three pops", func() bool { return len(px.popTimes()) >= 3 })
	c.Close()
	ts := px.popTimes()
	for i := 1; i < 3; i++ {
		if gap := ts[i].Sub(ts[i-1]); gap < 40*time.Millisecond {
			t.Fatalf("pop %d sent %v after an immediate 404: a busy loop", i+1, gap)
		}
	}
}

// errHook records the error of every handler call.
type errHook struct {
	NopHook
	mu   sync.Mutex
	errs []error
}

func (h *errHook) AfterConsume(e *ConsumeEvent) {
	h.mu.Lock()
	h.errs = append(h.errs, e.Err)
	h.mu.Unlock()
}

func (h *errHook) snapshot() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// A panicking handler of a PushConsumer is a failure, as a Consumer's: the
// message is released and delivered again, and hooks see a *HandlerPanic
// (ConsumeEvent.Err, docs/client.md) with the panic's value and stack.
func TestPushConsumerPanicIsHandlerPanic(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"push": 1}})
	b.Dial().Put("push", 0, "m", 1)
	h := &errHook{}
	c, err := NewPushConsumer(Config{Brokers: []string{b.Addr}, Logger: testLogger(), Hooks: []Hook{h}}, "g",
		PushOptions{Concurrency: 2, MaxWait: 500 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe("push", "", func(_ context.Context, m *Message) error {
		if m.Attempt == 1 {
			panic("boom")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redelivery acknowledged", func() bool { return c.Stats().Acked.Load() == 1 })
	errs := h.snapshot()
	var hp *HandlerPanic
	if len(errs) != 2 || !errors.As(errs[0], &hp) || hp.Value != "boom" || len(hp.Stack) == 0 || errs[1] != nil {
		t.Fatalf("hook saw %v, want a *HandlerPanic(boom) then nil", errs)
	}
}

// Acknowledgements are sent in commands of at most maxAckBatch handles
// (docs/push.md: one ack per broker every AckInterval or 512 handles):
// the handles queued while a slow ack was in flight would otherwise go in
// one command whose data can pass the broker's maxMessageSize, which
// closes the connection (a fatal protocol error) and loses every one of
// those acks, and the pops sharing the connection. 40,000 handles are
// about 600 KB here, over the test broker's 512 KiB.
func TestPushAckBatchesStayUnderMaxMessageSize(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"push": 1}})
	const n = 40000
	raw := b.Dial()
	for i := 0; i < n; i += 1000 {
		var sb strings.Builder
		for j := 0; j < 1000; j++ {
			sb.WriteString("put push 0 1 0 1\r\nx")
		}
		raw.Send(sb.String())
		for j := 0; j < 1000; j++ {
			if r := raw.Reply(); r.Code != 200 {
				t.Fatalf("put: %+v", r)
			}
		}
	}
	raw.Close()
	all, err := pop.NewFilter("", "")
	if err != nil {
		t.Fatal(err)
	}
	var handles []string
	for len(handles) < n {
		ds, err := b.Pop().Receive(context.Background(), "g", "push", all, 1024, time.Hour)
		if err != nil || len(ds) == 0 {
			t.Fatalf("receive after %d: %v", len(handles), err)
		}
		for _, d := range ds {
			handles = append(handles, d.Handle)
		}
	}
	c, err := NewPushConsumer(Config{Brokers: []string{b.Addr}, Logger: testLogger()}, "g", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := &acker{c: c, conn: c.pool.get(b.Addr), kick: make(chan struct{}, 1)}
	for _, h := range handles {
		a.add(h)
	}
	var buf []byte
	a.flush(&buf)
	for _, i := range []int{0, n / 2, n - 1} {
		if err := b.Pop().Ack("g", handles[i]); !errors.Is(err, pop.ErrStale) {
			t.Fatalf("handle %d (%s) was not acknowledged: a second ack gave %v", i, handles[i], err)
		}
	}
}
