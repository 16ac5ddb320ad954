package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/protocol"
)

// Unit tests of the WebSocket endpoint against fakePop (the real-broker
// tests are in gateway_ws_test.go).

const wsTestTimeout = 60 * time.Second

func startFakeGateway(t *testing.T, f *fakePop) *Server {
	t.Helper()
	s, err := Start(Options{Addr: "127.0.0.1:0", Delivery: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// WSFrame is any server frame. It is exported (in the test build only) so
// that the real-broker tests of package httpapi_test decode frames with the
// same type.
type WSFrame struct {
	Type       string            `json:"type"`
	Handle     string            `json:"handle"`
	MsgID      string            `json:"msgId"`
	Topic      string            `json:"topic"`
	Partition  int32             `json:"partition"`
	Offset     int64             `json:"offset"`
	Attempt    int               `json:"attempt"`
	Tag        string            `json:"tag"`
	Keys       []string          `json:"keys"`
	Properties map[string]string `json:"properties"`
	Encoding   string            `json:"encoding"`
	Attribute  *string           `json:"attribute"`
	Body       string            `json:"body"`
	ID         json.RawMessage   `json:"id"`
	Op         string            `json:"op"`
	OK         int               `json:"ok"`
	Failed     int               `json:"failed"`
	Code       int               `json:"code"`
	Error      string            `json:"error"`
	Max        int               `json:"max"`
}

// Key names a message frame's position, partition@offset.
func (f WSFrame) Key() string { return fmt.Sprintf("%d@%d", f.Partition, f.Offset) }

type wsFrame = WSFrame

type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func dialWS(t *testing.T, url string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", url, err, status)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	w := &wsClient{t: t, c: c}
	if f := w.next(); f.Type != "subscribed" {
		t.Fatalf("first frame %+v", f)
	}
	return w
}

func wsURL(s *Server, group, topic, query string) string {
	u := "ws://" + s.Addr().String() + "/api/v1/groups/" + group + "/topics/" + topic + "/ws"
	if query != "" {
		u += "?" + query
	}
	return u
}

func (w *wsClient) next() wsFrame {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		w.t.Fatalf("frame type %v", typ)
	}
	var f wsFrame
	if err := json.Unmarshal(b, &f); err != nil {
		w.t.Fatalf("frame %q: %v", b, err)
	}
	return f
}

// nextOf reads until a frame of type typ, returning the messages seen before it.
func (w *wsClient) nextOf(typ string) (wsFrame, []wsFrame) {
	w.t.Helper()
	var msgs []wsFrame
	for {
		f := w.next()
		if f.Type == typ {
			return f, msgs
		}
		if f.Type != "message" {
			w.t.Fatalf("want %s, got %+v", typ, f)
		}
		msgs = append(msgs, f)
	}
}

func (w *wsClient) send(v any) {
	w.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	w.sendRaw(websocket.MessageText, b)
}

func (w *wsClient) sendRaw(typ websocket.MessageType, b []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	if err := w.c.Write(ctx, typ, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

// Flow control: the client never has more than K messages unacknowledged
// (checked on both sides: by the client here, by the fake at every Receive),
// and every message comes exactly once while all are acknowledged.
func TestWSFlowControlFake(t *testing.T) {
	f := newFakePop(t, "orders")
	const K, n = 3, 40
	f.maxHeld = K
	for i := 0; i < n; i++ {
		f.add("m" + string(rune('a'+i%26)))
	}
	s := startFakeGateway(t, f)
	w := dialWS(t, wsURL(s, "g", "orders", "max=3&invisibleMs=600000"))
	seen := map[int64]bool{}
	var pending []string
	acked := 0
	var queue []wsFrame // messages read while waiting for a done
	for len(seen) < n {
		var m wsFrame
		if len(queue) > 0 {
			m, queue = queue[0], queue[1:]
		} else {
			m = w.next()
		}
		if m.Type != "message" {
			t.Fatalf("frame %+v", m)
		}
		if seen[m.Offset] {
			t.Fatalf("offset %d twice", m.Offset)
		}
		seen[m.Offset] = true
		if got := len(seen) - acked; got > K {
			t.Fatalf("%d unacknowledged messages delivered, K = %d", got, K)
		}
		pending = append(pending, m.Handle)
		// Ack in bursts, holding K each time.
		if len(pending) == K || len(seen) == n {
			w.send(map[string]any{"op": "ack", "handles": pending, "id": len(seen)})
			acked += len(pending) // from now on the server may send more
			d, more := w.nextOf("done")
			if d.OK != len(pending) || d.Failed != 0 {
				t.Fatalf("done %+v", d)
			}
			queue = append(queue, more...)
			pending = nil
		}
	}
	if a, _ := f.stats(); a != n {
		t.Errorf("%d acked, want %d", a, n)
	}
}

// docs/http.md: a message counts against a socket's max until its ack is
// carried out, and handles may be acknowledged on another socket of the
// group. Socket A (max=1) receives m0; socket B acknowledges m0's handle
// (done ok=1): A's slot is free at once, not when m0's invisibility time
// (10 min here) passes.
func TestWSAckOnAnotherSocketFreesTheSlotFake(t *testing.T) {
	f := newFakePop(t, "orders")
	f.add("m0", "m1", "m2")
	s := startFakeGateway(t, f)
	a := dialWS(t, wsURL(s, "g", "orders", "max=1&invisibleMs=600000"))
	m0 := a.next()
	if m0.Type != "message" {
		t.Fatalf("A: %+v", m0)
	}
	bc := dialWS(t, wsURL(s, "g", "orders", "max=1&invisibleMs=600000"))
	if m := bc.next(); m.Type != "message" {
		t.Fatalf("B: %+v", m)
	}
	bc.send(map[string]any{"op": "ack", "handle": m0.Handle, "id": 1})
	if d := bc.next(); d.Type != "done" || d.OK != 1 {
		t.Fatalf("B's ack of A's handle: %+v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, b, err := a.c.Read(ctx)
	if err != nil {
		t.Fatalf("A holds nothing (m0 acknowledged) but received nothing in 3 s: %v", err)
	}
	var fr wsFrame
	if err := json.Unmarshal(b, &fr); err != nil || fr.Type != "message" {
		t.Fatalf("A: %s %v, want a message", b, err)
	}
	// The owners of held handles are forgotten with the sockets.
	_ = a.c.Close(websocket.StatusNormalClosure, "")
	_ = bc.c.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(10 * time.Second); s.WSConnections() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets still open", s.WSConnections())
		}
	}
	s.wsMu.Lock()
	n := len(s.wsOwners)
	s.wsMu.Unlock()
	if n != 0 {
		t.Fatalf("%d handle owners left after the sockets closed", n)
	}
}

// Release brings a message back (attempt 2); reject ends it; extend keeps
// it; frames carry tag, keys, properties, and ids are echoed.
func TestWSOperationsFake(t *testing.T) {
	f := newFakePop(t, "orders")
	f.add("first", "second")
	s := startFakeGateway(t, f)
	w := dialWS(t, wsURL(s, "g", "orders", "max=2"))
	a, b := w.next(), w.next()
	if a.Offset != 0 || b.Offset != 1 || a.Body != "first" || a.Encoding != "text" || a.Attempt != 1 {
		t.Fatalf("messages %+v %+v", a, b)
	}
	if a.Tag != "t0" || strings.Join(a.Keys, ",") != "k0,x" || a.Properties["color"] != "blue" || a.MsgID != "281474976710656" {
		t.Errorf("message fields %+v", a)
	}
	w.send(map[string]any{"op": "extend", "handle": a.Handle, "invisibleMs": 60000, "id": "x1"})
	if d, _ := w.nextOf("done"); string(d.ID) != `"x1"` || d.OK != 1 || d.Op != "extend" {
		t.Errorf("extend done %+v", d)
	}
	w.send(map[string]any{"op": "release", "handle": a.Handle, "delayMs": 0})
	again := w.next()
	if again.Offset != 0 || again.Attempt != 2 {
		t.Fatalf("released message came back as %+v", again)
	}
	w.send(map[string]any{"op": "reject", "handle": b.Handle, "id": 2})
	if d, _ := w.nextOf("done"); string(d.ID) != "2" || d.OK != 1 {
		t.Errorf("reject done %+v", d)
	}
	// The old handle of the released message is stale now.
	w.send(map[string]any{"op": "ack", "handle": a.Handle, "id": 3})
	e := w.next()
	if e.Type != "error" || e.Code != 404 || e.Handle != a.Handle || string(e.ID) != "3" || e.Op != "ack" {
		t.Errorf("stale ack answered %+v", e)
	}
	if d := w.next(); d.Type != "done" || d.OK != 0 || d.Failed != 1 {
		t.Errorf("stale ack done %+v", d)
	}
	w.send(map[string]any{"op": "ack", "handle": again.Handle, "id": 4})
	w.nextOf("done")
	if acked, rejects := f.stats(); acked != 1 || rejects != 1 {
		t.Errorf("acked %d rejected %d", acked, rejects)
	}
}

// Bad frames are answered with error frames and the connection goes on.
func TestWSBadFramesFake(t *testing.T) {
	f := newFakePop(t, "orders")
	s := startFakeGateway(t, f)
	w := dialWS(t, wsURL(s, "g", "orders", ""))
	bad := []string{
		`not json`,
		`{}`,
		`{"op":"nap","handle":"h"}`,
		`{"op":"ack"}`,
		`{"op":"ack","handle":""}`,
		`{"op":"ack","handle":"h","handles":["h"]}`,
		`{"op":"ack","handle":"h","bogus":1}`,
		`{"op":"ack","handle":"h","delayMs":5}`,
		`{"op":"release","handle":"h","delayMs":-1}`,
		`{"op":"extend","handle":"h"}`,
		`{"op":"extend","handle":"h","invisibleMs":1}`,
		`{"op":"ack","handle":"h","id":{"a":1}}`,
		`{"op":"ack","handle":"h"} {"op":"ack","handle":"h"}`,
		`{"op":"ack","handle":"` + strings.Repeat("h", maxHandleLen+1) + `"}`,
	}
	for _, b := range bad {
		w.sendRaw(websocket.MessageText, []byte(b))
		if e := w.next(); e.Type != "error" || e.Code != 400 || e.Error == "" {
			t.Errorf("%.60s: answered %+v", b, e)
		}
	}
	w.sendRaw(websocket.MessageBinary, []byte(`{"op":"ack","handle":"h"}`))
	if e := w.next(); e.Type != "error" || e.Code != 400 {
		t.Errorf("binary frame answered %+v", e)
	}
	// An id is echoed even when the op is bad.
	w.sendRaw(websocket.MessageText, []byte(`{"op":"nap","id":"n1"}`))
	if e := w.next(); e.Type != "error" || string(e.ID) != `"n1"` {
		t.Errorf("bad op with an id answered %+v", e)
	}
	// A malformed handle is the service's 400.
	w.send(map[string]any{"op": "ack", "handle": "garbage"})
	if e := w.next(); e.Type != "error" || e.Code != 400 || e.Handle != "garbage" {
		t.Errorf("malformed handle answered %+v", e)
	}
	// Still serving.
	f.add("after")
	if m := w.next(); m.Type != "message" || m.Body != "after" {
		t.Errorf("after bad frames: %+v", m)
	}
	// A frame over the limit closes the connection with 1009.
	w.sendRaw(websocket.MessageText, []byte(`{"op":"ack","handles":["`+strings.Repeat("h", maxClientFrame)+`"]}`))
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	for {
		if _, _, err := w.c.Read(ctx); err != nil {
			if st := websocket.CloseStatus(err); st != websocket.StatusMessageTooBig {
				t.Errorf("oversized frame: closed with %v (%v)", st, err)
			}
			break
		}
	}
}

// Bodies: base64 on request; a body that is not UTF-8 goes as base64 in
// text mode; MetaQ's attribute has its own field.
func TestWSEncodingFake(t *testing.T) {
	f := newFakePop(t, "orders")
	f.addRecord(fakeRecord("orders", 0, "", "plain", 0))
	f.addRecord(fakeRecord("orders", 1, "", "\xff\xfe", 0))
	f.addRecord(fakeRecord("orders", 2, "", "\x00\x00\x00\x03attpayload", protocol.FlagHasAttribute))
	s := startFakeGateway(t, f)
	w := dialWS(t, wsURL(s, "g", "orders", "max=3"))
	m0, m1, m2 := w.next(), w.next(), w.next()
	if m0.Encoding != "text" || m0.Body != "plain" {
		t.Errorf("text body %+v", m0)
	}
	if raw, _ := base64.StdEncoding.DecodeString(m1.Body); m1.Encoding != "base64" || string(raw) != "\xff\xfe" {
		t.Errorf("binary body %+v", m1)
	}
	if m2.Attribute == nil || *m2.Attribute != "att" || m2.Body != "payload" {
		t.Errorf("attribute %+v", m2)
	}
	w2 := dialWS(t, wsURL(s, "g2", "orders", "encoding=base64"))
	_ = w2
	f2 := newFakePop(t, "b64")
	f2.add("hello")
	s2 := startFakeGateway(t, f2)
	w3 := dialWS(t, wsURL(s2, "g", "b64", "encoding=base64&tags=t0"))
	if m := w3.next(); m.Encoding != "base64" || m.Body != base64.StdEncoding.EncodeToString([]byte("hello")) {
		t.Errorf("base64 body %+v", m)
	}
}

// Bad subscriptions are refused before the upgrade, with a JSON error.
func TestWSBadQueryFake(t *testing.T) {
	s := startFakeGateway(t, newFakePop(t, "orders"))
	for _, q := range []string{"max=0", "max=100000", "max=x", "invisibleMs=5", "encoding=hex", "color=red",
		"max=1&max=2", "where=" + strings.Repeat("(", 10)} {
		resp, err := http.Get("http://" + s.Addr().String() + "/api/v1/groups/g/topics/orders/ws?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %s", q, resp.Status)
		}
	}
	for _, p := range []string{"/api/v1/groups/bad!/topics/orders/ws", "/api/v1/groups/g/topics/bad!/ws"} {
		resp, err := http.Get("http://" + s.Addr().String() + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %s", p, resp.Status)
		}
	}
	// An unknown topic is known only once the service is asked: an error
	// frame, then close code 4404.
	w := dialWS(t, wsURL(s, "g", "nowhere", ""))
	if e := w.next(); e.Type != "error" || e.Code != 404 {
		t.Errorf("unknown topic: %+v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	_, _, err := w.c.Read(ctx)
	if st := websocket.CloseStatus(err); st != closeUnknownTopic {
		t.Errorf("unknown topic closed with %v (%v)", st, err)
	}
}

// A new group beyond the broker's popMaxGroups: an error frame 503, then
// close code 1013 (try again later), instead of a 500 and a retry loop.
func TestWSTooManyGroupsFake(t *testing.T) {
	f := newFakePop(t, "orders")
	f.receiveErr = fmt.Errorf("%w (popMaxGroups=1)", pop.ErrTooManyGroups)
	s := startFakeGateway(t, f)
	w := dialWS(t, wsURL(s, "g", "orders", ""))
	if e := w.next(); e.Type != "error" || e.Code != 503 {
		t.Errorf("group cap: %+v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	_, _, err := w.c.Read(ctx)
	if st := websocket.CloseStatus(err); st != websocket.StatusTryAgainLater {
		t.Errorf("group cap closed with %v (%v)", st, err)
	}
	if c := popErrorCode(f.receiveErr); c != 503 {
		t.Errorf("popErrorCode(ErrTooManyGroups) = %d", c)
	}
}

// Closing the server closes its WebSockets with 1001, and a closed
// service does the same.
func TestWSShutdownFake(t *testing.T) {
	f := newFakePop(t, "orders")
	s := startFakeGateway(t, f)
	w1 := dialWS(t, wsURL(s, "g", "orders", ""))
	w2 := dialWS(t, wsURL(s, "g", "orders", ""))
	if n := s.WSConnections(); n != 2 {
		t.Errorf("%d connections", n)
	}
	f.close()
	for _, w := range []*wsClient{w1, w2} {
		ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
		_, _, err := w.c.Read(ctx)
		cancel()
		if st := websocket.CloseStatus(err); st != websocket.StatusGoingAway {
			t.Errorf("service closed: %v (%v)", st, err)
		}
	}
	f2 := newFakePop(t, "orders")
	s2 := startFakeGateway(t, f2)
	w3 := dialWS(t, wsURL(s2, "g", "orders", ""))
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
		defer cancel()
		_, _, err := w3.c.Read(ctx)
		done <- err
	}()
	if err := s2.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	err := <-done
	if st := websocket.CloseStatus(err); st != websocket.StatusGoingAway {
		t.Errorf("server closed: %v (%v)", st, err)
	}
	if n := s2.WSConnections(); n != 0 {
		t.Errorf("%d connections after Close", n)
	}
	// New connections are refused after Close.
	ctx, cancel := context.WithTimeout(context.Background(), wsTestTimeout)
	defer cancel()
	if _, _, err := websocket.Dial(ctx, wsURL(s2, "g", "orders", ""), nil); err == nil {
		t.Error("dial after Close succeeded")
	} else if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial after Close: %v", err)
	}
}
