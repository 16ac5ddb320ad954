package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/protocol"
)

// WebSocket delivery (docs/http.md, "WebSocket protocol"):
//
//	GET /api/v1/groups/{group}/topics/{topic}/ws?max=K&invisibleMs=…&tags=…&where=…&encoding=text|base64
//
// pushes the group's messages of the topic as JSON frames (gateway_frames.go)
// through the broker's delivery service (broker/pop) and takes ack,
// release, reject and extend frames back on the same socket.
//
// One connection is five goroutines, each with one job:
//   - the reader (the handler's goroutine) reads and decodes client frames
//     and queues their operations (wsConn.ops, bounded);
//   - the executor takes every queued operation at once and carries them
//     out concurrently (acks of many handles share the service's commit
//     rounds), the operations of one handle in order;
//   - the receiver long-polls the service for at most K - held messages
//     (flow control) and hands them to the writer;
//   - the writer owns the socket's writes: message frames and replies;
//   - the pinger sends a ping every wsPingInterval and closes a peer that
//     does not answer.
//
// Rights: the subscribe right is decided at the upgrade and again before
// each receive, on what a receive returns, and before each batch of
// operations; refused, the socket gets an error frame (403) and closes
// with 1008.
//
// Flow control: a message counts against K from the moment it is received
// until its ack, release or reject succeeds, its handle turns out stale,
// or its invisibility time passes (the service may then deliver it again,
// to any member). Memory per connection is bounded by K handles, one
// batch of at most wsReceiveBatch messages in hand, wsOpQueue queued
// operations, wsCtrlQueue reply frames and one client frame
// (maxClientFrame).
//
// Lock rules: wsConn.mu guards held only; it is never held across a
// service call or a socket operation. Server.wsMu guards the set of
// connections, wsClosed and wsOwners; the two are never held together.
//
// Handles may be acknowledged on another socket of the group
// (docs/http.md): Server.wsOwners maps every held (group, handle) to the
// socket holding it (so it is bounded by the sockets' max), and an ack,
// release or reject on any socket frees the slot of the socket that
// received the message.
//
// Closing: a stop (peer gone, write timeout, ping timeout, broker
// shutdown) cancels the connection's context; the receiver, executor,
// writer and pinger end, then the handler closes the socket with a close
// frame (1001 going away on shutdown). Messages delivered and not
// acknowledged stay locked to nobody: the service delivers them again when
// their invisibility time ends.

const (
	wsDefaultMax       = 16
	wsDefaultInvisible = 30 * time.Second
	wsReceiveBatch     = 32 // most messages asked for by one Receive
	wsWriteTimeout     = 30 * time.Second
	wsPingInterval     = 25 * time.Second
	wsPingTimeout      = 20 * time.Second
	wsOpQueue          = 256 // queued operations (reader → executor)
	wsOpBatch          = 256 // operations carried out at once
	wsCtrlQueue        = 64  // reply frames waiting for the writer
	wsReceiveBackoff   = time.Second
	// DefaultMaxWSConnections is Options.MaxWSConnections' default.
	DefaultMaxWSConnections = 1024
)

// Close codes beyond RFC 6455's (4000–4999 are the application's).
const (
	closeUnknownTopic websocket.StatusCode = 4404
)

// wsSub is a connection's subscription, from its query.
type wsSub struct {
	group, topic string
	tags, where  string
	filter       pop.Filter
	max          int
	invisible    time.Duration
	enc          bodyEncoding
}

