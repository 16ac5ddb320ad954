package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// sharedBenchOpts are the flags of `metaq bench shared` (docs/push.md, "Benchmarks").
type sharedBenchOpts struct {
	consumers int
	batch     int
	inflight  int64
	lateN     int64
	invisible time.Duration
	settle    time.Duration
	phases    string
}

func addSharedBenchFlags(f *pflag.FlagSet, s *sharedBenchOpts) {
	f.IntVar(&s.consumers, "shared-consumers", 16, "shared: consumers (one connection each) of the group")
	f.IntVar(&s.batch, "shared-batch", 64, "shared: messages per pop (acknowledged with one ack each)")
	f.Int64Var(&s.inflight, "shared-inflight", 1_000_000, "shared: messages held in flight (memory phase); 0 skips it")
	f.Int64Var(&s.lateN, "shared-lateness-count", 20000, "shared: messages left unacknowledged in the lateness phase")
	f.DurationVar(&s.invisible, "shared-invisible", 2*time.Second, "shared: invisibility time of the lateness phase")
	f.DurationVar(&s.settle, "shared-inflight-settle", 6*time.Second, "shared: memory phase: second RSS sample this long after the first (older time slices have gone to the side file by then: popSpillAfterMs)")
	f.StringVar(&s.phases, "shared-phases", "throughput,lateness,inflight", "shared: phases to run")
}

func (b *bencher) sharedPhases() ([]func(context.Context) benchkit.Result, error) {
	so := &b.o.shared
	if so.consumers < 1 || so.batch < 1 || so.batch > protocol.PopMaxCount || so.lateN < 1 || so.invisible < 100*time.Millisecond {
		return nil, usageErr("--shared-consumers >= 1, --shared-batch 1..1024, --shared-lateness-count >= 1, --shared-invisible >= 100ms")
	}
	var out []func(context.Context) benchkit.Result
	for _, ph := range strings.Split(so.phases, ",") {
		switch strings.TrimSpace(ph) {
		case "throughput":
			out = append(out, b.sharedThroughput)
		case "lateness":
			out = append(out, b.sharedLateness)
		case "inflight":
			if so.inflight > 0 {
				out = append(out, b.sharedInflight)
			}
		case "":
		default:
			return nil, usageErr("unknown --shared-phases entry %q (want throughput, lateness, inflight)", ph)
		}
	}
	return out, nil
}

// popClient is one raw protocol connection doing pop and ack.
type popClient struct {
	nc   net.Conn
	bw   *bufio.Writer
	rr   *protocol.ReplyReader
	hs   []byte // handles of the last pop
	n    int
	wbuf []byte
}

func (b *bencher) dialPop(addr string) (*popClient, error) {
	nc, err := b.app.dialRaw(context.Background(), addr) // TLS and auth as the flags say (security.go)
	if err != nil {
		return nil, err
	}
	return &popClient{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), rr: protocol.NewReplyReader(bufio.NewReaderSize(nc, 1<<20), 0)}, nil
}

// round sends the ack of the previous pop's handles (when ack) and a new
// pop, then reads both replies; fn sees every delivery.
func (p *popClient) round(topic, group string, max int, invMs, waitMs int64, ack bool, fn func(attempt int, rec []byte)) (int, error) {
	w := p.wbuf[:0]
	acks := 0
	if ack && p.n > 0 {
		w = protocol.AppendFinish(w, protocol.OpAck, group, 0, p.hs, 1)
		acks = 1
	}
	w = protocol.AppendPop(w, topic, group, max, invMs, waitMs, 2, "", "")
	p.wbuf = w
	_ = p.nc.SetDeadline(time.Now().Add(time.Duration(waitMs)*time.Millisecond + 30*time.Second))
	if _, err := p.bw.Write(w); err != nil {
		return 0, err
	}
	if err := p.bw.Flush(); err != nil {
		return 0, err
	}
	for ; acks > 0; acks-- {
		r, err := p.rr.Next()
		if err != nil {
			return 0, err
		}
		if r.Code != 200 {
			return 0, fmt.Errorf("ack: %d %s", r.Code, r.Body)
		}
	}
	r, err := p.rr.Next()
	if err != nil {
		return 0, err
	}
	p.hs, p.n = p.hs[:0], 0
	if r.Kind != protocol.ReplyValue {
		if r.Code == 404 {
			return 0, nil
		}
		return 0, fmt.Errorf("pop: %d %s", r.Code, r.Body)
	}
	err = protocol.PopValue(r.Body, func(attempt int, rec []byte) error {
		part := int64(int32(be32(rec[protocol.OffPartition:])))
		off := int64(be64(rec[protocol.OffQueueOffset:]))
		if p.n > 0 {
			p.hs = append(p.hs, ' ')
		}
		p.hs = append(p.hs, topic...)
		p.hs = append(p.hs, ':')
		p.hs = strconv.AppendInt(p.hs, part, 10)
		p.hs = append(p.hs, ':')
		p.hs = strconv.AppendInt(p.hs, off, 10)
		p.hs = append(p.hs, ':')
		p.hs = strconv.AppendInt(p.hs, int64(attempt), 10)
		p.n++
		if fn != nil {
			fn(attempt, rec)
		}
		return nil
	})
	return p.n, err
}

