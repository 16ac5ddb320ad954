package cli

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol/trace"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// TestTraceEndToEnd: a message produced with --trace, consumed by two traced groups — audit
// fails it once (RetryLater: given back to the broker, redelivered through %RETRY%audit) —
// shows in `metaq trace <msgId> --json` with its produce, store, both groups' handler calls and
// the retry, in time order. Real brokers over TCP, real ZooKeeper.
func TestTraceEndToEnd(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"orders": 1}, false)
	out := c.mustRun("produce", "--topic", "orders", "--message", "hello", "--key", "order-4711", "--trace", "--json")
	rows := jsonLines[sentRow](t, out)
	if len(rows) != 1 {
		t.Fatalf("produce printed %q", out)
	}
	id := rows[0].MsgID

	consume := func(group string, fail bool, got *atomic.Int64) *client.Consumer {
		cfg := client.Config{ZKConnect: c.zk, Trace: true, TraceOptions: client.TraceOptions{FlushInterval: 50 * time.Millisecond}}
		cfg.Consumer.Concurrency = 2 // give-backs go through the broker's retry topic
		cfg.Consumer.CommitInterval = 100 * time.Millisecond
		cons, err := client.NewConsumer(cfg, group)
		if err != nil {
			t.Fatal(err)
		}
		h := func(_ context.Context, m *client.Message) error {
			if m.Properties[client.PropOrigMsgID] != strconv.FormatInt(id, 10) && m.MsgID != id {
				return nil
			}
			if fail && m.ReconsumeTimes == 0 {
				return client.RetryLater(time.Second)
			}
			got.Add(1)
			return nil
		}
		if err := cons.Subscribe("orders", "*", h); err != nil {
			t.Fatal(err)
		}
		if err := cons.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cons
	}
	var billed, audited atomic.Int64
	billing := consume("billing", false, &billed)
	audit := consume("audit", true, &audited)
	zktest.Eventually(t, 60*time.Second, func() bool { return billed.Load() > 0 && audited.Load() > 0 },
		"both groups consumed the message (billed %d, audited %d)", billed.Load(), audited.Load())
	billing.Close()
	audit.Close()
	if st := audit.TraceStats(); st.Written == 0 || st.Dropped != 0 {
		t.Errorf("audit's trace stats %+v: want events written, none dropped", st)
	}

	checks := map[string]func(e *trace.Event) bool{
		"produce": func(e *trace.Event) bool {
			return e.Type == trace.Produce && e.OK && e.Topic == "orders" && e.Keys == "order-4711" && e.Offset == rows[0].Offset
		},
		"store": func(e *trace.Event) bool { return e.Type == trace.Store && e.RecordID == 0 && e.Topic == "orders" },
		"billing begin": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeBegin && e.Group == "billing" && e.Attempt == 1
		},
		"billing ok": func(e *trace.Event) bool { return e.Type == trace.ConsumeEnd && e.Group == "billing" && e.OK },
		"audit failed": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "audit" && !e.OK && e.Reconsume == 0 && strings.Contains(e.Err, "retry later")
		},
		"audit retry": func(e *trace.Event) bool {
			return e.Type == trace.Retry && e.Group == "audit" && strings.Contains(e.Detail, "%RETRY%audit")
		},
		"retry stored": func(e *trace.Event) bool {
			return e.Type == trace.Store && e.RecordID != 0 && e.Topic == "%RETRY%audit"
		},
		"broker retry-stored": func(e *trace.Event) bool {
			return e.Type == trace.Retried && e.Group == "audit" && e.RecordID != 0 && e.Reconsume == 1
		},
		"broker delivered": func(e *trace.Event) bool {
			return e.Type == trace.Delivered && e.Topic == "%RETRY%audit" && e.RecordID != 0
		},
		"audit ok": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "audit" && e.OK && e.Reconsume == 1 && e.RecordID != 0 && e.Topic == "orders"
		},
	}
	mt := waitTrace(t, c, id, checks)
	if !mt.Found || mt.MsgID != id {
		t.Errorf("trace header %+v", mt)
	}
	// The table form and the lookup by key show the same message.
	table := c.mustRun("trace", strconv.FormatInt(id, 10))
	t.Logf("metaq trace %d:\n%s", id, table)
	for _, w := range []string{"produce", "store", "consume-begin", "consume-end", "retry", "retry-stored", "delivered", "billing", "audit"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	byKey := c.mustRun("trace", "--key", "orders", "order-4711", "--json")
	var mts []client.MessageTrace
	if err := json.Unmarshal([]byte(byKey), &mts); err != nil || len(mts) != 1 || mts[0].MsgID != id {
		t.Fatalf("trace --key: %v\n%s", err, byKey)
	}
}

// TestTraceBatchSends: messages sent with Producer.SendBatch (mput frames) and with Linger
// (SendAsync collected into frames) by a traced producer each have their own produce event —
// their own msgId, partition and queue offset — in `metaq trace <msgId> --json`.
func TestTraceBatchSends(t *testing.T) {
	c := newTraceCluster(t, map[string]int{"orders": 2}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := client.Config{ZKConnect: c.zk, Trace: true, TraceOptions: client.TraceOptions{Group: "shop", FlushInterval: 50 * time.Millisecond}}
	p, err := client.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*client.Message
	for i := range 5 {
		msgs = append(msgs, &client.Message{Topic: "orders", Body: []byte("batch " + strconv.Itoa(i))})
	}
	res, err := p.SendBatch(ctx, msgs)
	if err != nil || len(res) != len(msgs) {
		t.Fatalf("SendBatch: %v %+v", err, res)
	}
	cfg.Producer.Linger = 20 * time.Millisecond
	lp, err := client.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lres := make([]client.SendResult, 5)
	errs := make(chan error, len(lres))
	for i := range lres {
		lp.SendAsync(ctx, &client.Message{Topic: "orders", Body: []byte("linger " + strconv.Itoa(i))}, func(r client.SendResult, err error) {
			lres[i] = r
			errs <- err
		})
	}
	for range lres {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	lp.Close()
	for i, r := range append(res, lres...) {
		size := len("batch 0")
		if i >= len(res) {
			size = len("linger 0")
		}
		mt := waitTrace(t, c, r.MsgID, map[string]func(e *trace.Event) bool{
			"produce": func(e *trace.Event) bool {
				return e.Type == trace.Produce && e.OK && e.MsgID == r.MsgID && e.Offset == r.Offset &&
					e.Partition == r.Partition.Partition && e.Group == "shop" && e.Attempt == 1 && e.Size == size
			},
			"store": func(e *trace.Event) bool { return e.Type == trace.Store && e.Offset == r.Offset },
		})
		n := 0
		for _, e := range mt.Events {
			if e.Type == trace.Produce {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("message %d (%+v): %d produce events: %+v", i, r, n, mt.Events)
		}
	}
}
