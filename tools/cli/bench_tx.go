package cli

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/protocol"
)

// txBenchOpts are the flags of `metaq bench tx` (docs/transactions.md, "Performance").
type txBenchOpts struct {
	size   int    // messages per local transaction
	phases string // plain,local,half
}

func addTxBenchFlags(f *pflag.FlagSet, o *txBenchOpts) {
	f.IntVar(&o.size, "tx-size", 10, "tx: messages per local transaction")
	f.StringVar(&o.phases, "tx-phases", "plain,local,half", "tx: phases to run (plain puts, local transactions, half message + txend commit)")
}

// txUnit is one kind of unit the tx workload pipelines on a connection: it
// encodes unit n (its replies carry opaques n*64+k) and tells from a reply
// whether it completes the unit, and what to send next for it (txend after
// a half message's reply).
type txUnit struct {
	name    string
	encode  func(dst []byte, conn, n int, part int32) []byte
	replies func(kind int) bool // the reply of kind k ends the unit
	follow  func(dst []byte, r *protocol.Reply, n int) ([]byte, bool)
}

// txPhases are the tx workload's phases, in --tx-phases order.
func (b *bencher) txPhases() ([]func(context.Context) benchkit.Result, error) {
	if b.o.tx.size < 1 || b.o.tx.size > 60 {
		return nil, usageErr("--tx-size must be 1..60")
	}
	var out []func(context.Context) benchkit.Result
	base := new(float64)
	for _, ph := range splitList([]string{b.o.tx.phases}) {
		switch ph {
		case "plain", "local", "half":
			ph := ph
			out = append(out, func(ctx context.Context) benchkit.Result { return b.txPhase(ctx, ph, base) })
		default:
			return nil, usageErr("unknown --tx-phases entry %q (want plain, local, half)", ph)
		}
	}
	return out, nil
}

var txHalfPrefix = []byte("tx=half&pgroup=metaq-bench\n")

func (b *bencher) txUnit(name string) txUnit {
	body := b.body
	half := append(append([]byte(nil), txHalfPrefix...), body...)
	size := b.o.tx.size
	topic := b.o.topic
	switch name {
	case "local":
		return txUnit{name: "tx-local",
			encode: func(dst []byte, conn, n int, part int32) []byte {
				sid := "bench-" + strconv.Itoa(conn) + "-" + strconv.Itoa(n%256)
				key := "TX:" + sid + ":" + strconv.Itoa(n)
				dst = protocol.AppendTransaction(dst, key, sid, "BEGIN", 0, "", int32(n*64))
				for i := 0; i < size; i++ {
					dst = protocol.AppendPut(dst, topic, part, 0, protocol.ChecksumNone, key, int32(n*64+1), body)
				}
				return protocol.AppendTransaction(dst, key, sid, "COMMIT_ONE_PHASE", 0, "", int32(n*64+2))
			},
			replies: func(kind int) bool { return kind == 2 }}
	case "half":
		return txUnit{name: "tx-half-commit",
			encode: func(dst []byte, conn, n int, part int32) []byte {
				return protocol.AppendPut(dst, topic, part, protocol.FlagHasProperties, protocol.ChecksumNone, "", int32(n*64), half)
			},
			replies: func(kind int) bool { return kind == 1 },
			follow: func(dst []byte, r *protocol.Reply, n int) ([]byte, bool) {
				if int(r.Opaque)%64 != 0 {
					return dst, false
				}
				id, _, _, err := protocol.ParsePutResult(r.Body)
				if err != nil {
					return dst, false
				}
				return protocol.AppendTxEnd(dst, id, "commit", int32(n*64+1)), true
			}}
	}
	return txUnit{name: "tx-plain",
		encode: func(dst []byte, conn, n int, part int32) []byte {
			return protocol.AppendPut(dst, topic, part, 0, protocol.ChecksumNone, "", int32(n*64), body)
		},
		replies: func(kind int) bool { return kind == 0 }}
}

