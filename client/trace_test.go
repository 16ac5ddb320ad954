package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// TestTraceQueueDropsWhenFull: events beyond the queue's bound are dropped and counted, never
// waited for.
func TestTraceQueueDropsWhenFull(t *testing.T) {
	w := &traceWriter{opts: TraceOptions{QueueSize: 8}.withDefaults(), kick: make(chan struct{}, 1)}
	e := trace.Event{Type: trace.Produce, MsgID: 1}
	for range 20 {
		w.add("127.0.0.1:1", &e)
	}
	if st := w.stats(); st.Queued != 8 || st.Dropped != 12 {
		t.Fatalf("stats %+v: want 8 queued, 12 dropped", st)
	}
	w.giveBack(w.take())
	w.add("127.0.0.1:1", &e)
	if st := w.stats(); st.Queued != 9 {
		t.Fatalf("after the writer took the queue: %+v", st)
	}
}

// TestTraceProducerWritesRecords: a traced producer's sends end up as %TRACE% records on the
// broker that stored each message, keyed by msgId and keys; an overloaded queue drops and
// counts; Close writes what is queued (goleak checks the writer goroutine ends).
func TestTraceProducerWritesRecords(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 2}, Logger: testLogger()})
	ctx := ctxT(t, 30*time.Second)
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger(), Trace: true,
		TraceOptions: TraceOptions{Group: "shop", FlushInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	var ids []int64
	for i := range n {
		res, err := p.Send(ctx, &Message{Topic: "q", Body: []byte("m" + strconv.Itoa(i)), Keys: []string{"k-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.MsgID)
	}
	p.Close()
	st := p.TraceStats()
	if st.Written != n || st.Dropped != 0 || st.Failed != 0 || st.Batches == 0 {
		t.Fatalf("trace stats %+v: want %d written", st, n)
	}
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, i := range []int{0, 137, n - 1} {
		mt, err := a.Trace(ctx, b.Addr, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		var produce, store bool
		for _, e := range mt.Events {
			switch e.Type {
			case trace.Produce:
				produce = e.OK && e.Group == "shop" && e.Keys == "k-"+strconv.Itoa(i) && e.Attempt == 1 && e.Size == len("m"+strconv.Itoa(i))
			case trace.Store:
				store = e.Topic == "q"
			}
		}
		if !produce || !store || !mt.Found {
			t.Fatalf("trace of message %d: %+v", i, mt)
		}
		// The message's own key finds the trace too.
		mts, err := a.TraceKey(ctx, []string{b.Addr}, "q", "k-"+strconv.Itoa(i), 10)
		if err != nil || len(mts) != 1 || mts[0].MsgID != ids[i] {
			t.Fatalf("TraceKey: %v %+v", err, mts)
		}
	}
	// The message is marked by its sysFlag (the connection sent `trace on`), not by a
	// property: it stays a plain message.
	m, err := a.QueryID(ctx, b.Addr, ids[0])
	if err != nil || m.SysFlag&protocol.SysFlagTraced == 0 || len(m.Properties) != 0 || m.Tag != "" {
		t.Fatalf("record of a traced send: %v %+v", err, m)
	}
	// An untraced producer's messages are not marked.
	up, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	res, err := up.Send(ctx, &Message{Topic: "q", Body: []byte("plain")})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := a.QueryID(ctx, b.Addr, res.MsgID); err != nil || m.SysFlag&protocol.SysFlagTraced != 0 {
		t.Fatalf("record of an untraced send: %v %+v", err, m)
	}
}

// TestTracePutRefusesBadRecords: %TRACE% takes only well-formed trace batches; every other
// system topic still refuses puts.
func TestTracePutRefusesBadRecords(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 1}, Logger: testLogger()})
	ctx := ctxT(t, 30*time.Second)
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	part := Partition{BrokerID: 0, Partition: 0}
	good := &Message{Topic: trace.Topic, Body: []byte("e=produce&id=5\n"), Keys: []string{"5"}}
	if _, err := p.SendToPartition(ctx, good, part); err != nil {
		t.Fatalf("a valid trace record: %v", err)
	}
	for _, m := range []*Message{
		{Topic: trace.Topic, Body: []byte("not a trace record")},
		{Topic: trace.Topic, Body: []byte("e=produce&id=5\n"), Tag: "x"},
		{Topic: trace.Topic, Body: []byte("e=produce&id=5\n"), Attribute: "a"},
	} {
		_, err := p.SendToPartition(ctx, m, part)
		var be *BrokerError
		if !errors.As(err, &be) || be.Code != protocol.StatusBadRequest {
			t.Errorf("put %q tag %q: %v, want 400", m.Body, m.Tag, err)
		}
	}
	_, err = p.SendToPartition(ctx, &Message{Topic: "%DLQ%g", Body: []byte("e=produce&id=5\n")}, part)
	var be *BrokerError
	if !errors.As(err, &be) || be.Code != protocol.StatusForbidden {
		t.Errorf("put to %%DLQ%%g: %v, want 403", err)
	}
}

// recHook records what a user hook sees.
type recHook struct {
	mu     sync.Mutex
	sends  []SendEvent
	before atomic.Int64
	calls  []ConsumeEvent
}

type ctxKey struct{}

func (h *recHook) BeforeSend(e *SendEvent) {
	h.before.Add(1)
	if e.Message.Properties == nil {
		e.Message.Properties = map[string]string{}
	}
	e.Message.Properties["traceparent"] = "00-abc-01" // a span context travels with the message
	e.Span = "span"
}

func (h *recHook) AfterSend(e *SendEvent) {
	h.mu.Lock()
	h.sends = append(h.sends, *e)
	h.mu.Unlock()
}

func (h *recHook) BeforeConsume(e *ConsumeEvent) {
	e.Ctx = context.WithValue(e.Ctx, ctxKey{}, e.Message.Properties["traceparent"])
}

func (h *recHook) AfterConsume(e *ConsumeEvent) {
	h.mu.Lock()
	h.calls = append(h.calls, *e)
	h.mu.Unlock()
}

// TestUserHooks: a user hook sees every send (before: may add properties; after: result,
// attempts, broker, cost) and every handler call (before: may replace the handler's context;
// after: error, cost, retry decision, attempt).
func TestUserHooks(t *testing.T) {
	cl := newCluster(t, map[string]int{"hooked": 1}, 1)
	ctx := ctxT(t, 60*time.Second)
	h := &recHook{}
	cfg := cl.config()
	cfg.Hooks = []Hook{h, nil}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Send(ctx, &Message{Topic: "hooked", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p.SendAsync(ctx, &Message{Topic: "hooked", Body: []byte("y")}, func(SendResult, error) { close(done) })
	<-done
	h.mu.Lock()
	if h.before.Load() != 2 || len(h.sends) != 2 || h.sends[0].Result != res || h.sends[0].Err != nil ||
		h.sends[0].Attempts != 1 || h.sends[0].Broker == "" || h.sends[0].Cost <= 0 || h.sends[0].Span != "span" {
		t.Fatalf("send events %+v", h.sends)
	}
	h.mu.Unlock()

	cfg.Consumer.Concurrency = 0
	cfg.Consumer.RetryPolicy = DefaultRetryPolicy()
	cfg.Consumer.MaxWait = 200 * time.Millisecond
	c, err := NewConsumer(cfg, "g")
	if err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int64
	var sawParent atomic.Bool
	var handled atomic.Int64
	if err := c.Subscribe("hooked", "*", func(hctx context.Context, m *Message) error {
		if hctx.Value(ctxKey{}) == "00-abc-01" {
			sawParent.Store(true)
		}
		if string(m.Body) == "x" && fails.Add(1) == 1 {
			return errors.New("first time fails")
		}
		handled.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(45 * time.Second)
	for handled.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	c.Close()
	if handled.Load() < 2 || !sawParent.Load() {
		t.Fatalf("handled %d, context from BeforeConsume seen: %v", handled.Load(), sawParent.Load())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var failed, retried bool
	for _, e := range h.calls {
		if e.Err != nil && e.Attempt == 1 && e.Retry.Delay > 0 && e.Group == "g" && e.ConsumerID == c.ID() {
			failed = true
		}
		if e.Err == nil && e.Attempt == 2 && string(e.Message.Body) == "x" {
			retried = true
		}
	}
	if !failed || !retried {
		t.Fatalf("consume events: failed %v, retried in place %v: %+v", failed, retried, h.calls)
	}
}

// TestTraceAsyncSends: the produce events of async sends (encoded by the connection's reader
// into its batch) are all written by Close, each with its own id and offset, and the traced
// messages stay plain (no properties line).
func TestTraceAsyncSends(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 4}, Logger: testLogger()})
	ctx := ctxT(t, 60*time.Second)
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger(), Trace: true,
		TraceOptions: TraceOptions{Group: "shop", QueueSize: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	res := make([]SendResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		p.SendAsync(ctx, &Message{Topic: "q", Body: []byte("m" + strconv.Itoa(i))}, func(r SendResult, err error) {
			if err != nil {
				t.Error(err)
			}
			res[i] = r
			wg.Done()
		})
	}
	wg.Wait()
	p.Close()
	if st := p.TraceStats(); st.Queued != n || st.Written != n || st.Dropped != 0 || st.Failed != 0 {
		t.Fatalf("trace stats %+v: want %d queued and written", st, n)
	}
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, i := range []int{0, 1, 2, 1717, n - 1} {
		mt, err := a.Trace(ctx, b.Addr, res[i].MsgID)
		if err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, e := range mt.Events {
			ok = ok || e.Type == trace.Produce && e.OK && e.Offset == res[i].Offset && e.Partition == res[i].Partition.Partition &&
				e.Group == "shop" && e.Size == len("m"+strconv.Itoa(i)) && e.Cost > 0
		}
		if !ok || !mt.Found {
			t.Fatalf("trace of message %d (%+v): %+v", i, res[i], mt)
		}
	}
}

// TestTraceWindowOfOne: a traced producer with a window of one request keeps sending while its
// connection's reader sends full trace batches on the same connection (puts that take no window
// slot, startFreePut), and every event is written by Close.
func TestTraceWindowOfOne(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 2}, Logger: testLogger()})
	ctx := ctxT(t, 60*time.Second)
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger(), Trace: true, MaxInFlight: 1,
		TraceOptions: TraceOptions{QueueSize: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 * traceBatchEvents // full batches, sent by the reader
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		p.SendAsync(ctx, &Message{Topic: "q", Body: []byte("w" + strconv.Itoa(i))}, func(_ SendResult, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	p.Close()
	if st := p.TraceStats(); st.Queued != n || st.Written != n || st.Dropped != 0 || st.Failed != 0 || st.Batches < 3 {
		t.Fatalf("trace stats %+v: want %d queued and written in at least 3 records", st, n)
	}
}

// TestFreePutTakesNoWindowSlot: with a connection's only window slot taken by a put the broker
// does not answer, a trace record's put (startFreePut) is still written at once: it neither waits
// for a slot nor takes one. A fake broker (a TCP listener that reads and never answers).
func TestFreePutTakesNoWindowSlot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 16)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		sc := bufio.NewScanner(nc)
		for sc.Scan() {
			got <- sc.Text()
		}
	}()
	cfg := Config{MaxInFlight: 1, Logger: testLogger()}.withDefaults()
	c := newBrokerConn(ln.Addr().String(), cfg.connConfig())
	defer c.close(nil)
	ctx := ctxT(t, 60*time.Second)
	d := protocol.MessageData{Payload: []byte("x")}
	held := newCall()
	held.onDone = func(*call) {}
	if err := c.startPut(ctx, held, 0, "q", 0, &d, false); err != nil { // the only slot, never answered
		t.Fatal(err)
	}
	if c.window.tryAcquire() {
		t.Fatal("the window has a free slot besides the held put")
	}
	done := make(chan error, 1)
	fp := newCall()
	fp.onDone = func(*call) {}
	go func() { done <- c.startFreePut(ctx, fp, 0, trace.Topic, 0, &d) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("startFreePut waited for a window slot")
	}
	for seen := false; !seen; { // written while the window stays full
		select {
		case line := <-got:
			seen = strings.Contains(line, "put "+trace.Topic+" ") // after the held put's body
		case <-ctx.Done():
			t.Fatal("the free put was not written")
		}
	}
	if c.window.tryAcquire() {
		t.Fatal("the free put gave the window a slot")
	}
}
