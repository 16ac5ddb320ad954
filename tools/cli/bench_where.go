package cli

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
)

// benchWhereVariants is how many distinct messages a --where backlog cycles
// through: message i carries the property bench=i%10, so "bench = 0" keeps
// 10/97 ≈ 10% of them; 97 is prime so that round-robin over the partitions
// spreads the kept ones evenly.
const benchWhereVariants = 97

// consumeMessages are the messages the consume workload's backlog is made
// of.
func (b *bencher) consumeMessages(topic string) []*client.Message {
	if b.o.where == "" {
		return []*client.Message{b.message(topic)}
	}
	msgs := make([]*client.Message, benchWhereVariants)
	for i := range msgs {
		m := b.message(topic)
		m.Properties = map[string]string{"bench": strconv.Itoa(i % 10)}
		msgs[i] = m
	}
	return msgs
}

// consumeWhere drains the backlog [starts, ends) with gets carrying the
// --where expression. A filtered get cannot be pipelined on offset ranges
// (where it stops depends on what matches), so each partition has one
// reader that follows the broker's NextOffset; compare with an unfiltered
// run at --fetch-depth 1 for the same shape, or the default for the best
// unfiltered rate. The rate counts delivered (kept) messages.
func (b *bencher) consumeWhere(ctx context.Context, r benchkit.Result, parts []benchPart, starts, ends []int64, total int64) benchkit.Result {
	var got, scanned atomic.Int64
	var errOnce sync.Once
	var drainErr error
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prog := b.progress(r.Workload, got.Load)
	m := b.startCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			for off, misses := starts[i], 0; off < ends[i]; {
				res, err := b.admin.FetchWith(dctx, p.addr, client.FetchRequest{Topic: b.o.topic, Partition: p.partition,
					Offset: off, MaxBytes: b.o.fetchSize, Tags: b.o.tag, Where: b.o.where})
				if err != nil {
					errOnce.Do(func() { drainErr = err })
					cancel()
					return
				}
				for j := range res.Messages {
					if res.Messages[j].Offset < ends[i] {
						got.Add(1)
					}
				}
				if res.NextOffset <= off {
					if misses++; misses > 1000 {
						errOnce.Do(func() { drainErr = fmt.Errorf("partition %d-%d: stuck at offset %d", p.brokerID, p.partition, off) })
						cancel()
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				misses = 0
				scanned.Add(min(res.NextOffset, ends[i]) - off)
				off = res.NextOffset
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	prog.Stop()
	m.set(&r, got.Load())
	if drainErr != nil {
		r.Error = "drain: " + drainErr.Error()
		return r
	}
	if ctx.Err() != nil {
		r.Error = "interrupted"
		return r
	}
	r.SetThroughput(got.Load(), el)
	b.notes(&r, fmt.Sprintf("--where %q kept %s of %s backlog messages (scanned %.0f/s) from %d partition(s): one get of %d bytes in flight per partition (Admin.FetchWith, CRC-checked, decoded, expression checked again)",
		b.o.where, benchkit.FormatCount(got.Load()), benchkit.FormatCount(total), float64(scanned.Load())/el.Seconds(), len(parts), b.o.fetchSize))
	return r
}