// txPhase runs one phase for --duration on --conns connections per broker
// partition set, --window units in flight per connection.
func (b *bencher) txPhase(ctx context.Context, name string, base *float64) benchkit.Result {
	u := b.txUnit(name)
	r := b.result(u.name)
	parts, err := b.partitions(ctx, b.o.topic)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if len(parts) == 0 {
		r.Error = "no partition of " + b.o.topic
		return r
	}
	b.settle(ctx)
	d := b.o.duration
	var units atomic.Int64
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go endPhase(pctx, cancel, d, units.Load)
	prog := b.progress(u.name, units.Load)
	m := b.startCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < max(1, b.o.conns); c++ {
		p := parts[c%len(parts)]
		wg.Go(func() {
			if err := b.txConn(pctx, u, c, p, &units); err != nil && pctx.Err() == nil {
				fail(err)
				cancel()
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	prog.Stop()
	if firstErr != nil {
		r.Error = firstErr.Error()
		return r
	}
	n := units.Load()
	msgs := n
	if name == "local" {
		msgs = n * int64(b.o.tx.size)
	}
	m.set(&r, msgs)
	r.SetThroughput(msgs, el)
	rate := float64(n) / el.Seconds()
	switch name {
	case "plain":
		*base = rate
		b.notes(&r, fmt.Sprintf("plain puts (the baseline): %.0f puts/s", rate))
	case "local":
		b.notes(&r, fmt.Sprintf("%.0f local transactions/s of %d messages (BEGIN, %d transactional puts, COMMIT_ONE_PHASE, pipelined)", rate, b.o.tx.size, b.o.tx.size))
	case "half":
		r.BaselineMsgsPerSec = *base
		if *base > 0 {
			r.DegradationRatio = rate / *base
		}
		b.notes(&r, fmt.Sprintf("%.0f transactional messages/s (half message, then txend commit once it is answered)", rate))
	}
	b.notes(&r, fmt.Sprintf("%d connection(s), %d units in flight each, raw protocol; broker flush_mode %s", max(1, b.o.conns), b.o.window, b.flushMode(ctx)))
	return r
}

// endPhase cancels a phase once d has passed and done() reports at least
// one finished unit: a phase that finished nothing measured nothing (a
// loaded machine can hold a short phase's first fsync past its end). It
// returns when ctx ends.
func endPhase(ctx context.Context, cancel context.CancelFunc, d time.Duration, done func() int64) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for done() == 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	cancel()
}

// txConn pipelines units of u on one connection until ctx ends, in one
// goroutine: it writes --window units, then reads replies; once it has read
// every reply that arrived (the next one would need a read), it writes in one
// write the follow-up requests those replies asked for (txend after a half
// message's reply) and as many new units as finished — a producer that
// answers everything it has heard at once. Every phase runs through this
// same loop, the baseline included.
func (b *bencher) txConn(ctx context.Context, u txUnit, conn int, p benchPart, units *atomic.Int64) error {
	nc, err := b.app.dialRaw(ctx, p.addr) // TLS and auth as the flags say (security.go)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	quiet := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	n := 0
	var out []byte
	add := func(k int) {
		for ; k > 0; k-- {
			n++
			out = u.encode(out, conn, n%(1<<24), int32(p.partition))
		}
	}
	add(max(1, b.o.window))
	br := bufio.NewReaderSize(nc, 256<<10)
	rr := protocol.NewReplyReader(br, 1<<20)
	done := 0
	for {
		if br.Buffered() == 0 { // the next reply needs a read: answer what we have heard
			units.Add(int64(done))
			add(done)
			done = 0
			if len(out) > 0 {
				if _, err := nc.Write(out); err != nil {
					return quiet(err)
				}
				out = out[:0]
			}
		}
		r, err := rr.Next()
		if err != nil {
			return quiet(err)
		}
		if r.Kind == protocol.ReplyResult && r.Code != protocol.StatusSuccess {
			return quiet(fmt.Errorf("%s: reply %d %q", u.name, r.Code, r.Body))
		}
		k, kind := int(r.Opaque)/64, int(r.Opaque)%64
		if u.follow != nil {
			if req, ok := u.follow(out, &r, k); ok {
				out = req
				continue
			}
		}
		if u.replies(kind) {
			done++
		}
	}
}
