package cli

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
)

// publish-batch: Producer.SendBatchAsync with --batch messages per frame (one mput, one append
// on the broker) and --batch-inflight frames in flight per producer (Kafka counts its in-flight
// limit in requests too). Labelled publish-batch-durable on brokers that flush synchronously.
func (b *bencher) publishBatch(ctx context.Context, name string) benchkit.Result {
	mode := b.flushMode(ctx)
	wl := name
	if wl == "" || wl == "batch" {
		wl = benchkit.WorkloadPublishBatch
		if mode == "sync" {
			wl = benchkit.WorkloadPublishBatchDurable
		}
	}
	r := b.result(wl)
	if wl == benchkit.WorkloadPublishBatchDurable && mode != "sync" {
		r.Error = fmt.Sprintf("%s needs brokers that flush synchronously (unflushThreshold=0), but their flush_mode is %s", wl, mode)
		return r
	}
	batch := make([]*client.Message, b.o.batch)
	for i := range batch {
		batch[i] = b.message(b.o.topic)
	}
	if err := b.prime(ctx, wl, batch[:1], int64(len(b.prods))); err != nil {
		r.Error = "first put: " + err.Error()
		return r
	}
	frames := b.o.batchInflight
	d, limit := b.limits()
	n0, us0, ok0 := b.fsyncStats(ctx)
	ph := b.batchPhase(ctx, wl, batch, frames, d, limit, &r)
	if ph.err != nil {
		r.Error = ph.err.Error()
		return r
	}
	r.SetThroughput(ph.n, ph.el)
	parts := []string{fmt.Sprintf("Producer.SendBatchAsync, %d producer connection(s), %d messages per mput frame, %d frames in flight each",
		len(b.prods), b.o.batch, frames), "broker flush_mode " + mode}
	if note := b.fsyncNote(ctx, n0, us0, ok0, ph.n); note != "" {
		parts = append(parts, note)
	}
	b.notes(&r, parts...)
	return r
}

// batchPhase sends batch with SendBatchAsync from every producer, frames batches in flight each,
// for d (or limit messages). It returns when every frame was answered.
func (b *bencher) batchPhase(ctx context.Context, label string, batch []*client.Message, frames int, d time.Duration, limit int64, r *benchkit.Result) pubPhase {
	var acked, failed, issued atomic.Int64
	var errOnce sync.Once
	var firstErr error
	prog := b.progress(label, acked.Load)
	m := b.startCPU()
	start := time.Now()
	deadline := start.Add(d)
	bg := context.Background()
	var senders sync.WaitGroup
	for _, p := range b.prods {
		senders.Add(1)
		go func() {
			defer senders.Done()
			slots := make(chan struct{}, frames)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			// One callback per size: the last batch of a --count run may be
			// shorter (exactly --count messages are sent).
			cbFor := func(n int64) func([]client.SendResult, error) {
				return func(_ []client.SendResult, err error) {
					if err != nil {
						errOnce.Do(func() { firstErr = err })
						failed.Add(1)
					} else {
						acked.Add(n)
					}
					<-slots
					inflight.Done()
				}
			}
			full := cbFor(int64(len(batch)))
			for {
				msgs, cb := batch, full
				if limit > 0 {
					k := takeBatch(&issued, limit, len(batch))
					if k == 0 {
						return
					}
					if k < len(batch) {
						msgs, cb = batch[:k], cbFor(int64(k))
					}
				}
				if ctx.Err() != nil || (limit == 0 && !time.Now().Before(deadline)) || failed.Load() > 0 {
					return
				}
				slots <- struct{}{}
				inflight.Add(1)
				p.SendBatchAsync(bg, msgs, cb)
			}
		}()
	}
	senders.Wait()
	ph := pubPhase{n: acked.Load(), el: time.Since(start)}
	prog.Stop()
	if r != nil {
		m.set(r, ph.n)
	}
	if n := failed.Load(); n > 0 {
		ph.err = fmt.Errorf("%d batches failed, the first with: %w", n, firstErr)
	} else if ctx.Err() != nil {
		ph.err = ctx.Err()
	}
	return ph
}

// takeBatch claims up to n of the limit messages a --count run sends, for
// every producer together (issued counts the claimed ones); 0 when all are
// claimed.
func takeBatch(issued *atomic.Int64, limit int64, n int) int {
	for {
		had := issued.Load()
		k := min(int64(n), limit-had)
		if k <= 0 {
			return 0
		}
		if issued.CompareAndSwap(had, had+k) {
			return int(k)
		}
	}
}
