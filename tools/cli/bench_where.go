package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
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

// consumeWhere drains the backlog [starts, ends) twice with the same
// readers: first without a filter (the baseline, same messages, same
// shape), then with gets carrying the --where expression, and reports the
// second with the ratio of the two rates (kept messages per second over
// delivered messages per second). Both passes read the same way (drainSeq).
func (b *bencher) consumeWhere(ctx context.Context, r benchkit.Result, parts []benchPart, starts, ends []int64, total int64) benchkit.Result {
	// Alternating rounds, the best of each kind: a shared machine's noise
	// hits both equally and the best round is the least disturbed one.
	const rounds = 3
	var base, kept drainCount
	var baseCPU, keptCPU passCPU // summed over the rounds of each kind
	m := b.startCPU()
	var keptSum int64
	for round := range rounds {
		c := b.startCPU()
		bc, err := b.drainSeq(ctx, fmt.Sprintf("%s (unfiltered %d/%d)", r.Workload, round+1, rounds), parts, starts, ends, "")
		if err != nil {
			r.Error = "unfiltered drain: " + err.Error()
			return r
		}
		baseCPU.add(c, bc.n)
		c = b.startCPU()
		kc, err := b.drainSeq(ctx, fmt.Sprintf("%s (--where %d/%d)", r.Workload, round+1, rounds), parts, starts, ends, b.o.where)
		if err != nil {
			r.Error = "drain: " + err.Error()
			return r
		}
		keptCPU.add(c, kc.n)
		if round == 0 || bc.rate() > base.rate() {
			base = bc
		}
		if round == 0 || kc.rate() > kept.rate() {
			kept = kc
		}
		keptSum += bc.n + kc.n
	}
	m.set(&r, keptSum) // CPU per delivered message over all rounds
	r.SetThroughput(kept.n, kept.el)
	note := fmt.Sprintf("--where %q kept %s of %s backlog messages at %.0f msgs/s (scanned %.0f/s); the same backlog unfiltered, same readers: %.0f msgs/s; kept rate = %.1f%% of the unfiltered rate (best of %d alternating rounds each); %d partition(s) cut into %d ranges each, one get of %d bytes in flight per range (Admin.FetchWith, CRC-checked, decoded, expression checked again)",
		b.o.where, benchkit.FormatCount(kept.n), benchkit.FormatCount(total), kept.rate(), float64(total)/kept.el.Seconds(), base.rate(), 100*kept.rate()/base.rate(), rounds, len(parts), b.o.fetchDepth, b.o.fetchSize)
	if baseCPU.msgs > 0 && keptCPU.msgs > 0 {
		note += fmt.Sprintf("; CPU per delivered message (all rounds): unfiltered %s, filtered (per kept message) %s, ratio %.1f%%",
			baseCPU, keptCPU, 100*baseCPU.perMsg()/keptCPU.perMsg())
	}
	b.notes(&r, note)
	return r
}

// passCPU is the CPU the server and this process used over drains.
type passCPU struct {
	server, client time.Duration
	msgs           int64
}

func (p *passCPU) add(c cpuMeter, n int64) {
	if c.m != nil {
		if d, err := c.m.Elapsed(); err == nil {
			p.server += d
		}
	}
	if c.self != nil {
		if d, err := c.self.Elapsed(); err == nil {
			p.client += d
		}
	}
	p.msgs += n
}

func (p passCPU) perMsg() float64 { return float64(p.server+p.client) / float64(p.msgs) }

func (p passCPU) String() string {
	return fmt.Sprintf("server %.2f µs + client %.2f µs", benchkit.CPUPerMsgUS(p.server, p.msgs), benchkit.CPUPerMsgUS(p.client, p.msgs))
}

type drainCount struct {
	n  int64
	el time.Duration
}

func (d drainCount) rate() float64 { return float64(d.n) / d.el.Seconds() }

// drainSeq reads every partition from starts to ends: each partition is cut
// into --fetch-depth contiguous ranges, each drained by its own reader with
// one get in flight that follows NextOffset (301s included), so that
// --fetch-depth gets are in flight per partition even though a filtered
// get's end is not known in advance. A filtered reader asks for the bytes
// it expects to be kept in the rest of its range; its last get may still
// read past the range (what it delivers there is not counted: the next
// range's reader delivers it).
func (b *bencher) drainSeq(ctx context.Context, label string, parts []benchPart, starts, ends []int64, where string) (drainCount, error) {
	var got atomic.Int64
	var errOnce sync.Once
	var drainErr error
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		errOnce.Do(func() { drainErr = err })
		cancel()
	}
	prog := b.progress(label, got.Load)
	recSize := protocol.RecordSize(len(b.o.topic), len("bench=0"), b.o.msgSize)
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range parts {
		depth := int64(b.o.fetchDepth)
		span := max(1, (ends[i]-starts[i]+depth-1)/depth)
		for from := starts[i]; from < ends[i]; from += span {
			to := min(from+span, ends[i])
			wg.Go(func() {
				var kept, scanned int64 // what this reader saw: the density of kept messages
				for off, misses := from, 0; off < to; {
					// Ask for about what is left in the range: all of it unfiltered, the
					// expected kept part (as seen so far, +25%) filtered.
					want := float64(to-off) * float64(recSize)
					if where != "" {
						want *= 1.25 * float64(kept+1) / float64(scanned+10)
					}
					maxBytes := int(min(float64(b.o.fetchSize), max(want, float64(recSize))))
					res, err := b.admin.FetchWith(dctx, p.addr, client.FetchRequest{Topic: b.o.topic, Partition: p.partition,
						Offset: off, MaxBytes: maxBytes, Tags: b.o.tag, Where: where})
					if err != nil {
						fail(err)
						return
					}
					for j := range res.Messages {
						if res.Messages[j].Offset < to {
							got.Add(1)
						}
					}
					kept += int64(len(res.Messages))
					scanned += max(0, res.NextOffset-off)
					if res.NextOffset <= off {
						if misses++; misses > 1000 {
							fail(fmt.Errorf("partition %d-%d: stuck at offset %d", p.brokerID, p.partition, off))
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					misses = 0
					off = res.NextOffset
				}
			})
		}
	}
	wg.Wait()
	el := time.Since(start)
	prog.Stop()
	if drainErr == nil && ctx.Err() != nil {
		drainErr = errors.New("interrupted")
	}
	return drainCount{n: got.Load(), el: el}, drainErr
}
