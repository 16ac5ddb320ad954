package peerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
	"github.com/nsqio/go-nsq"
)

const nsqChannel = "bench"

// startNSQ runs nsqd. memQueue < 0 keeps the default (10,000 messages in
// memory per topic/channel before the disk queue); syncEvery > 0 sets
// --sync-every (nsqd still answers before the fsync).
func startNSQ(ctx context.Context, env *Env, dir string, memQueue, syncEvery int) (*proc.Server, string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, "", err
	}
	hport, err := proc.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--tcp-address=" + addr, "--http-address=127.0.0.1:" + strconv.Itoa(hport),
		"--broadcast-address=127.0.0.1", "--data-path=" + dir, "--log-level=warn"}
	desc := "nsqd v1.3.0 defaults (--mem-queue-size 10000)"
	if memQueue >= 0 {
		args = append(args, "--mem-queue-size="+strconv.Itoa(memQueue))
		desc = "nsqd v1.3.0 --mem-queue-size=" + strconv.Itoa(memQueue)
	}
	if syncEvery > 0 {
		args = append(args, "--sync-every="+strconv.Itoa(syncEvery))
		desc += " --sync-every=" + strconv.Itoa(syncEvery) + " (replies before fsync)"
	}
	srv, err := proc.Start(ctx, "nsqd", dir, addr, env.bin("nsqd"), args...)
	if err != nil {
		return nil, "", err
	}
	srv.HTTPAddr = "127.0.0.1:" + strconv.Itoa(hport)
	return srv, desc, nil
}

type nsqDriver struct {
	addr, httpAddr string
	p              *nsq.Producer
	window         int
	done           chan *nsq.ProducerTransaction // Send's acks, drained in the background
	sendErr        atomic.Value
	wg             sync.WaitGroup
}

var quietLog = log.New(io.Discard, "", 0)

func connectNSQ(ctx context.Context, srv *proc.Server, window int) (Driver, error) {
	p, err := nsq.NewProducer(srv.Addr, nsq.NewConfig())
	if err != nil {
		return nil, err
	}
	p.SetLogger(quietLog, nsq.LogLevelError)
	if err := p.Ping(); err != nil {
		p.Stop()
		return nil, err
	}
	d := &nsqDriver{addr: srv.Addr, httpAddr: srv.HTTPAddr, p: p, window: window,
		done: make(chan *nsq.ProducerTransaction, 4096)}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for t := range d.done {
			if t.Error != nil {
				d.sendErr.Store(t.Error.Error())
			}
		}
	}()
	return d, nil
}

func (d *nsqDriver) Prepare(ctx context.Context, topics []string, consume bool) error {
	for _, t := range topics {
		if err := d.post("/topic/create", url.Values{"topic": {t}}); err != nil {
			return err
		}
		if consume {
			if err := d.post("/channel/create", url.Values{"topic": {t}, "channel": {nsqChannel}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *nsqDriver) post(path string, q url.Values) error {
	resp, err := http.Post("http://"+d.httpAddr+path+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("nsqd %s %s: %s", path, q.Encode(), resp.Status)
	}
	return nil
}

func (d *nsqDriver) Publish(ctx context.Context, topics []string, msg []byte, window int, limit int64, acked *atomic.Int64) error {
	done := make(chan *nsq.ProducerTransaction, window)
	var sent, inflight int64
	var firstErr error
	wait := func() {
		t := <-done
		inflight--
		if t.Error != nil && firstErr == nil {
			firstErr = t.Error
		}
		acked.Add(1)
	}
	for ctx.Err() == nil && (limit <= 0 || sent < limit) && firstErr == nil {
		for inflight >= int64(window) {
			wait()
		}
		if err := d.p.PublishAsync(topics[int(sent%int64(len(topics)))], msg, done); err != nil {
			return err
		}
		sent++
		inflight++
	}
	for inflight > 0 {
		wait()
	}
	return firstErr
}

// PublishBatch sends MPUB frames of batch messages, frames of them in
// flight.
func (d *nsqDriver) PublishBatch(ctx context.Context, topic string, msg []byte, batch, frames int, acked *atomic.Int64) error {
	frames = max(1, frames)
	bodies := make([][]byte, batch)
	for i := range bodies {
		bodies[i] = msg
	}
	done := make(chan *nsq.ProducerTransaction, frames)
	inflight := 0
	var firstErr error
	wait := func() {
		t := <-done
		inflight--
		if t.Error != nil && firstErr == nil {
			firstErr = t.Error
		}
		if t.Error == nil {
			acked.Add(int64(batch))
		}
	}
	for ctx.Err() == nil && firstErr == nil {
		for inflight >= frames {
			wait()
		}
		if err := d.p.MultiPublishAsync(topic, bodies, done); err != nil {
			return err
		}
		inflight++
	}
	for inflight > 0 {
		wait()
	}
	return firstErr
}

func (d *nsqDriver) BatchForm() string { return "go-nsq MultiPublishAsync (MPUB)" }

func (d *nsqDriver) PublishSync(ctx context.Context, topic string, msg []byte, h *benchkit.Histogram, acked *atomic.Int64) error {
	for ctx.Err() == nil {
		t0 := time.Now()
		if err := d.p.Publish(topic, msg); err != nil {
			return err
		}
		h.Record(time.Since(t0))
		acked.Add(1)
	}
	return nil
}

// consumer connects a consumer of channel "bench". unbuffered disables
// nsqd's output buffer (output_buffer_size -1), which otherwise holds a lone
// message until output_buffer_timeout (250 ms) fires. (output_buffer_timeout
// -1 is no good: nsqd 1.3.0 then stops its flush ticker and never flushes.)
func (d *nsqDriver) consumer(topic string, unbuffered bool, fn func(*nsq.Message)) (*nsq.Consumer, error) {
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = d.window
	if unbuffered {
		cfg.OutputBufferSize = -1
	}
	c, err := nsq.NewConsumer(topic, nsqChannel, cfg)
	if err != nil {
		return nil, err
	}
	c.SetLogger(quietLog, nsq.LogLevelError)
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error { fn(m); return nil })) // auto FIN
	if err := c.ConnectToNSQD(d.addr); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func stopConsumer(c *nsq.Consumer) {
	c.Stop()
	select {
	case <-c.StopChan:
	case <-time.After(5 * time.Second):
	}
}

func (d *nsqDriver) Drain(ctx context.Context, topic string, n int64, got *atomic.Int64) error {
	done := make(chan struct{})
	var once sync.Once
	c, err := d.consumer(topic, false, func(*nsq.Message) {
		if got.Add(1) >= n {
			once.Do(func() { close(done) })
		}
	})
	if err != nil {
		return err
	}
	defer stopConsumer(c)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %w after %d of %d", ctx.Err(), got.Load(), n)
	}
}

func (d *nsqDriver) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	if err := d.Prepare(ctx, []string{topic}, true); err != nil {
		return nil, err
	}
	c, err := d.consumer(topic, true, func(m *nsq.Message) { fn(m.Body) })
	if err != nil {
		return nil, err
	}
	return func() { stopConsumer(c) }, nil
}

func (d *nsqDriver) Send(ctx context.Context, topic string, msg []byte) error {
	if e := d.sendErr.Load(); e != nil {
		return errors.New(e.(string))
	}
	return d.p.PublishAsync(topic, msg, d.done)
}

func (d *nsqDriver) Close() error {
	d.p.Stop()
	close(d.done)
	d.wg.Wait()
	return nil
}
