package client

import (
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol/trace"
)

// BenchmarkTraceSend is a traced async send's whole trace cost per message
// on the client (docs/trace.md, "Cost"): the completing reader's part (the
// produce event encoded into the connection's batch, most as a continuation
// line; a read batch of 32 replies published; a full batch handed on — its
// put to the broker is not included). The clock
// read of the send's start is included; the reply's stamp (one clock read
// per socket read) is not. cpu-ns/op is the process's CPU time per send,
// which moves less than ns/op with the machine's load.
func BenchmarkTraceSend(b *testing.B) {
	w := &traceWriter{kick: make(chan struct{}, 1), opts: TraceOptions{QueueSize: 1 << 30}.withDefaults(), cfg: &Config{},
		slots: make(chan *tracePut, traceInFlight)}
	for range traceInFlight {
		w.slots <- &tracePut{w: w}
	}
	var batches int
	w.put = func(bp *tracePut) { // the put to the broker left out: the batch done, its slot back
		batches++
		bp.batch.Reset()
		w.slots <- bp
	}
	w.cfg.TraceOptions.Group = "g"
	w.syncClock()
	p := &Producer{trace: w}
	c := &brokerConn{addr: "127.0.0.1:8123"}
	c.tl = w.newRing(c.addr)
	cl := newCall()
	cl.by = c
	m := &Message{Topic: "bench", Body: make([]byte, 100)}
	s := &sendState{msg: m, cl: cl}
	res := SendResult{MsgID: 1 << 48, Partition: Partition{BrokerID: 1}, Offset: 42}
	b.ReportAllocs()
	cpu0 := processCPU()
	for i := 0; b.Loop(); i++ {
		s.t0 = traceClock()
		cl.stamp = s.t0 + time.Duration(700+i%200)*time.Microsecond
		res.MsgID += 140
		res.Offset++
		res.Partition.Partition = i & 3
		p.traceSend(s, res, nil, c.addr, 1)
		if i%32 == 31 {
			c.tl.publish()
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if st := w.stats(); st.Dropped != 0 || batches == 0 && b.N > 2*traceBatchEvents {
		b.Fatalf("dropped %d, %d batches", st.Dropped, batches)
	}
}

// BenchmarkTraceSendQueue is the cost on the sending goroutine of a send
// not completed by a connection's reader (Send, SendToPartition): its
// event goes into the writer's queue under its lock.
func BenchmarkTraceSendQueue(b *testing.B) {
	w := &traceWriter{kick: make(chan struct{}, 1), opts: TraceOptions{QueueSize: 1 << 30}, cfg: &Config{}}
	w.syncClock()
	p := &Producer{trace: w}
	m := &Message{Topic: "bench", Body: make([]byte, 100)}
	s := &sendState{msg: m, cl: newCall()}
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
	for i := 0; b.Loop(); i++ {
		e.MsgID += 140
		e.Offset++
		e.Partition = i & 3
		e.Cost = int64(700 + i%200)
		bt.Add(&e)
		if bt.N == 1024 {
			bt.Reset()
		}
	}
}

// processCPU is the process's CPU time (user + system): on a loaded
// machine a benchmark's wall time per op swings with the load, its CPU time
// per op much less.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
