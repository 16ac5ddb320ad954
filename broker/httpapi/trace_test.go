package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol/trace"
)

// traceFixture produces one traced message with a key and consumes it in a traced group whose
// handler fails once (redelivered in place), then waits until its trace is complete.
func traceFixture(t *testing.T, f *clusterFixture) client.SendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := client.Config{ZKConnect: f.zk, ZKRoot: "/meta", Trace: true, TraceOptions: client.TraceOptions{FlushInterval: 20 * time.Millisecond}}
	p, err := client.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Send(ctx, &client.Message{Topic: "orders", Body: []byte("traced"), Keys: []string{"order-99"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	cfg.Consumer.RetryPolicy = &client.BackoffRetry{Initial: 10 * time.Millisecond}
	cfg.Consumer.MaxWait = 200 * time.Millisecond
	c, err := client.NewConsumer(cfg, "shipping")
	if err != nil {
		t.Fatal(err)
	}
	var fails, done atomic.Int64
	if err := c.Subscribe("orders", "*", func(_ context.Context, m *client.Message) error {
		if m.MsgID != res.MsgID {
			return nil
		}
		if fails.Add(1) == 1 {
			return errors.New("label printer offline")
		}
		done.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the traced message consumed", func() bool { return done.Load() > 0 })
	c.Close()
	return res
}

// The trace page shows a message's timeline (search by id and by key), and its JSON endpoint
// the same events, in a real browser against a real broker and ZooKeeper.
func TestTraceInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newClusterFixture(t)
	base := f.hs.URL()
	res := traceFixture(t, f)

	var l httpapi.TraceLookup
	waitFor(t, "the complete trace from /api/v1/trace", func() bool {
		l = httpapi.TraceLookup{}
		if getJSON(t, fmt.Sprintf("%s/api/v1/trace?id=%d", base, res.MsgID), &l) != 200 || len(l.Traces) != 1 {
			return false
		}
		n := map[trace.Type]int{}
		for _, e := range l.Traces[0].Events {
			n[e.Type]++
		}
		return n[trace.Produce] == 1 && n[trace.Store] == 1 && n[trace.ConsumeEnd] == 2 && n[trace.Retry] == 1
	})

	b.open(t, base+"/trace")
	b.do(t, chromedp.SetValue(chromedp.CSS(`#trace-search input[name="id"]`), fmt.Sprint(res.MsgID)),
		chromedp.Submit(chromedp.CSS(`#trace-search`)), chromedp.WaitVisible(chromedp.CSS(`#traced`)))
	if got := b.text(t, "#traced"); got != "1 message(s)" {
		t.Fatalf("trace by id: %q", got)
	}
	text := b.text(t, "table.timeline")
	for _, w := range []string{"produce", "store", "consume-begin", "consume-end", "retry", "shipping", "label printer offline", "redelivered in place"} {
		if !strings.Contains(text, w) {
			t.Errorf("timeline lacks %q:\n%s", w, text)
		}
	}
	if !b.eval(t, `document.querySelectorAll("table.timeline tr.failed").length >= 1`) {
		t.Error("the failed handler call is not marked")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("trace page: browser errors: %v", errs)
	}
	b.screenshot(t, "trace")

	text = b.open(t, base+"/trace?topic=orders&key=order-99")
	if !strings.Contains(text, "1 message(s)") || !strings.Contains(text, fmt.Sprint(res.MsgID)) {
		t.Errorf("trace by key:\n%s", text)
	}
	// The messages page links to the trace.
	b.open(t, fmt.Sprintf("%s/messages?id=%d", base, res.MsgID))
	if !b.eval(t, fmt.Sprintf(`!!document.querySelector('a[href="/trace?id=%d"]')`, res.MsgID)) {
		t.Error("the message page does not link to its trace")
	}
	if code := getJSON(t, base+"/api/v1/trace?id=x", nil); code != 400 {
		t.Errorf("bad id: %d, want 400", code)
	}

	// A traced message delivered by the broker (pop) and acknowledged: its push events show.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := client.NewProducer(client.Config{ZKConnect: f.zk, ZKRoot: "/meta", Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := p.SendToPartition(ctx, &client.Message{Topic: "orders", Body: []byte("pushed")}, client.Partition{BrokerID: 0, Partition: 1})
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	svc := f.b.Pop()
	var handle string
	waitFor(t, "the pushed message popped", func() bool {
		ds, err := svc.Receive(ctx, "packers", "orders", nil, 64, time.Minute)
		for _, d := range ds {
			if d.MsgID == pushed.MsgID {
				handle = d.Handle
			} else if err == nil {
				_ = svc.Ack("packers", d.Handle)
			}
		}
		return handle != ""
	})
	if err := svc.Ack("packers", handle); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the push events in /api/v1/trace", func() bool {
		l = httpapi.TraceLookup{}
		if getJSON(t, fmt.Sprintf("%s/api/v1/trace?id=%d", base, pushed.MsgID), &l) != 200 || len(l.Traces) != 1 {
			return false
		}
		n := map[trace.Type]int{}
		for _, e := range l.Traces[0].Events {
			n[e.Type]++
		}
		return n[trace.Push] == 1 && n[trace.PushAck] == 1
	})
	text = b.open(t, fmt.Sprintf("%s/trace?id=%d", base, pushed.MsgID))
	for _, w := range []string{"push", "push-ack", "packers", "acknowledged"} {
		if !strings.Contains(text, w) {
			t.Errorf("push timeline lacks %q:\n%s", w, text)
		}
	}
}