// ackAll acknowledges the last pop's handles.
func (p *popClient) ackAll(group string) error {
	if p.n == 0 {
		return nil
	}
	p.wbuf = protocol.AppendFinish(p.wbuf[:0], protocol.OpAck, group, 0, p.hs, 1)
	if _, err := p.nc.Write(p.wbuf); err != nil {
		return err
	}
	r, err := p.rr.Next()
	if err == nil && r.Code != 200 {
		err = fmt.Errorf("ack: %d %s", r.Code, r.Body)
	}
	p.hs, p.n = p.hs[:0], 0
	return err
}

func (p *popClient) close() { _ = p.nc.Close() }

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
func be64(b []byte) uint64 { return uint64(be32(b))<<32 | uint64(be32(b[4:])) }

func (b *bencher) sharedAddr(ctx context.Context) (string, int, error) {
	parts, err := b.servedPartitions(ctx, b.o.topic)
	if err != nil {
		return "", 0, err
	}
	if len(parts) == 0 {
		return "", 0, errors.New("topic has no partition")
	}
	return parts[0].addr, len(parts), nil
}

// sharedFill makes sure the topic holds at least n messages from now on.
func (b *bencher) sharedFill(ctx context.Context, label string, n int64) error {
	ph := b.publishPhase(ctx, label+" (fill)", []*client.Message{b.message(b.o.topic)}, 24*time.Hour, n, nil, nil)
	return ph.err
}