func parseWSQuery(r *http.Request, group, topic string) (*wsSub, error) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "max", "invisibleMs", "tags", "where", "encoding":
			if len(v) > 1 {
				return nil, badRequest("%s is given more than once", k)
			}
		default:
			return nil, badRequest("unknown parameter %q (max, invisibleMs, tags, where, encoding)", k)
		}
	}
	sub := &wsSub{group: group, topic: topic, max: wsDefaultMax, invisible: wsDefaultInvisible,
		tags: q.Get("tags"), where: q.Get("where")}
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > pop.MaxReceive {
			return nil, badRequest("bad max %q: the most unacknowledged messages, 1 … %d", v, pop.MaxReceive)
		}
		sub.max = n
	}
	if v := q.Get("invisibleMs"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < pop.MinInvisible.Milliseconds() || n > pop.MaxInvisible.Milliseconds() {
			return nil, badRequest("bad invisibleMs %q: %d … %d", v, pop.MinInvisible.Milliseconds(), pop.MaxInvisible.Milliseconds())
		}
		sub.invisible = time.Duration(n) * time.Millisecond
	}
	switch v := q.Get("encoding"); v {
	case "", "text":
	case "base64":
		sub.enc = encBase64
	default:
		return nil, badRequest("bad encoding %q: text or base64", v)
	}
	if len(sub.tags) > protocol.MaxPropertiesLen || len(sub.where) > protocol.MaxPropertiesLen {
		return nil, badRequest("tags or where longer than %d bytes", protocol.MaxPropertiesLen)
	}
	f, err := pop.NewFilter(sub.tags, sub.where)
	if err != nil {
		return nil, badRequest("bad filter: %v", err)
	}
	sub.filter = f
	return sub, nil
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	group, topic := r.PathValue("group"), r.PathValue("topic")
	if !protocol.ValidName(group) {
		s.badInput(w, r, badRequest("bad group name %q", group))
		return
	}
	if !protocol.ValidName(topic) {
		s.badInput(w, r, badRequest("bad topic name %q", topic))
		return
	}
	access := DataAccess{Op: "subscribe", Topic: topic, Group: group}
	if err := s.authorizeData(r, access); err != nil {
		dataError(w, err)
		return
	}
	sub, err := parseWSQuery(r, group, topic)
	if err != nil {
		s.badInput(w, r, err)
		return
	}
	if av, ok := s.opts.Delivery.(pop.Availability); ok && !av.Available() {
		dataError(w, &apiError{http.StatusServiceUnavailable, pop.ErrUnavailable.Error()})
		return
	}
	// The upgrade request, kept for its user (its context's values, not its
	// cancellation): the right is checked again while the socket is open.
	authReq := r.WithContext(context.WithoutCancel(r.Context()))
	wc := &wsConn{srv: s, svc: s.opts.Delivery, sub: sub, authReq: authReq, access: access, held: make(map[string]time.Time, sub.max),
		credit: make(chan struct{}, 1), ops: make(chan wsOpItem, wsOpQueue),
		ctrl: make(chan []byte, wsCtrlQueue), deliv: make(chan []pop.Delivery, 1)}
	wc.ctx, wc.cancel = context.WithCancel(context.Background())
	defer wc.cancel()
	if err := s.addWS(wc); err != nil {
		dataError(w, err)
		return
	}
	defer s.removeWS(wc)
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.opts.WSOriginPatterns})
	if err != nil {
		return // Accept answered the request
	}
	c.SetReadLimit(maxClientFrame)
	wc.c = c
	wc.run()
}

// addWS registers a connection (refused when closing or full).
func (s *Server) addWS(wc *wsConn) error {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.wsClosed {
		return &apiError{http.StatusServiceUnavailable, "shutting down"}
	}
	if len(s.wsConns) >= s.opts.MaxWSConnections {
		return &apiError{http.StatusServiceUnavailable, "too many WebSocket connections (" + strconv.Itoa(s.opts.MaxWSConnections) + ")"}
	}
	if s.wsConns == nil {
		s.wsConns = map[*wsConn]struct{}{}
	}
	s.wsConns[wc] = struct{}{}
	s.wsWG.Add(1)
	return nil
}

