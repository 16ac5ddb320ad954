package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// WebSocket delivery against real brokers: the gateway in front of the
// broker's own delivery service (broker/pop), a coder/websocket client.

const wsWait = 60 * time.Second

type wsMsg = httpapi.WSFrame

type wsConn struct {
	t *testing.T
	c *websocket.Conn
}

func wsDial(t *testing.T, hs *httpapi.Server, group, topic, query string) *wsConn {
	t.Helper()
	u := "ws://" + hs.Addr().String() + "/api/v1/groups/" + group + "/topics/" + topic + "/ws?" + query
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	w := &wsConn{t: t, c: c}
	if m, err := w.read(); err != nil || m.Type != "subscribed" {
		t.Fatalf("first frame %+v %v", m, err)
	}
	return w
}

func (w *wsConn) read() (wsMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		return wsMsg{}, err
	}
	var m wsMsg
	if err := json.Unmarshal(b, &m); err != nil {
		w.t.Fatalf("frame %q: %v", b, err)
	}
	if m.Type == "error" {
		w.t.Errorf("error frame %+v", m)
	}
	return m, nil
}

func (w *wsConn) next() wsMsg {
	w.t.Helper()
	m, err := w.read()
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return m
}

func (w *wsConn) send(v any) {
	w.t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

// ackSync acks handles and waits for the done reply (the acknowledgement is
// durable then); messages read meanwhile are returned.
func (w *wsConn) ackSync(id int, handles ...string) []wsMsg {
	w.t.Helper()
	w.send(map[string]any{"op": "ack", "handles": handles, "id": id})
	var more []wsMsg
	for {
		m := w.next()
		switch m.Type {
		case "done":
			if string(m.ID) != fmt.Sprint(id) {
				continue // another frame's
			}
			if m.Failed != 0 || m.OK != len(handles) {
				w.t.Fatalf("ack done %+v", m)
			}
			return more
		case "message":
			more = append(more, m)
		default:
			w.t.Fatalf("frame %+v", m)
		}
	}
}

func publishN(t *testing.T, hs *httpapi.Server, topic string, n int, prefix string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if st, _, raw := publish(t, hs.URL(), topic, fmt.Sprintf("tag=t%d&keys=k%d", i%2, i), nil,
			strings.NewReader(fmt.Sprintf("%s-%d", prefix, i))); st != 200 {
			t.Fatalf("publish: %d %s", st, raw)
		}
	}
}

func withDelivery(b *brokertest.Broker) func(*httpapi.Options) {
	return func(o *httpapi.Options) { o.Delivery = b.Pop() }
}

// Messages published over HTTP come over the WebSocket once each while all
// are acknowledged, never more than K unacknowledged; a released one comes
// again with the next attempt; a tag filter selects.
func TestWSDelivery(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	hs := runHTTP(t, b, withDelivery(b))
	const n, K = 60, 8
	publishN(t, hs, "test", n, "m")
	w := wsDial(t, hs, "g1", "test", fmt.Sprintf("max=%d&invisibleMs=600000", K))
	seen := map[string]bool{}
	acked := 0
	var queue []wsMsg
	var pending []string
	var released wsMsg
	again := false
	for len(seen) < n || !again {
		var m wsMsg
		if len(queue) > 0 {
			m, queue = queue[0], queue[1:]
		} else {
			m = w.next()
		}
		if m.Type == "done" {
			continue // the release's
		}
		if m.Type != "message" {
			t.Fatalf("frame %+v", m)
		}
		if released.Handle != "" && m.Key() == released.Key() {
			// The released message comes again, with the next attempt.
			if again || m.Attempt != 2 {
				t.Fatalf("released message again: %+v", m)
			}
			again = true
			acked--
			queue = append(queue, w.ackSync(1000, m.Handle)...)
			acked++
			continue
		}
		if seen[m.Key()] {
			t.Fatalf("%s delivered twice", m.Key())
		}
		seen[m.Key()] = true
		if got := len(seen) - acked; got > K {
			t.Fatalf("%d unacknowledged, K = %d", got, K)
		}
		if m.Topic != "test" || m.Attempt != 1 || !strings.HasPrefix(m.Body, "m-") || len(m.Keys) != 1 || m.MsgID == "" {
			t.Errorf("message %+v", m)
		}
		if released.Handle == "" {
			released = m // release the first one instead of acking it
			w.send(map[string]any{"op": "release", "handle": m.Handle, "delayMs": 0, "id": "rel"})
			acked++ // it frees its slot once done
			continue
		}
		pending = append(pending, m.Handle)
		if len(pending) == K/2 || len(seen) == n {
			acked += len(pending)
			queue = append(queue, w.ackSync(len(seen), pending...)...)
			pending = nil
		}
	}
	// A tag filter: another group sees only t1.
	w2 := wsDial(t, hs, "g2", "test", "max=100&tags=t1&encoding=base64")
	got := 0
	for got < n/2 {
		m := w2.next()
		if m.Type != "message" {
			continue
		}
		if m.Tag != "t1" || m.Encoding != "base64" {
			t.Fatalf("filtered message %+v", m)
		}
		w2.send(map[string]any{"op": "ack", "handle": m.Handle})
		got++
	}
}

