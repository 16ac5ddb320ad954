package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/metaqgo/metaq/broker/pop"
)

// roleFake is fakePop on a node whose role changes: while it is a slave
// every call is pop.ErrUnavailable, as the broker's LivePop answers then.
type roleFake struct {
	*fakePop
	master atomic.Bool
}

func (r *roleFake) Available() bool { return r.master.Load() }

func (r *roleFake) Receive(ctx context.Context, group, topic string, f pop.Filter, max int, inv time.Duration) ([]pop.Delivery, error) {
	if !r.master.Load() {
		return nil, pop.ErrUnavailable
	}
	return r.fakePop.Receive(ctx, group, topic, f, max, inv)
}

// The WebSocket endpoint follows the node's role without a restart: 503 on a
// slave, delivery once it is promoted, and a receiver cut off with 1013 (try
// again later) when the node is demoted.
func TestWSFollowsRole(t *testing.T) {
	f := &roleFake{fakePop: newFakePop(t, "test")}
	s, err := Start(Options{Addr: "127.0.0.1:0", Delivery: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	url := wsURL(s, "g", "test", "")

	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil {
		c.CloseNow()
		t.Fatal("a slave accepted a WebSocket receiver")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial on a slave: %v (response %v)", err, resp)
	}

	f.master.Store(true) // promoted
	f.add("after promotion")
	w := dialWS(t, url)
	if m := w.next(); m.Type != "message" {
		t.Fatalf("want the message, got %+v", m)
	}

	f.master.Store(false) // demoted: the next receive is refused
	f.add("wakes the receive loop")
	rctx, rcancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer rcancel()
	for {
		_, _, err := w.c.Read(rctx)
		if err == nil {
			continue // a frame sent before the demotion
		}
		if st := websocket.CloseStatus(err); st != websocket.StatusTryAgainLater {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("receiver not cut off after the demotion")
			}
			t.Fatalf("closed with %v (%v), want 1013", st, err)
		}
		break
	}
}
