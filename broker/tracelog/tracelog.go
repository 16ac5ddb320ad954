// Package tracelog writes the broker's own message-trace events (delayed
// deliveries, give-backs, dead letters, broker-managed delivery) to the
// %TRACE% topic through the store, in batches, for messages whose producer
// traces them (docs/trace.md).
package tracelog

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// Traced reports whether a record is of a traced producer: its sysFlag has
// protocol.SysFlagTraced (the producer's connection sent `trace on`), or
// its properties carry the mark of earlier clients (_trace=1).
func Traced(sysFlag uint16, props []byte) bool {
	if sysFlag&protocol.SysFlagTraced != 0 {
		return true
	}
	if len(props) == 0 {
		return false
	}
	v, ok := protocol.PropertyRaw(props, trace.PropTrace)
	return ok && string(v) == "1"
}

const (
	maxQueued   = 65536 // events waiting; beyond, Emit drops and counts
	batchEvents = 256   // events per record
	flushEvery  = 100 * time.Millisecond
)

// Writer batches events and appends them as %TRACE% records. Emit never
// blocks: it copies the event into a bounded queue under a mutex (the
// writer goroutine swaps the queue out whole, waking once per batch).
type Writer struct {
	st   *store.Store
	host string
	log  *slog.Logger

	mu    sync.Mutex
	queue []trace.Event // guarded by mu
	spare []trace.Event
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	written, dropped, failed atomic.Uint64
}

// New starts a writer over st; host names the broker in its events (its
// address).
func New(st *store.Store, host string, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	w := &Writer{st: st, host: host, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Emit queues e (Host is filled in when empty). A nil Writer ignores it.
func (w *Writer) Emit(e *trace.Event) {
	if w == nil {
		return
	}
	w.mu.Lock()
	if len(w.queue) >= maxQueued {
		w.mu.Unlock()
		w.dropped.Add(1)
		return
	}
	w.queue = append(w.queue, *e)
	if w.queue[len(w.queue)-1].Host == "" {
		w.queue[len(w.queue)-1].Host = w.host
	}
	n := len(w.queue)
	w.mu.Unlock()
	if n == batchEvents {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns the events written, dropped (queue full) and lost (the
// store refused the record).
func (w *Writer) Stats() (written, dropped, failed uint64) {
	if w == nil {
		return 0, 0, 0
	}
	return w.written.Load(), w.dropped.Load(), w.failed.Load()
}

// Close writes what is queued and stops the writer (before the store
// closes).
func (w *Writer) Close() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Writer) run() {
	defer close(w.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	var b trace.Batch
	for {
		var last bool
		select {
		case <-w.kick:
		case <-t.C:
		case <-w.stop:
			last = true
		}
		w.mu.Lock()
		q := w.queue
		w.queue = w.spare[:0]
		w.mu.Unlock()
		for i := range q {
			b.Add(&q[i])
			if b.N >= batchEvents || b.Full(32<<10) {
				w.write(&b)
			}
		}
		if b.N > 0 {
			w.write(&b)
		}
		clear(q)
		w.spare = q[:0]
		if last {
			return
		}
	}
}

func (w *Writer) write(b *trace.Batch) {
	n := uint64(b.N)
	m := store.Message{Topic: trace.Topic, Partition: 0, Properties: b.Props, Data: b.Data}
	_, _, err := w.st.AppendAsync(&m)
	if err == nil {
		err = w.st.WriteOut()
	}
	b.Reset()
	if err != nil {
		if w.failed.Add(n) == n {
			w.log.Warn("broker trace events lost", "events", n, "err", err)
		}
		return
	}
	w.written.Add(n)
}