func (s *Server) removeWS(wc *wsConn) {
	wc.mu.Lock()
	held := make([]string, 0, len(wc.held))
	for h := range wc.held {
		held = append(held, h)
	}
	wc.mu.Unlock()
	s.disownHandles(wc, held)
	s.wsMu.Lock()
	delete(s.wsConns, wc)
	s.wsMu.Unlock()
	s.wsWG.Done()
}

// closeWS stops every WebSocket connection with 1001 going away and waits
// for them (Close, before the HTTP server shuts down: hijacked connections
// are not http.Server's any more).
func (s *Server) closeWS() {
	s.wsMu.Lock()
	s.wsClosed = true
	for wc := range s.wsConns {
		wc.stop(websocket.StatusGoingAway, "broker shutting down")
	}
	s.wsMu.Unlock()
	s.wsWG.Wait()
}

// WSConnections is the number of open WebSocket connections.
func (s *Server) WSConnections() int {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	return len(s.wsConns)
}

// wsConn is one WebSocket delivery connection.
type wsConn struct {
	srv *Server
	svc pop.Service
	sub *wsSub
	c   *websocket.Conn

	// authReq and access re-check the socket's right before each receive
	// and each batch of operations (changed rights apply at once,
	// docs/security.md).
	authReq *http.Request
	access  DataAccess
	refused atomic.Bool // the refusal was reported (one error frame)

	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc

	stopOnce   sync.Once
	stopCode   websocket.StatusCode
	stopReason string

	mu   sync.Mutex
	held map[string]time.Time // handle → invisibility deadline (guarded by mu)

	credit chan struct{}       // a slot may be free (cap 1)
	ops    chan wsOpItem       // reader → executor
	ctrl   chan []byte         // reply frames → writer
	deliv  chan []pop.Delivery // receiver → writer (cap 1)
}

// wsOpItem is one operation on one handle, of a frame.
type wsOpItem struct {
	fr     *wsFrameState
	handle string
}

// wsFrameState counts a frame's outcomes for its done reply.
type wsFrameState struct {
	f       clientFrame
	pending atomic.Int32
	failed  atomic.Int32
}

// stop ends the connection with a close code (the first stop wins).
func (wc *wsConn) stop(code websocket.StatusCode, reason string) {
	wc.stopOnce.Do(func() {
		wc.stopCode, wc.stopReason = code, reason
		wc.cancel()
	})
}

func (wc *wsConn) run() {
	// The subscribed frame goes first, before the writer owns the socket.
	if b, err := json.Marshal(wsSubscribed{Type: "subscribed", Group: wc.sub.group, Topic: wc.sub.topic, Max: wc.sub.max,
		InvisibleMs: wc.sub.invisible.Milliseconds(), Tags: wc.sub.tags, Where: wc.sub.where, Encoding: wc.sub.enc.String()}); err != nil || !wc.write(b) {
		_ = wc.c.CloseNow()
		return
	}
	var work sync.WaitGroup
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		wc.readLoop()
	}()
	for _, f := range []func(){wc.writeLoop, wc.receiveLoop, wc.execLoop, wc.pingLoop} {
		work.Add(1)
		go func() {
			defer work.Done()
			f()
		}()
	}
	<-wc.ctx.Done()
	work.Wait()
	_ = wc.c.Close(wc.stopCode, wc.stopReason) // close handshake; ends the reader's Read
	<-readerDone
}

// readLoop reads client frames and queues their operations. Its Read has
// no context: cancelling one would drop the socket without a close frame;
// the socket's Close ends it.
func (wc *wsConn) readLoop() {
	for {
		typ, data, err := wc.c.Read(context.Background())
		if err != nil {
			code, reason := websocket.StatusNormalClosure, "bye"
			switch {
			case errors.Is(err, websocket.ErrMessageTooBig):
				code, reason = websocket.StatusMessageTooBig, "frame too large"
			case websocket.CloseStatus(err) == -1:
				code, reason = websocket.StatusAbnormalClosure, "read failed"
			}
			wc.stop(code, reason)
			return
		}
		if typ != websocket.MessageText {
			wc.badFrame(nil, "binary frames are not accepted: send JSON text frames")
			continue
		}
		f, err := decodeClientFrame(data)
		if err != nil {
			var fe *frameError
			errors.As(err, &fe)
			wc.badFrame(fe.id, fe.msg)
			continue
		}
		fr := &wsFrameState{f: f}
		fr.pending.Store(int32(len(f.handles)))
		for _, h := range f.handles {
			select {
			case wc.ops <- wsOpItem{fr: fr, handle: h}:
			case <-wc.ctx.Done():
				return
			}
		}
	}
}

