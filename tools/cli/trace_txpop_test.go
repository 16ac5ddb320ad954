package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// newTraceCluster is newCluster with one broker and extra server.ini lines.
func newTraceCluster(t *testing.T, topics map[string]int, extraINI string) *cluster {
	t.Helper()
	c := &cluster{t: t, zk: zktest.Server(t)}
	c.brokers = append(c.brokers, brokertest.RunBroker(t, brokertest.Options{ZK: c.zk, Topics: topics, ExtraINI: extraINI}))
	for topic, parts := range topics {
		zktest.Eventually(t, 20*time.Second, func() bool {
			out, _, code := c.run("topics", "describe", topic, "--json")
			var d topicDetail
			return code == 0 && json.Unmarshal([]byte(out), &d) == nil && len(d.Partitions) == parts
		}, "topic %s not registered", topic)
	}
	return c
}

// waitTrace polls `metaq trace <id> --json` until every check holds, and checks time order.
func waitTrace(t *testing.T, c *cluster, id int64, checks map[string]func(e *trace.Event) bool) client.MessageTrace {
	t.Helper()
	var mt client.MessageTrace
	missing := func() []string {
		var m []string
		for name, f := range checks {
			found := false
			for i := range mt.Events {
				if f(&mt.Events[i]) {
					found = true
					break
				}
			}
			if !found {
				m = append(m, name)
			}
		}
		return m
	}
	var last string
	zktest.Eventually(t, 60*time.Second, func() bool {
		out, _, code := c.run("trace", strconv.FormatInt(id, 10), "--json")
		last = out
		if code != 0 {
			return false
		}
		mt = client.MessageTrace{}
		if err := json.Unmarshal([]byte(out), &mt); err != nil {
			t.Fatalf("bad JSON: %v\n%s", err, out)
		}
		return len(missing()) == 0
	}, "trace of %d lacks %v:\n%s", id, missing(), last)
	for i := 1; i < len(mt.Events); i++ {
		if mt.Events[i].Time < mt.Events[i-1].Time {
			t.Fatalf("events out of time order at %d:\n%s", i, last)
		}
	}
	return mt
}

type txListener struct{ checked atomic.Int64 }

func (l *txListener) ExecuteLocal(context.Context, *client.Message) (client.TxState, error) {
	return client.TxUnknown, nil // decided later: the broker checks back
}

func (l *txListener) Check(context.Context, *client.Message) client.TxState {
	l.checked.Add(1)
	return client.TxCommit
}

