package peerbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS runs nats-server with JetStream on a file store; sync makes every
// write fsync before the ack (sync_interval: always).
func startNATS(ctx context.Context, env *Env, dir string, sync bool) (*proc.Server, string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, "", err
	}
	store := filepath.Join(dir, "jetstream")
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nserver_name: bench\nmax_payload: 1MB\n"+
		"jetstream {\n  store_dir: %q\n  max_file_store: 20GB\n  max_memory_store: 1GB\n", port, store)
	desc := "nats-server file store R1, one stream per topic, fsync every 2 min (default)"
	if sync {
		conf += "  sync_interval: always\n"
		desc = "nats-server file store R1, one stream per topic, sync_interval: always"
	}
	conf += "}\n"
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	srv, err := proc.Start(ctx, "nats-server", dir, fmt.Sprintf("127.0.0.1:%d", port), env.bin("nats-server"), "-c", cf)
	return srv, desc, err
}

type jsDriver struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	sync bool

	mu     sync.Mutex
	acked  *atomic.Int64
	errs   atomic.Int64
	lastEr atomic.Value
}

func connectJetStream(ctx context.Context, srv *proc.Server, window int) (Driver, error) {
	nc, err := nats.Connect("nats://"+srv.Addr, nats.Name("peerbench"), nats.MaxReconnects(0))
	if err != nil {
		return nil, err
	}
	d := &jsDriver{nc: nc}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) {
			if a := d.ackCounter(); a != nil {
				a.Add(1)
			}
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			d.errs.Add(1)
			d.lastEr.Store(err.Error())
		}))
	if err != nil {
		nc.Close()
		return nil, err
	}
	d.js = js
	return d, nil
}

func (d *jsDriver) ackCounter() *atomic.Int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked
}

func (d *jsDriver) setAckCounter(a *atomic.Int64) {
	d.mu.Lock()
	d.acked = a
	d.mu.Unlock()
}

func (d *jsDriver) Prepare(ctx context.Context, topics []string, consume bool) error {
	for _, t := range topics {
		_, err := d.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: t, Subjects: []string{t}, Storage: jetstream.FileStorage, Replicas: 1,
		})
		if err != nil {
			return fmt.Errorf("create stream %s: %w", t, err)
		}
	}
	return nil
}

func (d *jsDriver) Publish(ctx context.Context, topics []string, msg []byte, window int, limit int64, acked *atomic.Int64) error {
	d.setAckCounter(acked)
	defer d.setAckCounter(nil)
	d.errs.Store(0)
	var sent int64
	for ctx.Err() == nil && (limit <= 0 || sent < limit) {
		if _, err := d.js.PublishAsync(topics[int(sent%int64(len(topics)))], msg, jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
		sent++
	}
	select {
	case <-d.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return errors.New("timed out waiting for publish acks")
	}
	if n := d.errs.Load(); n > 0 {
		return fmt.Errorf("%d async publishes failed: %v", n, d.lastEr.Load())
	}
	return nil
}

func (d *jsDriver) PublishSync(ctx context.Context, topic string, msg []byte, h *benchkit.Histogram, acked *atomic.Int64) error {
	for ctx.Err() == nil {
		t0 := time.Now()
		if _, err := d.js.Publish(context.Background(), topic, msg); err != nil {
			return err
		}
		h.Record(time.Since(t0))
		acked.Add(1)
	}
	return nil
}

func (d *jsDriver) consume(ctx context.Context, topic string, policy jetstream.DeliverPolicy, fn func(jetstream.Msg)) (jetstream.ConsumeContext, error) {
	c, err := d.js.CreateConsumer(ctx, topic, jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: policy, MaxAckPending: -1,
	})
	if err != nil {
		return nil, err
	}
	return c.Consume(fn, jetstream.PullMaxMessages(1000))
}

func (d *jsDriver) Drain(ctx context.Context, topic string, n int64, got *atomic.Int64) error {
	done := make(chan struct{})
	var once sync.Once
	cc, err := d.consume(ctx, topic, jetstream.DeliverAllPolicy, func(jetstream.Msg) {
		if got.Add(1) >= n {
			once.Do(func() { close(done) })
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %w after %d of %d", ctx.Err(), got.Load(), n)
	}
}

func (d *jsDriver) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	cc, err := d.consume(ctx, topic, jetstream.DeliverNewPolicy, func(m jetstream.Msg) { fn(m.Data()) })
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

func (d *jsDriver) Send(ctx context.Context, topic string, msg []byte) error {
	_, err := d.js.PublishAsync(topic, msg, jetstream.WithStallWait(time.Minute))
	return err
}

func (d *jsDriver) Close() error {
	select {
	case <-d.js.PublishAsyncComplete():
	case <-time.After(5 * time.Second):
	}
	d.nc.Close()
	return nil
}