// execLoop carries out queued operations, as many at once as are queued.
func (wc *wsConn) execLoop() {
	batch := make([]wsOpItem, 0, wsOpBatch)
	byHandle := map[string][]wsOpItem{}
	var wg sync.WaitGroup
	for {
		batch = batch[:0]
		select {
		case op := <-wc.ops:
			batch = append(batch, op)
		case <-wc.ctx.Done():
			return
		}
	drain:
		for len(batch) < wsOpBatch {
			select {
			case op := <-wc.ops:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		if !wc.permitted(batch[0].fr.f.op.String()) {
			return
		}
		clear(byHandle)
		for _, op := range batch {
			byHandle[op.handle] = append(byHandle[op.handle], op)
		}
		for _, ops := range byHandle {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, op := range ops {
					wc.execute(op)
				}
			}()
		}
		wg.Wait()
	}
}

// permitted checks the socket's right again. Refused, it sends one error
// frame with the refusal's status (403) and stops the socket with 1008
// (policy violation).
func (wc *wsConn) permitted(op string) bool {
	err := wc.srv.authorizeData(wc.authReq, wc.access)
	if err == nil {
		return true
	}
	if !wc.refused.Swap(true) {
		code := http.StatusForbidden
		var ae *apiError
		if errors.As(err, &ae) {
			code = ae.status
		}
		wc.sendError(nil, op, "", code, err.Error())
		wc.stop(websocket.StatusPolicyViolation, "forbidden")
	}
	return false
}

// execute carries out one operation and accounts for it.
func (wc *wsConn) execute(op wsOpItem) {
	f, svc, g := &op.fr.f, wc.svc, wc.sub.group
	var err error
	switch f.op {
	case opAck:
		err = svc.Ack(g, op.handle)
	case opRelease:
		err = svc.Release(g, op.handle, f.delay)
	case opReject:
		err = svc.Reject(g, op.handle)
	case opExtend:
		err = svc.Extend(g, op.handle, f.inv)
	}
	switch {
	case err == nil && f.op == opExtend:
		if owner := wc.srv.wsOwner(g, op.handle, false); owner != nil {
			owner.extendHeld(op.handle, time.Now().Add(f.inv))
		}
	case err == nil, errors.Is(err, pop.ErrStale), errors.Is(err, pop.ErrBadHandle):
		// Done with, or never held: the slot of the socket that received it
		// (this one or another of the group's) is free.
		if owner := wc.srv.wsOwner(g, op.handle, true); owner != nil {
			owner.unhold(op.handle)
		}
	}
	if err != nil {
		op.fr.failed.Add(1)
		wc.sendError(f.id, f.op.String(), op.handle, popErrorCode(err), err.Error())
	}
	if op.fr.pending.Add(-1) == 0 && f.id != nil {
		failed := int(op.fr.failed.Load())
		wc.send(wsDone{Type: "done", ID: f.id, Op: f.op.String(), OK: len(f.handles) - failed, Failed: failed})
	}
}

// wsHandle names a delivery: handles are per group.
type wsHandle struct{ group, handle string }

// wsOwner returns the socket holding handle h of group (nil: none), and
// forgets it when drop is set.
func (s *Server) wsOwner(group, h string, drop bool) *wsConn {
	k := wsHandle{group, h}
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	wc := s.wsOwners[k]
	if drop && wc != nil {
		delete(s.wsOwners, k)
	}
	return wc
}

// ownHandles records wc as the socket holding ds (before they are written:
// no client can acknowledge a handle it has not received).
func (s *Server) ownHandles(wc *wsConn, ds []pop.Delivery) {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.wsOwners == nil {
		s.wsOwners = map[wsHandle]*wsConn{}
	}
	for i := range ds {
		s.wsOwners[wsHandle{wc.sub.group, ds[i].Handle}] = wc
	}
}

// disownHandles forgets the handles wc held (their invisibility ended, or
// the socket closed).
func (s *Server) disownHandles(wc *wsConn, hs []string) {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	for _, h := range hs {
		if k := (wsHandle{wc.sub.group, h}); s.wsOwners[k] == wc {
			delete(s.wsOwners, k)
		}
	}
}

// extendHeld moves the invisibility deadline of a handle wc holds.
func (wc *wsConn) extendHeld(h string, dl time.Time) {
	wc.mu.Lock()
	if _, ok := wc.held[h]; ok {
		wc.held[h] = dl
	}
	wc.mu.Unlock()
}

// unhold frees the slot of a handle wc holds.
func (wc *wsConn) unhold(h string) {
	wc.mu.Lock()
	_, ok := wc.held[h]
	delete(wc.held, h)
	wc.mu.Unlock()
	if ok {
		select {
		case wc.credit <- struct{}{}:
		default:
		}
	}
}

// waitCredit returns how many more messages may be delivered (> 0), waiting
// while K are held; 0 when the connection stops.
func (wc *wsConn) waitCredit() int {
	for {
		now := time.Now()
		wc.mu.Lock()
		var earliest time.Time
		var expired []string
		for h, dl := range wc.held {
			if !dl.After(now) {
				delete(wc.held, h) // invisibility over: the service may deliver it again
				expired = append(expired, h)
				continue
			}
			if earliest.IsZero() || dl.Before(earliest) {
				earliest = dl
			}
		}
		free := wc.sub.max - len(wc.held)
		wc.mu.Unlock()
		if expired != nil {
			wc.srv.disownHandles(wc, expired)
		}
		if free > 0 {
			return free
		}
		t := time.NewTimer(earliest.Sub(now))
		select {
		case <-wc.credit:
		case <-t.C:
		case <-wc.ctx.Done():
			t.Stop()
			return 0
		}
		t.Stop()
	}
}

// receiveLoop long-polls the service within the connection's credit.
func (wc *wsConn) receiveLoop() {
	inv := min(max(wc.sub.invisible, pop.MinInvisible), pop.MaxInvisible)
	for {
		n := wc.waitCredit()
		if n == 0 || !wc.permitted("receive") {
			return
		}
		ds, err := wc.svc.Receive(wc.ctx, wc.sub.group, wc.sub.topic, wc.sub.filter, min(n, wsReceiveBatch), inv)
		if wc.ctx.Err() != nil {
			return // anything received now stays invisible until inv passes
		}
		if err != nil {
			switch {
			case errors.Is(err, pop.ErrUnknownTopic):
				wc.sendError(nil, "receive", "", 404, err.Error())
				wc.stop(closeUnknownTopic, "unknown topic")
				return
			case errors.Is(err, pop.ErrClosed):
				wc.stop(websocket.StatusGoingAway, "broker shutting down")
				return
			case errors.Is(err, pop.ErrUnavailable): // demoted to a slave
				wc.stop(websocket.StatusTryAgainLater, "this broker is no longer the master of its group")
				return
			case errors.Is(err, pop.ErrTooManyGroups): // a new group beyond popMaxGroups
				wc.sendError(nil, "receive", "", 503, err.Error())
				wc.stop(websocket.StatusTryAgainLater, "too many groups with delivery state on this broker")
				return
			}
			wc.srv.log.Warn("WebSocket delivery: receive failed", "group", wc.sub.group, "topic", wc.sub.topic, "err", err)
			wc.sendError(nil, "receive", "", 500, err.Error())
			select {
			case <-time.After(wsReceiveBackoff):
			case <-wc.ctx.Done():
				return
			}
			continue
		}
		if len(ds) == 0 {
			continue
		}
		if !wc.permitted("receive") { // withdrawn during the long poll
			for i := range ds {
				_ = wc.svc.Release(wc.sub.group, ds[i].Handle, 0) // to the group's other members
			}
			return
		}
		dl := time.Now().Add(inv)
		wc.mu.Lock()
		for i := range ds {
			wc.held[ds[i].Handle] = dl
		}
		wc.mu.Unlock()
		wc.srv.ownHandles(wc, ds)
		select {
		case wc.deliv <- ds:
		case <-wc.ctx.Done():
			return
		}
	}
}

// writeLoop owns the socket's writes.
func (wc *wsConn) writeLoop() {
	var buf []byte
	for {
		// Replies first: an error or done frame is not held up behind a
		// batch of messages.
		select {
		case b := <-wc.ctrl:
			if !wc.write(b) {
				return
			}
			continue
		default:
		}
		select {
		case b := <-wc.ctrl:
			if !wc.write(b) {
				return
			}
		case ds := <-wc.deliv:
			for i := range ds {
				var err error
				buf, err = encodeDelivery(buf[:0], &ds[i], wc.sub.enc)
				if err != nil {
					// A record the broker cannot decode: leave it to redelivery
					// (and the service's maxDeliveries) rather than send garbage.
					wc.srv.log.Error("WebSocket delivery: bad record", "group", wc.sub.group, "err", err)
					continue
				}
				if !wc.write(buf) {
					return
				}
			}
		case <-wc.ctx.Done():
			wc.drainCtrl()
			return
		}
	}
}

// drainCtrl writes the replies queued before a stop (the error frame that
// explains it), unless the socket itself failed.
func (wc *wsConn) drainCtrl() {
	if wc.stopCode == websocket.StatusAbnormalClosure {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		select {
		case b := <-wc.ctrl:
			if wc.c.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		default:
			return
		}
	}
}

func (wc *wsConn) write(b []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wsWriteTimeout)
	err := wc.c.Write(ctx, websocket.MessageText, b)
	cancel()
	if err != nil {
		wc.stop(websocket.StatusAbnormalClosure, "write failed")
		return false
	}
	return true
}

