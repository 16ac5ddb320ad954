package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// fetchAll reads partition's records from the start through Admin.
func fetchAll(t *testing.T, addr, topic string, partition int) []Message {
	t.Helper()
	a, err := NewAdmin(Config{Brokers: []string{addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var out []Message
	for off := int64(0); ; {
		r, err := a.Fetch(ctxT(t, 30*time.Second), addr, topic, partition, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) == 0 {
			return out
		}
		out = append(out, r.Messages...)
		off = r.Messages[len(r.Messages)-1].Offset + 1
	}
}

func TestSendBatch(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bt": 1}, Sync: true})
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxT(t, 30*time.Second)
	var msgs []*Message
	for i := 0; i < 250; i++ {
		m := &Message{Topic: "bt", Body: []byte(fmt.Sprint("m", i))}
		if i%7 == 0 {
			m.Tag, m.Keys, m.Attribute = "t7", []string{fmt.Sprint("k", i)}, "a"
		}
		msgs = append(msgs, m)
	}
	res, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("%d results", len(res))
	}
	got := fetchAll(t, b.Addr, "bt", 0)
	if len(got) != len(msgs) {
		t.Fatalf("stored %d, want %d", len(got), len(msgs))
	}
	for i, m := range got {
		if string(m.Body) != string(msgs[i].Body) || m.MsgID != res[i].MsgID || m.Offset != res[i].Offset || res[i].Offset != int64(i) ||
			m.Tag != msgs[i].Tag || m.Attribute != msgs[i].Attribute {
			t.Fatalf("message %d: %s vs result %+v", i, &m, res[i])
		}
	}

	// Errors: another topic, a delayed message, nothing sent.
	if _, err := p.SendBatch(ctx, []*Message{{Topic: "bt"}, {Topic: "other"}}); !errors.Is(err, ErrNotBatchable) {
		t.Fatalf("mixed topics: %v", err)
	}
	if _, err := p.SendBatch(ctx, []*Message{{Topic: "bt", DelayLevel: 1}}); !errors.Is(err, ErrNotBatchable) {
		t.Fatalf("delayed: %v", err)
	}
	if _, err := p.SendBatch(ctx, nil); err == nil {
		t.Fatal("empty batch accepted")
	}
	// A broker error fails the frame (unknown topic: 500 after retries).
	if _, err := p.SendBatch(ctx, []*Message{{Topic: "nosuchtopic", Body: []byte("x")}}); err == nil {
		t.Fatal("unknown topic accepted")
	}
	if n := len(fetchAll(t, b.Addr, "bt", 0)); n != len(msgs) {
		t.Fatalf("after the failures %d messages, want %d", n, len(msgs))
	}
}

// A batch larger than a frame is cut into several frames, in order.
func TestSendBatchSplitsFrames(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bt": 1}})
	cfg := Config{Brokers: []string{b.Addr}, Logger: testLogger()}
	cfg.Producer.MaxMessageSize = 4096 // a frame holds ~30 of these
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*Message
	for i := 0; i < 200; i++ {
		msgs = append(msgs, &Message{Topic: "bt", Body: fmt.Appendf(nil, "%0100d", i)})
	}
	res, err := p.SendBatch(ctxT(t, 30*time.Second), msgs)
	if err != nil {
		t.Fatal(err)
	}
	got := fetchAll(t, b.Addr, "bt", 0)
	if len(got) != len(msgs) {
		t.Fatalf("stored %d", len(got))
	}
	for i := range got {
		if string(got[i].Body) != string(msgs[i].Body) || got[i].MsgID != res[i].MsgID {
			t.Fatalf("message %d out of order or wrong id", i)
		}
	}
}

// Linger batches SendAsync messages per partition; every callback gets its
// own result; Close sends what is still lingering.
func TestLinger(t *testing.T) {
	cl := newCluster(t, map[string]int{"lt": 3}, 1)
	cfg := cl.config()
	cfg.Producer.Linger = time.Hour // only full batches and Close send
	cfg.Producer.BatchSize = 10
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 95
	var mu sync.Mutex
	results := map[int]SendResult{}
	var wg sync.WaitGroup
	wg.Add(n)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < n; i++ {
		p.SendAsync(ctx, &Message{Topic: "lt", Body: []byte(fmt.Sprint(i))}, func(r SendResult, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			results[i] = r
			mu.Unlock()
		})
	}
	// 90 messages filled 9 batches of 10 (30 per partition with round
	// robin); the last 5 wait for Close.
	zktest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(results) == 90 }, "90 lingered sends answered")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(results) != n {
		t.Fatalf("%d results", len(results))
	}
	seen := map[Partition]map[int64]bool{}
	for _, r := range results {
		if seen[r.Partition] == nil {
			seen[r.Partition] = map[int64]bool{}
		}
		if seen[r.Partition][r.Offset] {
			t.Fatalf("offset %v@%d twice", r.Partition, r.Offset)
		}
		seen[r.Partition][r.Offset] = true
	}

	// Linger off (the default): a send leaves at once.
	p2, err := NewProducer(cl.config())
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	done := make(chan error, 1)
	p2.SendAsync(context.Background(), &Message{Topic: "lt", Body: []byte("now")}, func(_ SendResult, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkEncodeFrames: the client's encoding of a batch of 1,000 100-byte
// messages into one mput frame (no broker); b.N counts messages.
//
//	go test -run '^$' -bench EncodeFrames -benchtime 20000000x ./client
func BenchmarkEncodeFrames(b *testing.B) {
	p := &Producer{opts: &ProducerOptions{MaxMessageSize: 1 << 20, Selector: RoundRobin()}}
	msgs := make([]*Message, 1000)
	for i := range msgs {
		msgs[i] = &Message{Topic: "bench", Body: make([]byte, 100)}
	}
	frames := make([]*batchFrame, 0, 4)
	b.SetBytes(100)
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(msgs) {
		if err := p.checkBatch(msgs); err != nil {
			b.Fatal(err)
		}
		fs, err := p.encodeFrames(nil, msgs, frames[:0])
		if err != nil || len(fs) != 1 {
			b.Fatal(len(fs), err)
		}
		fs[0].release()
	}
}

// User hooks see every message of SendBatch and of SendAsync under Linger:
// one BeforeSend before the frame is encoded (a property it adds is sent),
// one AfterSend with that message's own result.
func TestUserHooksBatchAndLinger(t *testing.T) {
	cl := newCluster(t, map[string]int{"hb": 1}, 1)
	ctx := ctxT(t, 60*time.Second)
	check := func(what string, h *recHook, want []SendResult) {
		t.Helper()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.before.Load() != int64(len(want)) || len(h.sends) != len(want) {
			t.Fatalf("%s: %d BeforeSend, %d AfterSend, want %d each", what, h.before.Load(), len(h.sends), len(want))
		}
		got := map[int64]SendEvent{}
		for _, e := range h.sends {
			got[e.Result.MsgID] = e
		}
		for _, r := range want {
			e, ok := got[r.MsgID]
			if !ok || e.Result != r || e.Err != nil || e.Attempts != 1 || e.Broker == "" || e.Span != "span" ||
				e.Message.Properties["traceparent"] != "00-abc-01" {
				t.Fatalf("%s: event of %d: %+v (ok %v)", what, r.MsgID, e, ok)
			}
		}
	}

	h := &recHook{}
	cfg := cl.config()
	cfg.Hooks = []Hook{h}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*Message
	for i := 0; i < 4; i++ {
		msgs = append(msgs, &Message{Topic: "hb", Body: []byte(fmt.Sprint("batch ", i))})
	}
	res, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	check("SendBatch", h, res)

	hl := &recHook{}
	cfg = cl.config()
	cfg.Hooks = []Hook{hl}
	cfg.Producer.Linger = time.Hour // only a full batch (3) sends
	cfg.Producer.BatchSize = 3
	pl, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	var mu sync.Mutex
	var lres []SendResult
	var wg sync.WaitGroup
	wg.Add(3)
	for i := 0; i < 3; i++ {
		pl.SendAsync(ctx, &Message{Topic: "hb", Body: []byte(fmt.Sprint("linger ", i))}, func(r SendResult, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			lres = append(lres, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	check("Linger", hl, lres)

	// The property a hook added was stored with each message.
	a, err := NewAdmin(cl.config())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fr, err := a.Fetch(ctx, cl.brokers[1].Addr, "hb", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	n := len(fr.Messages)
	for _, m := range fr.Messages {
		if m.Properties["traceparent"] != "00-abc-01" {
			t.Fatalf("message %q stored without the hook's property: %+v", m.Body, m.Properties)
		}
	}
	if n != 7 {
		t.Fatalf("%d messages", n)
	}
}