// A broker restart: the client sees the socket closed (1001), reconnects to
// the restarted broker, gets every unacknowledged message again and no
// acknowledged one.
func TestWSSurvivesBrokerRestart(t *testing.T) {
	dir := t.TempDir()
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true, Topics: map[string]int{"orders": 2}})
	hs := runHTTP(t, b, withDelivery(b))
	const n = 20
	publishN(t, hs, "orders", n, "o")
	// After the restart the unacknowledged messages come again at once (the
	// restarted broker cannot know how long their locks had left) or, at
	// the latest, when their 30 s invisibility ends.
	w := wsDial(t, hs, "billing", "orders", "max=50&invisibleMs=30000")
	var msgs []wsMsg
	for len(msgs) < n {
		if m := w.next(); m.Type == "message" {
			msgs = append(msgs, m)
		}
	}
	acked := map[string]bool{}
	var handles []string
	for _, m := range msgs[:n/2] {
		acked[m.Key()] = true
		handles = append(handles, m.Handle)
	}
	for _, m := range w.ackSync(1, handles...) {
		if m.Attempt < 2 { // a redelivery is fine on a very slow machine; a new message is not
			t.Fatalf("more messages than published: %+v", m)
		}
	}

	// Restart: the HTTP side first (it closes its sockets), then the broker.
	done := make(chan error, 1)
	go func() {
		_, err := w.read()
		done <- err
	}()
	_ = hs.Close()
	if err := <-done; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("socket at shutdown: %v", err)
	}
	b.Stop()
	b2 := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true, Topics: map[string]int{"orders": 2}})
	hs2 := runHTTP(t, b2, withDelivery(b2))

	// Reconnect: the other half comes again.
	w2 := wsDial(t, hs2, "billing", "orders", "max=50&invisibleMs=60000")
	again := map[string]bool{}
	var queue []wsMsg
	for len(again) < n/2 {
		var m wsMsg
		if len(queue) > 0 {
			m, queue = queue[0], queue[1:]
		} else {
			m = w2.next()
		}
		if m.Type != "message" {
			continue
		}
		if acked[m.Key()] {
			t.Fatalf("acknowledged message %s delivered again after the restart", m.Key())
		}
		if again[m.Key()] {
			t.Fatalf("%s twice after the restart", m.Key())
		}
		again[m.Key()] = true
		queue = append(queue, w2.ackSync(len(again), m.Handle)...)
	}
	// A marker published now comes next: nothing acknowledged was queued
	// before it.
	if st, _, raw := publish(t, hs2.URL(), "orders", "partition=0", nil, strings.NewReader("marker")); st != 200 {
		t.Fatalf("publish: %d %s", st, raw)
	}
	for {
		var m wsMsg
		if len(queue) > 0 {
			m, queue = queue[0], queue[1:]
		} else {
			m = w2.next()
		}
		if m.Type != "message" {
			continue
		}
		if m.Body != "marker" {
			t.Fatalf("after every unacknowledged message came again: %+v", m)
		}
		w2.ackSync(99, m.Handle)
		break
	}
}