// pingLoop keeps the connection alive and drops a peer that stopped answering.
func (wc *wsConn) pingLoop() {
	t := time.NewTicker(wsPingInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-wc.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(wc.ctx, wsPingTimeout)
		err := wc.c.Ping(ctx)
		cancel()
		if err != nil {
			if wc.ctx.Err() == nil {
				wc.stop(websocket.StatusPolicyViolation, "ping timeout")
			}
			return
		}
	}
}

// send queues a reply frame for the writer (waiting while wsCtrlQueue are
// queued: the reader then stops reading, and TCP pushes back).
func (wc *wsConn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		wc.srv.log.Error("WebSocket delivery: encoding a reply", "err", err)
		return
	}
	select {
	case wc.ctrl <- b:
	case <-wc.ctx.Done():
	}
}

// badFrame answers a client frame that does not decode (400), counted and
// logged as the gateway's other bad input.
func (wc *wsConn) badFrame(id json.RawMessage, msg string) {
	wc.srv.countBadInput("WebSocket frame", msg)
	wc.sendError(id, "", "", 400, msg)
}

func (wc *wsConn) sendError(id json.RawMessage, op, handle string, code int, msg string) {
	wc.send(wsError{Type: "error", ID: id, Op: op, Handle: handle, Code: code, Error: msg})
}

// brokerDelivery is the broker's delivery service as its role changes: on a
// slave the endpoint answers 503 until the node is promoted.
func brokerDelivery(b *broker.Broker) pop.Service {
	return b.LivePop()
}
