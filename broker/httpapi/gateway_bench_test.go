package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// Gateway benchmarks (docs/http.md, "Benchmarks"): 100-byte messages, a
// real broker (async flush, as brokertest configures it) and its HTTP side
// on 127.0.0.1.
//
//	go test -run '^$' -bench Gateway -benchtime 20000x ./broker/httpapi/

// BenchmarkGatewayPublish: 16 concurrent HTTP/1.1 keep-alive publishers.
func BenchmarkGatewayPublish(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			bk := brokertest.RunBroker(b, brokertest.Options{Sync: sync, Topics: map[string]int{"bench": 4}})
			hs := runHTTP(b, bk, withDelivery(bk))
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			url := hs.URL() + "/api/v1/topics/bench/messages?tag=b"
			body := bytes.Repeat([]byte("x"), 100)
			b.SetParallelism(8) // 16 publishers on 2 cores
			b.ResetTimer()
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := cl.Post(url, "application/octet-stream", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("publish: %s", resp.Status)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkGatewayWSReceiveAck: messages stored beforehand are received
// over WebSockets and acknowledged by 1 and by 4 connections of one group
// on a 4-partition topic (max=256 unacknowledged per connection). Each
// connection acks whatever it has received since its previous ack frame
// (a reader and an acker goroutine), every ack frame with an id; the time
// is until every message's ack is done.
func BenchmarkGatewayWSReceiveAck(b *testing.B) {
	for _, conns := range []int{1, 4} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			bk := brokertest.RunBroker(b, brokertest.Options{Topics: map[string]int{"bench": 4}})
			hs := runHTTP(b, bk, withDelivery(bk))
			body := bytes.Repeat([]byte("x"), 100)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := 0; i < b.N; i++ {
				if _, err := bk.Server.Publish(ctx, &broker.Message{Topic: "bench", Partition: -1, Data: body}); err != nil {
					b.Fatal(err)
				}
			}
			cs := make([]*websocket.Conn, conns)
			for i := range cs {
				c, _, err := websocket.Dial(ctx, "ws://"+hs.Addr().String()+"/api/v1/groups/bench/topics/bench/ws?max=256&invisibleMs=600000", nil)
				if err != nil {
					b.Fatal(err)
				}
				c.SetReadLimit(1 << 20)
				defer c.CloseNow()
				cs[i] = c
			}
			var acked atomic.Int64
			finished := make(chan struct{})
			var once sync.Once
			errs := make(chan error, 2*conns)
			b.ResetTimer()
			t0 := time.Now()
			for _, c := range cs {
				handles := make(chan string, 1024)
				go func() {
					errs <- wsReader(ctx, c, handles, &acked, int64(b.N), func() { once.Do(func() { close(finished) }) })
				}()
				go func() { errs <- wsAcker(ctx, c, handles) }()
			}
			select {
			case <-finished:
			case err := <-errs:
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "msgs/s")
			b.StopTimer()
			cancel()
		})
	}
}

// wsReader hands the handles of c's messages to the acker and counts done acks.
func wsReader(ctx context.Context, c *websocket.Conn, handles chan<- string, acked *atomic.Int64, n int64, all func()) error {
	var f struct {
		Type   string `json:"type"`
		Handle string `json:"handle"`
		OK     int64  `json:"ok"`
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		f.Type = ""
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		switch f.Type {
		case "message":
			select {
			case handles <- f.Handle:
			case <-ctx.Done():
				return nil
			}
		case "done":
			if acked.Add(f.OK) >= n {
				all()
			}
		case "error":
			return fmt.Errorf("error frame %s", strings.TrimSpace(string(b)))
		}
	}
}

// wsAcker acks every handle received since its previous frame.
func wsAcker(ctx context.Context, c *websocket.Conn, handles <-chan string) error {
	batch := make([]string, 0, 256)
	for id := 0; ; id++ {
		batch = batch[:0]
		select {
		case h := <-handles:
			batch = append(batch, h)
		case <-ctx.Done():
			return nil
		}
	drain:
		for len(batch) < cap(batch) {
			select {
			case h := <-handles:
				batch = append(batch, h)
			default:
				break drain
			}
		}
		frame, _ := json.Marshal(map[string]any{"op": "ack", "handles": batch, "id": id})
		if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
