package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// Close waits for the async sends in flight — every callback has run when it
// returns — and is woken by the last one, not by polling or its timer: with
// a one-hour SendTimeout a Close that waited for the timer would not return
// within the test's deadline, and nothing in flight means no wait at all.
func TestProducerCloseWaitsForAsyncSends(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"q": 2}, Logger: testLogger()})
	closeWithin := func(p *Producer) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- p.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second): // a hang detector: the timer path is an hour
			t.Fatal("Close did not return: it waited for its timer, not for the sends' signal")
		}
	}
	cfg := Config{Brokers: []string{b.Addr}, Logger: testLogger(), Producer: ProducerOptions{SendTimeout: time.Hour}}

	idle, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeWithin(idle) // nothing in flight

	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	var ok, failed atomic.Int64
	for i := 0; i < n; i++ {
		p.SendAsync(context.Background(), &Message{Topic: "q", Body: []byte("m"), Tag: "t"}, func(_ SendResult, err error) {
			if err != nil {
				failed.Add(1)
				return
			}
			ok.Add(1)
		})
	}
	closeWithin(p)
	if ok.Load()+failed.Load() != n || failed.Load() != 0 {
		t.Fatalf("after Close: %d callbacks succeeded, %d failed, of %d sends", ok.Load(), failed.Load(), n)
	}
	// After Close: fails at once, callback included.
	var after atomic.Int64
	p.SendAsync(context.Background(), &Message{Topic: "q", Body: []byte("late")}, func(_ SendResult, err error) {
		if err == ErrClosed {
			after.Add(1)
		}
	})
	if after.Load() != 1 {
		t.Fatal("SendAsync after Close did not fail with ErrClosed")
	}
}
