package client

import (
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol/trace"
)

// BenchmarkTraceSend is the producer trace path's cost per send on the
// goroutine that completes it (the event queued; the writer's encoding and
// the broker's side are not included).
func BenchmarkTraceSend(b *testing.B) {
	w := &traceWriter{kick: make(chan struct{}, 1), opts: TraceOptions{QueueSize: 1 << 30}}
	w.syncClock()
	p := &Producer{trace: w}
	p.cfg.TraceOptions.Group = "g"
	m := &Message{Topic: "bench", Body: make([]byte, 100)}
	s := &sendState{msg: m}
	res := SendResult{MsgID: 1 << 48, Partition: Partition{BrokerID: 1}, Offset: 42}
	b.ReportAllocs()
	for b.Loop() {
		s.t0 = traceClock()
		p.traceSend(s, res, nil, "127.0.0.1:8123", 1)
		if len(w.pqueue) >= 4096 {
			w.giveBack(w.take())
		}
	}
}

// BenchmarkTraceBatchAdd is the writer's cost per event (encoding and
// keying one produce event).
func BenchmarkTraceBatchAdd(b *testing.B) {
	var bt trace.Batch
	e := trace.Event{Type: trace.Produce, MsgID: 1 << 48, Topic: "bench", Time: time.Now().UnixMilli(), Cost: 812, OK: true,
		Host: "app-host-1", Broker: 1, Partition: 3, Offset: 123456, Attempt: 1, Size: 100}
	b.ReportAllocs()
	for b.Loop() {
		e.MsgID++
		e.Offset++
		bt.Add(&e)
		if bt.N == 256 {
			bt.Reset()
		}
	}
}