// TestTraceTransaction: a traced transactional message whose local transaction answers
// "unknown" is checked back by the broker and committed on the check's answer; its trace (asked
// by the half message's id, the id the producer got) shows the send, the half message, the
// check, the answer, the commit with the committed record, and a traced group's handler calls
// of the committed copy, in time order; asked by the committed copy's id it is the same message.
func TestTraceTransaction(t *testing.T) {
	c := newTraceCluster(t, map[string]int{"orders": 1}, "transactionCheckInterval=300\n")
	l := &txListener{}
	cfg := client.Config{ZKConnect: c.zk, Trace: true, TraceOptions: client.TraceOptions{Group: "shop", FlushInterval: 50 * time.Millisecond}}
	tp, err := client.NewTransactionProducer(cfg, "shop", l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, state, err := tp.SendInTransaction(ctx, &client.Message{Topic: "orders", Body: []byte("tx-hello"), Keys: []string{"tx-1"}})
	if err != nil || state != client.TxUnknown {
		t.Fatalf("SendInTransaction: %v %v", state, err)
	}
	half := res.MsgID

	var got atomic.Int64
	var committed atomic.Int64
	ccfg := client.Config{ZKConnect: c.zk, Trace: true, TraceOptions: client.TraceOptions{FlushInterval: 50 * time.Millisecond}}
	cons, err := client.NewConsumer(ccfg, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe("orders", "*", func(_ context.Context, m *client.Message) error {
		if string(m.Body) == "tx-hello" {
			committed.Store(m.MsgID)
			got.Add(1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 60*time.Second, func() bool { return got.Load() > 0 }, "the committed message was not consumed (checks %d)", l.checked.Load())
	cons.Close()
	tp.Close()
	copyID := committed.Load()

	mt := waitTrace(t, c, half, map[string]func(e *trace.Event) bool{
		"produce": func(e *trace.Event) bool {
			return e.Type == trace.Produce && e.OK && e.Topic == "orders" && e.Group == "shop"
		},
		"half store": func(e *trace.Event) bool { return e.Type == trace.Store && e.RecordID == 0 && e.Topic == "%TX_HALF%" },
		"tx-half":    func(e *trace.Event) bool { return e.Type == trace.TxHalf && e.Group == "shop" && e.Topic == "orders" },
		"tx-check":   func(e *trace.Event) bool { return e.Type == trace.TxCheck && e.Attempt >= 1 && e.OK },
		"tx-answer": func(e *trace.Event) bool {
			return e.Type == trace.TxAnswer && strings.Contains(e.Detail, "answer to check") && strings.HasSuffix(e.Detail, "commit")
		},
		"tx-commit": func(e *trace.Event) bool {
			return e.Type == trace.TxCommit && e.RecordID == copyID && e.Topic == "orders" && e.Offset >= 0
		},
		"commit store": func(e *trace.Event) bool { return e.Type == trace.Store && e.RecordID == copyID && e.Topic == "orders" },
		"consumed": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "billing" && e.OK && e.MsgID == half && e.RecordID == copyID
		},
	})
	if mt.MsgID != half || mt.Topic != "orders" {
		t.Errorf("trace header %+v", mt)
	}
	table := c.mustRun("trace", strconv.FormatInt(half, 10))
	t.Logf("metaq trace %d:\n%s", half, table)
	for _, w := range []string{"tx-half", "tx-check", "tx-answer", "tx-commit", "consume-end"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q", w)
		}
	}
	// Asked by the committed copy's id: the same timeline.
	out := c.mustRun("trace", strconv.FormatInt(copyID, 10), "--json")
	var byCopy client.MessageTrace
	if err := json.Unmarshal([]byte(out), &byCopy); err != nil || byCopy.MsgID != half || byCopy.Asked != copyID {
		t.Fatalf("trace of the committed copy: %v\n%s", err, out)
	}
}

// TestTracePushDelivery: a traced message delivered by the broker (pop) to a group whose member
// fails it once (released, delivered again, acknowledged) and to a group that never
// acknowledges it (the lock runs out: delivered again; then rejected: dead-lettered) shows every
// delivery with its attempt, the release, the redelivery after the lock ran out, the ack, the
// reject and the dead letter, and the traced PushConsumer's own handler calls (begin and end of
// both attempts, with their cost and result, and the release it decided), in time order.
func TestTracePushDelivery(t *testing.T) {
	c := newTraceCluster(t, map[string]int{"jobs": 1}, "")
	out := c.mustRun("produce", "--topic", "jobs", "--message", "work", "--trace", "--json")
	rows := jsonLines[sentRow](t, out)
	if len(rows) != 1 {
		t.Fatalf("produce printed %q", out)
	}
	id := rows[0].MsgID

	// Group "workers": a PushConsumer whose handler fails the first time.
	var calls atomic.Int64
	pc, err := client.NewPushConsumer(client.Config{ZKConnect: c.zk, Trace: true,
		TraceOptions: client.TraceOptions{FlushInterval: 50 * time.Millisecond}}, "workers", client.PushOptions{Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("jobs", "*", func(_ context.Context, m *client.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("first time fails")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()

	// Group "lazy": popped through the broker's service, never acknowledged, then rejected.
	svc := c.brokers[0].Pop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d1, err := svc.Receive(ctx, "lazy", "jobs", nil, 1, 200*time.Millisecond)
	if err != nil || len(d1) != 1 || d1[0].Attempt != 1 {
		t.Fatalf("first pop: %v %+v", err, d1)
	}
	var d2 []pop2
	zktest.Eventually(t, 30*time.Second, func() bool {
		ds, err := svc.Receive(ctx, "lazy", "jobs", nil, 1, 30*time.Second)
		if err != nil || len(ds) == 0 {
			return false
		}
		d2 = append(d2, pop2{ds[0].Handle, ds[0].Attempt})
		return true
	}, "no redelivery after the lock ran out")
	if d2[0].attempt != 2 {
		t.Fatalf("redelivery attempt %d", d2[0].attempt)
	}
	if err := svc.Reject("lazy", d2[0].handle); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 60*time.Second, func() bool { return calls.Load() >= 2 }, "the push consumer did not get the message again")

	mt := waitTrace(t, c, id, map[string]func(e *trace.Event) bool{
		"produce": func(e *trace.Event) bool { return e.Type == trace.Produce && e.OK },
		"push 1 workers": func(e *trace.Event) bool {
			return e.Type == trace.Push && e.Group == "workers" && e.Attempt == 1
		},
		"release": func(e *trace.Event) bool {
			return e.Type == trace.PushRelease && e.Group == "workers" && e.Attempt == 1
		},
		"push 2 workers": func(e *trace.Event) bool {
			return e.Type == trace.Push && e.Group == "workers" && e.Attempt == 2 && strings.Contains(e.Detail, "after a release")
		},
		"ack": func(e *trace.Event) bool { return e.Type == trace.PushAck && e.Group == "workers" && e.Attempt == 2 },
		"push 1 lazy": func(e *trace.Event) bool {
			return e.Type == trace.Push && e.Group == "lazy" && e.Attempt == 1
		},
		"lock ran out": func(e *trace.Event) bool {
			return e.Type == trace.Push && e.Group == "lazy" && e.Attempt == 2 && strings.Contains(e.Detail, "lock of attempt 1 ran out")
		},
		"reject": func(e *trace.Event) bool { return e.Type == trace.PushReject && e.Group == "lazy" && !e.OK },
		"dlq": func(e *trace.Event) bool {
			return e.Type == trace.DeadLetter && e.Group == "lazy" && e.Err == "rejected"
		},
		// The PushConsumer's own events (Config.Trace).
		"handler 1 begins": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeBegin && e.Group == "workers" && e.Attempt == 1 && e.Client != ""
		},
		"handler 1 fails": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "workers" && e.Attempt == 1 && !e.OK && e.Err == "first time fails"
		},
		"handler 1 released": func(e *trace.Event) bool {
			return e.Type == trace.Retry && e.Group == "workers" && e.Attempt == 1 && strings.Contains(e.Detail, "released to the broker")
		},
		"handler 2 begins": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeBegin && e.Group == "workers" && e.Attempt == 2
		},
		"handler 2 succeeds": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "workers" && e.Attempt == 2 && e.OK
		},
	})
	if mt.MsgID != id || !mt.Found {
		t.Errorf("trace header %+v", mt)
	}
	table := c.mustRun("trace", strconv.FormatInt(id, 10))
	t.Logf("metaq trace %d:\n%s", id, table)
	for _, w := range []string{"push", "push-release", "push-ack", "push-reject", "dlq", "ran out"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q", w)
		}
	}
}

type pop2 struct {
	handle  string
	attempt int
}

// TestTraceLocalTransaction: puts inside the `transaction` command's transactions, on a
// connection that sent `trace on`, are traced by the broker: a local transaction committed in
// one phase (tx-put with the txKey, tx-commit naming the committed record, its store, and a
// traced group's handler calls of it), an XA transaction prepared and committed in two phases
// (tx-put, tx-prepare naming the half record, tx-commit), and a rolled-back one (tx-put,
// tx-rollback, found by its key). Asked by the committed record's id, the trace is the same
// message's.
func TestTraceLocalTransaction(t *testing.T) {
	c := newTraceCluster(t, map[string]int{"orders": 1}, "")
	conn := c.brokers[0].Dial()
	defer conn.Close()
	opaque := int32(0)
	cmd := func(line string) protocol.Reply {
		t.Helper()
		opaque++
		conn.Send(line + " " + strconv.Itoa(int(opaque)) + "\r\n")
		r := conn.Reply()
		if r.Code != 200 || r.Opaque != opaque {
			t.Fatalf("%s: %+v %q", line, r, r.Body)
		}
		return r
	}
	put := func(key, txKey, body string) int64 {
		t.Helper()
		data := "keys=" + key + "\n" + body // flag bit 1: a properties line
		opaque++
		conn.Send("put orders 0 " + strconv.Itoa(len(data)) + " 2 " + txKey + " " + strconv.Itoa(int(opaque)) + "\r\n" + data)
		r := conn.Reply()
		if r.Code != 200 {
			t.Fatalf("put in %s: %+v %q", txKey, r, r.Body)
		}
		id, _, off, err := protocol.ParsePutResult(r.Body)
		if err != nil || off != -1 {
			t.Fatalf("put result %q: %v", r.Body, err)
		}
		return id
	}
	// Record 0 first: an id of 0 cannot be an event's rid (0 there means "the message's own").
	conn.Put("orders", 0, "untraced", 1000)
	cmd("trace on")
	cmd("transaction TX:s1:1 s1 BEGIN")
	local := put("order-local", "TX:s1:1", "local")
	cmd("transaction TX:s1:1 s1 COMMIT_ONE_PHASE")
	const xid = "XID:1:0a0b:01:uq1"
	cmd("transaction " + xid + " s1 BEGIN")
	xa := put("order-xa", xid, "xa")
	cmd("transaction " + xid + " s1 PREPARE")
	cmd("transaction " + xid + " s1 COMMIT_TWO_PHASE")
	cmd("transaction TX:s1:2 s1 BEGIN")
	rolled := put("order-rb", "TX:s1:2", "rolled back")
	cmd("transaction TX:s1:2 s1 ROLLBACK")

	// A traced group consumes the committed messages.
	var got atomic.Int64
	cfg := client.Config{ZKConnect: c.zk, Trace: true, TraceOptions: client.TraceOptions{FlushInterval: 50 * time.Millisecond}}
	cons, err := client.NewConsumer(cfg, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe("orders", "*", func(context.Context, *client.Message) error { got.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	zktest.Eventually(t, 60*time.Second, func() bool { return got.Load() >= 2 }, "the committed messages were not consumed")

	var committed int64
	mt := waitTrace(t, c, local, map[string]func(e *trace.Event) bool{
		"tx-put": func(e *trace.Event) bool {
			return e.Type == trace.TxPut && e.Keys == "order-local" && strings.Contains(e.Detail, "local transaction TX:s1:1")
		},
		"tx-commit": func(e *trace.Event) bool {
			if e.Type == trace.TxCommit && e.RecordID > 0 && e.Offset >= 0 && strings.Contains(e.Detail, "committed by local transaction") {
				committed = e.RecordID
				return true
			}
			return false
		},
		"store": func(e *trace.Event) bool { return e.Type == trace.Store && e.RecordID > 0 && e.Topic == "orders" },
		"consume-end": func(e *trace.Event) bool {
			return e.Type == trace.ConsumeEnd && e.Group == "billing" && e.OK
		},
	})
	if mt.Topic != "orders" {
		t.Errorf("trace header %+v", mt)
	}
	waitTrace(t, c, xa, map[string]func(e *trace.Event) bool{
		"tx-put": func(e *trace.Event) bool {
			return e.Type == trace.TxPut && strings.Contains(e.Detail, "XA transaction "+xid)
		},
		"tx-prepare": func(e *trace.Event) bool { return e.Type == trace.TxPrepare && e.RecordID > 0 },
		"half store": func(e *trace.Event) bool { return e.Type == trace.Store && e.Topic == "%TX_HALF%" },
		"tx-commit": func(e *trace.Event) bool {
			return e.Type == trace.TxCommit && e.RecordID > 0 && strings.Contains(e.Detail, "committed in two phases")
		},
		"consume-end": func(e *trace.Event) bool { return e.Type == trace.ConsumeEnd && e.Group == "billing" },
	})
	waitTrace(t, c, rolled, map[string]func(e *trace.Event) bool{
		"tx-put": func(e *trace.Event) bool { return e.Type == trace.TxPut && e.Keys == "order-rb" },
		"tx-rollback": func(e *trace.Event) bool {
			return e.Type == trace.TxRollback && !e.OK && strings.Contains(e.Detail, "TX:s1:2")
		},
	})
	// By the committed record's id: the same message.
	out := c.mustRun("trace", strconv.FormatInt(committed, 10), "--json")
	var asked client.MessageTrace
	if err := json.Unmarshal([]byte(out), &asked); err != nil || asked.MsgID != local || asked.Asked != committed {
		t.Fatalf("trace %d: %v %s", committed, err, out)
	}
	// By key: the rolled-back message is found.
	out = c.mustRun("trace", "--key", "orders", "order-rb", "--json")
	if !strings.Contains(out, `"tx-rollback"`) {
		t.Fatalf("trace --key orders order-rb:\n%s", out)
	}
	t.Logf("metaq trace %d:\n%s", local, c.mustRun("trace", strconv.FormatInt(local, 10)))
}
