package peerbench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
	"github.com/redis/rueidis"
)

// startRedis runs redis-server (Debian's) without persistence, or with an
// append-only file fsynced before every reply (aof).
func startRedis(ctx context.Context, env *Env, dir string, aof bool) (*proc.Server, string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, "", err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--save", "", "--protected-mode", "yes", "--loglevel", "warning"}
	desc := "redis-server Streams, --save '' --appendonly no"
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
		desc = "redis-server Streams, --appendonly yes --appendfsync always"
	} else {
		args = append(args, "--appendonly", "no")
	}
	bin, err := env.redisServer()
	if err != nil {
		return nil, "", err
	}
	srv, err := proc.Start(ctx, "redis-server", dir, "127.0.0.1:"+strconv.Itoa(port), bin, args...)
	if err == nil {
		desc += " (" + redisVersion(bin) + ")"
	}
	return srv, desc, err
}

type redisDriver struct {
	c rueidis.Client
}

// connectRedis uses rueidis with one pipelined connection (blocking XREADs
// get their own pooled connection).
func connectRedis(ctx context.Context, srv *proc.Server, window int) (Driver, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{srv.Addr}, DisableCache: true, PipelineMultiplex: -1,
		DisableRetry: true, ClientSetInfo: rueidis.DisableClientSetInfo, ConnWriteTimeout: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, err
	}
	return &redisDriver{c: c}, nil
}

func (d *redisDriver) Prepare(ctx context.Context, topics []string, consume bool) error { return nil }

func (d *redisDriver) xadd(topic string, msg []byte) rueidis.Completed {
	return d.c.B().Xadd().Key(topic).Id("*").FieldValue().FieldValue("d", rueidis.BinaryString(msg)).Build()
}

// Publish keeps up to window XADDs in flight on one connection: two lanes
// each send a pipelined batch of window/2 and wait for its replies, so one
// batch is written while the other's replies are read.
func (d *redisDriver) Publish(ctx context.Context, topics []string, msg []byte, window int, limit int64, acked *atomic.Int64) error {
	return d.publishLanes(ctx, topics, msg, 2, max(window/2, 1), limit, acked)
}

// PublishBatch pipelines batch XADDs per round trip, inflight pipelines in
// flight on the one connection.
func (d *redisDriver) PublishBatch(ctx context.Context, topic string, msg []byte, batch, inflight int, acked *atomic.Int64) error {
	return d.publishLanes(ctx, []string{topic}, msg, max(1, inflight), batch, 0, acked)
}

func (d *redisDriver) BatchForm() string { return "rueidis DoMulti: pipelines of XADD" }

// publishLanes runs lanes goroutines, each sending a pipelined batch of
// XADDs and waiting for its replies.
func (d *redisDriver) publishLanes(ctx context.Context, topics []string, msg []byte, lanes, batch int, limit int64, acked *atomic.Int64) error {
	pinned := make([]rueidis.Completed, len(topics))
	for i, t := range topics {
		pinned[i] = d.xadd(t, msg).Pin()
	}
	var next atomic.Int64 // messages claimed so far
	errc := make(chan error, lanes)
	for range lanes {
		go func() {
			cmds := make(rueidis.Commands, 0, batch)
			for ctx.Err() == nil {
				n := int64(batch)
				first := next.Add(n) - n
				if limit > 0 {
					if first >= limit {
						break
					}
					n = min(n, limit-first)
				}
				cmds = cmds[:0]
				for i := int64(0); i < n; i++ {
					cmds = append(cmds, pinned[int((first+i)%int64(len(pinned)))])
				}
				for _, r := range d.c.DoMulti(context.Background(), cmds...) {
					if err := r.Error(); err != nil {
						errc <- err
						return
					}
				}
				acked.Add(n)
			}
			errc <- nil
		}()
	}
	var first error
	for range lanes {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *redisDriver) PublishSync(ctx context.Context, topic string, msg []byte, h *benchkit.Histogram, acked *atomic.Int64) error {
	cmd := d.xadd(topic, msg).Pin()
	bg := context.Background()
	for ctx.Err() == nil {
		t0 := time.Now()
		if err := d.c.Do(bg, cmd).Error(); err != nil {
			return err
		}
		h.Record(time.Since(t0))
		acked.Add(1)
	}
	return nil
}

// xread runs XREAD [BLOCK ms] COUNT 1000 STREAMS topic last and calls fn for
// each entry's id and data field. It returns the last id (unchanged when
// nothing arrived).
func (d *redisDriver) xread(ctx context.Context, topic, last string, block time.Duration, fn func(id string, data []byte)) (string, error) {
	var cmd rueidis.Completed
	if block > 0 {
		cmd = d.c.B().Xread().Count(1000).Block(block.Milliseconds()).Streams().Key(topic).Id(last).Build()
	} else {
		cmd = d.c.B().Xread().Count(10000).Streams().Key(topic).Id(last).Build()
	}
	res := d.c.Do(ctx, cmd)
	if err := res.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return last, nil
		}
		return last, err
	}
	streams, err := res.AsMap()
	if err != nil {
		return last, err
	}
	for _, s := range streams {
		entries, err := s.ToArray()
		if err != nil {
			return last, err
		}
		for _, e := range entries {
			kv, err := e.ToArray()
			if err != nil || len(kv) != 2 {
				return last, fmt.Errorf("unexpected XREAD entry: %v", err)
			}
			id, _ := kv[0].ToString()
			var data []byte
			if fn != nil {
				if fv, err := kv[1].ToArray(); err == nil && len(fv) == 2 {
					v, _ := fv[1].ToString()
					data = []byte(v)
				}
			}
			last = id
			if fn != nil {
				fn(id, data)
			}
		}
	}
	return last, nil
}

// Drain reads with XREAD COUNT 1000 from id 0 (no consumer group, no ack:
// like reading a log at an offset).
func (d *redisDriver) Drain(ctx context.Context, topic string, n int64, got *atomic.Int64) error {
	last := "0"
	for got.Load() < n {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("drain: %w after %d of %d", err, got.Load(), n)
		}
		prev := last
		var k int64
		var err error
		last, err = d.xread(ctx, topic, last, 0, func(string, []byte) { k++ })
		if err != nil {
			return err
		}
		got.Add(k)
		if last == prev {
			return fmt.Errorf("drain: stream ended after %d of %d", got.Load(), n)
		}
	}
	return nil
}

// Subscribe long-polls with XREAD BLOCK 100 from "$".
func (d *redisDriver) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := "$"
		for sctx.Err() == nil {
			var err error
			last, err = d.xread(sctx, topic, last, 100*time.Millisecond, func(_ string, b []byte) { fn(b) })
			if err != nil && sctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

// Send is a plain XADD (one round trip); at 1,000 msg/s it returns long
// before the next send is due.
func (d *redisDriver) Send(ctx context.Context, topic string, msg []byte) error {
	return d.c.Do(context.Background(), d.xadd(topic, msg)).Error()
}

func (d *redisDriver) Close() error {
	d.c.Close()
	return nil
}