func benchGroup(kind string) string {
	return "bench-" + kind + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// sharedThroughput: --count messages, then --shared-consumers consumers of one new group pop
// --shared-batch at a time and acknowledge each batch (pipelined with the next pop) until the
// topic is drained.
func (b *bencher) sharedThroughput(ctx context.Context) benchkit.Result {
	r := b.result("shared-receive-ack")
	addr, nparts, err := b.sharedAddr(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if err := b.sharedFill(ctx, r.Workload, b.o.count); err != nil {
		r.Error = err.Error()
		return r
	}
	b.settle(ctx)
	so := &b.o.shared
	group := benchGroup("shared")
	var got atomic.Int64
	var lastData atomic.Int64 // ns after start when the last non-empty pop was answered
	var firstErr error
	var errMu sync.Mutex
	prog := b.progress(r.Workload, got.Load)
	m := b.startCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < so.consumers; i++ {
		wg.Go(func() {
			p, err := b.dialPop(addr)
			if err == nil {
				defer p.close()
				empty := 0
				for empty < 2 && ctx.Err() == nil {
					var n int
					n, err = p.round(b.o.topic, group, so.batch, 60000, 200, true, nil)
					if err != nil {
						break
					}
					if n == 0 {
						empty++
						continue
					}
					empty = 0
					got.Add(int64(n))
					for at := int64(time.Since(start)); ; {
						if prev := lastData.Load(); at <= prev || lastData.CompareAndSwap(prev, at) {
							break
						}
					}
				}
				if err == nil {
					err = p.ackAll(group)
				}
			}
			if err != nil {
				errMu.Lock()
				firstErr = errors.Join(firstErr, err)
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	// The drain ends with the last delivery; the two empty long polls each consumer makes to
	// see the topic drained are not part of it.
	el := time.Duration(lastData.Load())
	if el <= 0 {
		el = time.Since(start)
	}
	prog.Stop()
	m.set(&r, got.Load())
	if firstErr != nil {
		r.Error = firstErr.Error()
		return r
	}
	r.SetThroughput(got.Load(), el)
	b.notes(&r, fmt.Sprintf("%d consumers of one group, pop %d + one ack per batch (pipelined), topic %s with %d partition(s), %d-byte messages; flush_mode %s",
		so.consumers, so.batch, b.o.topic, nparts, b.o.msgSize, b.flushMode(ctx)))
	return r
}

// sharedLateness: --shared-lateness-count messages received and not acknowledged with
// --shared-invisible; the consumers then long-poll and acknowledge the redeliveries;
// lateness = redelivery received − (first pop sent + invisibility).
func (b *bencher) sharedLateness(ctx context.Context) benchkit.Result {
	r := b.result("shared-redelivery-lateness")
	addr, _, err := b.sharedAddr(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	so := &b.o.shared
	group := benchGroup("late")
	// the group starts at the oldest retained message: skip the backlog first
	if err := b.sharedSkip(ctx, addr, group); err != nil {
		r.Error = err.Error()
		return r
	}
	if err := b.sharedFill(ctx, r.Workload, so.lateN); err != nil {
		r.Error = err.Error()
		return r
	}
	b.settle(ctx)
	p, err := b.dialPop(addr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer p.close()
	type key struct {
		part int32
		off  int64
	}
	var mu sync.Mutex
	due := map[key]time.Time{}
	invMs := so.invisible.Milliseconds()
	for int64(len(due)) < so.lateN && ctx.Err() == nil {
		sent := time.Now()
		n, err := p.round(b.o.topic, group, protocol.PopMaxCount, invMs, 200, false, func(_ int, rec []byte) {
			due[key{int32(be32(rec[protocol.OffPartition:])), int64(be64(rec[protocol.OffQueueOffset:]))}] = sent.Add(so.invisible)
		})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		if n == 0 {
			break
		}
	}
	total := int64(len(due))
	hists := make([]*benchkit.Histogram, so.consumers)
	var got atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	for i := range hists {
		hists[i] = benchkit.NewHistogram()
		h := hists[i]
		wg.Go(func() {
			c, err := b.dialPop(addr)
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			defer c.close()
			deadline := time.Now().Add(so.invisible + time.Minute)
			for got.Load() < total && time.Now().Before(deadline) && ctx.Err() == nil {
				_, err := c.round(b.o.topic, group, so.batch, 60000, 1000, true, func(_ int, rec []byte) {
					now := time.Now()
					k := key{int32(be32(rec[protocol.OffPartition:])), int64(be64(rec[protocol.OffQueueOffset:]))}
					mu.Lock()
					d, ok := due[k]
					delete(due, k)
					mu.Unlock()
					if ok {
						h.Record(max(now.Sub(d), 0))
						got.Add(1)
					}
				})
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
			_ = c.ackAll(group)
		})
	}
	wg.Wait()
	if firstErr != nil {
		r.Error = firstErr.Error()
		return r
	}
	all := benchkit.NewHistogram()
	for _, h := range hists {
		all.Merge(h)
	}
	r.SetThroughput(got.Load(), so.invisible)
	r.SetLatency(all)
	notes := []string{fmt.Sprintf("%d messages received with invisibility %s and not acknowledged; latency = redelivery received by one of %d long-polling consumers − (first pop sent + invisibility), an upper bound", total, so.invisible, so.consumers)}
	if got.Load() < total {
		notes = append(notes, fmt.Sprintf("only %d of %d redelivered within a minute", got.Load(), total))
	}
	b.notes(&r, notes...)
	return r
}

// sharedSkip acknowledges everything a new group would get from the topic's retained
// messages, so that a phase starts at the topic's end.
func (b *bencher) sharedSkip(ctx context.Context, addr, group string) error {
	so := &b.o.shared
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for i := 0; i < so.consumers; i++ {
		wg.Go(func() {
			p, err := b.dialPop(addr)
			if err == nil {
				defer p.close()
				for ctx.Err() == nil {
					var n int
					n, err = p.round(b.o.topic, group, protocol.PopMaxCount, 60000, 0, true, nil)
					if err != nil || n == 0 {
						break
					}
				}
				if err == nil {
					err = p.ackAll(group)
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// sharedInflight: --shared-inflight messages received by one new group and held (not
// acknowledged, invisibility 30 min); reports the broker's anonymous RSS growth.
func (b *bencher) sharedInflight(ctx context.Context) benchkit.Result {
	r := b.result("shared-inflight")
	so := &b.o.shared
	if b.cpuPID <= 0 {
		r.Error = "needs the broker's pid (--server-pid, or --server with a loopback broker)"
		return r
	}
	addr, _, err := b.sharedAddr(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	group := benchGroup("held")
	if err := b.sharedSkip(ctx, addr, group); err != nil {
		r.Error = err.Error()
		return r
	}
	if err := b.sharedFill(ctx, r.Workload, so.inflight); err != nil {
		r.Error = err.Error()
		return r
	}
	b.settle(ctx)
	time.Sleep(2 * time.Second) // a checkpoint of the skipped state
	anon0, rss0, err := procRSS(b.cpuPID)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	p, err := b.dialPop(addr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer p.close()
	var held int64
	start := time.Now()
	for held < so.inflight && ctx.Err() == nil {
		n, err := p.round(b.o.topic, group, protocol.PopMaxCount, 30*60*1000, 200, false, nil)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		if n == 0 {
			break
		}
		held += int64(n)
	}
	el := time.Since(start)
	time.Sleep(2 * time.Second) // a checkpoint with everything in flight
	anon1, rss1, err := procRSS(b.cpuPID)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	time.Sleep(so.settle)
	anon2, rss2, err := procRSS(b.cpuPID)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.SetThroughput(held, el)
	mib := func(kb int64) string { return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64) + " MiB" }
	b.notes(&r, fmt.Sprintf("%d messages received and held unacknowledged by one group (invisibility 30 min; they are redelivered after the run); broker RssAnon %s → %s (%+.1f MiB) 2 s after the last pop, %s (%+.1f MiB) %s later; VmRSS %s → %s → %s (includes the commit log's mapped file pages)",
		held, mib(anon0), mib(anon1), float64(anon1-anon0)/1024, mib(anon2), float64(anon2-anon0)/1024, so.settle, mib(rss0), mib(rss1), mib(rss2)))
	return r
}
