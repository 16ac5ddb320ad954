package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/protocol"
)

// A brokerConn is one TCP connection to a broker, shared by every request to
// that broker. Callers append encoded requests to a write buffer under mu
// (assigning an opaque and registering the call as pending); a writer
// goroutine swaps the buffer out and writes it in one syscall, so requests
// that arrive while a write is in progress are batched into the next one. A
// reader goroutine reads replies (protocol.ReplyReader) and completes the
// pending call with the reply's opaque; replies may come in any order. At most
// window requests are in flight. Every call has a deadline, enforced by the
// connection's ticker; a call that timed out (or whose waiter gave up) leaves
// the pending table, and its late reply is dropped. An idle connection sends
// `version` as a heartbeat. When the connection fails, every pending call
// fails with a *ConnError and the connection is re-dialled with backoff;
// while it is down, new calls fail at once (only the very first dial is
// waited for).

type connConfig struct {
	dialTimeout    time.Duration
	writeTimeout   time.Duration
	heartbeat      time.Duration
	requestTimeout time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	window         int
	maxReplyBody   int
	log            *slog.Logger
	sec            security // TLS and auth (secure.go)

	// Transaction producers (txproducer.go): onUp runs each time a
	// connection is established, onCheck for every `check` request the
	// broker writes on it (on the reader goroutine). Neither may block.
	onUp    func(c *brokerConn)
	onCheck func(c *brokerConn, msgID int64)

	// sendsDone takes back the states of a producer's async sends that
	// the connection's reader completed, once per batch of replies
	// (sendfree.go); nil for other clients.
	sendsDone func([]*sendState)

	// trace is a traced producer's writer (trace.go): each connection
	// sends `trace on` first, stamps its replies with the time of their
	// read, and queues the produce events its reader completes in a ring
	// of its own (produceRing).
	trace *traceWriter
}

type connState uint8

const (
	stateConnecting connState = iota // first dial in progress: calls wait for it
	stateUp
	stateDown // calls fail fast with downErr
	stateClosed
)

type callKind uint8

const (
	kindOther callKind = iota // body copied
	kindPut                   // success body parsed into msgID/partition/offset
	kindGet                   // value block read into the caller's buffer (call.dst) or a fresh one the caller keeps
	kindHeartbeat
	kindBatch // mput: success body parsed into partition, offset (the first) and ids (batch.go)
)

// call is one request in flight. Calls are pooled; a call is owned by its
// sender until it is registered, then by the connection until it completes
// (finish), then by its sender again.
type call struct {
	opaque   int32
	kind     callKind
	deadline int64 // unix nanos (coarse clock)

	// stamp is the trace clock when the reply was read, set by the reader
	// of a traced producer's connection (trace.go). by is the connection
	// whose reader goroutine completes the call through onDone, set by
	// that goroutine (readBatch; readReply for a traced producer's): the
	// completion may then leave things to it (trace.go's ring, retire).
	// Both are cleared when the call is registered.
	stamp time.Duration
	by    *brokerConn
	// free: the call takes no slot of the window (a trace record riding a
	// producer's connection: startFreePut).
	free bool

	// result
	code      int
	value     bool
	body      []byte
	msgID     int64
	partition int32
	offset    int64
	ids       []int64 // kindBatch: the message ids, in order
	batchN    int     // kindBatch: messages in the frame (its reply lists their ids as runs)
	err       error

	done   chan struct{} // cap 1: signalled by finish when onDone is nil
	onDone func(*call)   // async completion, run by whoever completes the call
	// interrupter: selfWait's context callback, which reads opaque under
	// the mutex of the connection it was armed on; selfWait waits for it
	// before the call can be reused (on another connection, under another
	// mutex).
	interrupter sync.WaitGroup

	bodyBuf *bytebufferpool.ByteBuffer // holds body (kindOther), back to its pool on reset

	// selfg: the caller took g's read side for this call and reads its own
	// reply (register, selfread.go); cleared by wait.
	selfg *generation

	// kindGet: the value block is read from the socket straight into dst
	// (FetchInto's reused buffer, fetch.go), or, when dst is nil, into a
	// fresh buffer of the body's size when that is at most hint (the get's
	// byte budget); see valueBuffer.
	dst  []byte
	hint int
	own  bool // the body was read into dst or a fresh buffer (valueBuffer)
}

// newCall returns a call that is not pooled (a producer's send owns its
// call; see sendState).
func newCall() *call { return &call{done: make(chan struct{}, 1)} }

var callPool = sync.Pool{New: func() any { return newCall() }}

func getCall(kind callKind) *call {
	cl := callPool.Get().(*call)
	cl.kind = kind
	return cl
}

func putCall(cl *call) {
	cl.reset()
	callPool.Put(cl)
}

// reset clears the result (and onDone) for the call's next use.
func (cl *call) reset() {
	cl.code, cl.value, cl.err, cl.onDone = 0, false, nil, nil
	cl.msgID, cl.partition, cl.offset = 0, 0, 0
	cl.stamp, cl.by, cl.selfg = 0, nil, nil
	cl.ids = cl.ids[:0]
	cl.body, cl.dst, cl.hint, cl.own = nil, nil, 0, false
	if cl.bodyBuf != nil {
		bytebufferpool.Put(cl.bodyBuf)
		cl.bodyBuf = nil
	}
}

func (cl *call) finish() {
	if cl.onDone != nil {
		cl.onDone(cl)
		return
	}
	cl.done <- struct{}{}
}

// setReply stores a reply in the call (on the reader goroutine; rep.Body is
// only valid until the next reply is read).
func (cl *call) setReply(addr string, rep *protocol.Reply) {
	cl.code, cl.value = rep.Code, rep.Kind == protocol.ReplyValue
	switch {
	case cl.kind == kindPut && rep.Code == protocol.StatusSuccess:
		var err error
		cl.msgID, cl.partition, cl.offset, err = protocol.ParsePutResult(rep.Body)
		if err != nil {
			cl.err = &ConnError{Addr: addr, Err: err}
		}
	case cl.kind == kindBatch && rep.Code == protocol.StatusSuccess:
		var err error
		cl.partition, cl.offset, cl.ids, err = protocol.ParseBatchPutRuns(rep.Body, cl.batchN, cl.ids)
		if err != nil {
			cl.err = &ConnError{Addr: addr, Err: err}
		}
	case cl.kind == kindGet && cl.value:
		if cl.own { // read straight into the call's buffer (valueBuffer)
			cl.body = rep.Body
		} else {
			cl.body = append(make([]byte, 0, len(rep.Body)), rep.Body...)
		}
	default:
		// Variable-size (a stats body, an error text): bytebufferpool
		// recycles the buffers and drops the rare huge one.
		if cl.bodyBuf == nil {
			cl.bodyBuf = bytebufferpool.Get()
		}
		cl.bodyBuf.B = append(cl.bodyBuf.B[:0], rep.Body...)
		cl.body = cl.bodyBuf.B
	}
}

// valueBuffer is where the reader puts the n-byte value block of a reply to
// cl: a get's FetchInto buffer (grown as bytes arrive beyond its capacity),
// or a fresh buffer of exactly n bytes when n is within the get's budget
// (hint); otherwise nil, the reader's own buffer, which grows with the bytes
// actually received and is copied by setReply — a broker cannot make the
// client allocate more than it asked for or was sent. cl may be nil (a late
// reply).
func (cl *call) valueBuffer(n int) []byte {
	switch {
	case cl == nil || cl.kind != kindGet:
		return nil
	case cl.dst != nil:
		cl.own = true
		return cl.dst[:0]
	case n <= cl.hint:
		cl.own = true
		return make([]byte, 0, n)
	}
	return nil // the reader's buffer, copied by setReply once it is all there
}

// maxWindow bounds a connection's window (Config.MaxInFlight), and so the
// size of its pending table.
const maxWindow = 1 << 20

// pendingTable holds the calls in flight on a connection (guarded by
// brokerConn.mu). Opaques are handed out in sequence, so a call lives in slot
// opaque&mask of a ring at least twice the window: no hashing, no allocation.
// An opaque whose slot is still taken (a call older than the whole ring) is
// skipped when opaques are handed out.
type pendingTable struct {
	slots []*call
	mask  int32
	n     int
}

func newPendingTable(window int) pendingTable {
	size := 64
	for size < 2*min(window, maxWindow) {
		size <<= 1
	}
	return pendingTable{slots: make([]*call, size), mask: int32(size - 1)}
}

// busy reports whether opaque's slot is taken.
func (t *pendingTable) busy(opaque int32) bool { return t.slots[opaque&t.mask] != nil }

// put registers cl under cl.opaque, whose slot must be free (!busy).
func (t *pendingTable) put(cl *call) {
	t.slots[cl.opaque&t.mask] = cl
	t.n++
}

// get returns the call registered under opaque (nil when none).
func (t *pendingTable) get(opaque int32) *call {
	if cl := t.slots[opaque&t.mask]; cl != nil && cl.opaque == opaque {
		return cl
	}
	return nil
}

// take removes and returns the call registered under opaque (nil when none).
func (t *pendingTable) take(opaque int32) *call {
	i := opaque & t.mask
	cl := t.slots[i]
	if cl == nil || cl.opaque != opaque {
		return nil
	}
	t.slots[i] = nil
	t.n--
	return cl
}

// len is the number of calls in flight.
func (t *pendingTable) len() int { return t.n }

// takeAll removes every call, appending them to dst.
func (t *pendingTable) takeAll(dst []*call) []*call {
	for i := 0; t.n > 0 && i < len(t.slots); i++ {
		if cl := t.slots[i]; cl != nil {
			dst = append(dst, cl)
			t.slots[i] = nil
			t.n--
		}
	}
	return dst
}

// takeExpired removes the calls whose deadline is at or before now,
// appending them to dst.
func (t *pendingTable) takeExpired(dst []*call, now int64) []*call {
	left := t.n
	for i := 0; left > 0 && i < len(t.slots); i++ {
		cl := t.slots[i]
		if cl == nil {
			continue
		}
		left--
		if cl.deadline > 0 && now >= cl.deadline {
			dst = append(dst, cl)
			t.slots[i] = nil
			t.n--
		}
	}
	return dst
}

// generation is one TCP connection of a brokerConn's life.
type generation struct {
	nc     net.Conn
	dead   chan struct{}   // closed when the connection failed
	wkick  chan struct{}   // cap 1: the write buffer has data
	raw    syscall.RawConn // nc for a lone async send's non-blocking write; nil: TLS (asyncwrite.go)
	failed bool            // guarded by brokerConn.mu
	wg     sync.WaitGroup

	rs    *readSide    // the reply reader and who reads it (selfread.go)
	rint  atomic.Bool  // a caller reading was interrupted (selfread.go)
	stamp *stampReader // a traced producer's: stamps the time of each read (trace.go)
	fail  func(error)  // ends the generation with a read or write error
}

type brokerConn struct {
	addr       string
	timeoutErr error // ErrTimeout naming addr (errors.go), made once
	cfg        *connConfig
	log        *slog.Logger

	window  *window // the calls in flight (window.go)
	closing chan struct{}
	dialCtx context.Context
	cancel  context.CancelFunc
	runDone chan struct{}
	once    sync.Once

	up        atomic.Bool  // mirrors state == stateUp || stateConnecting, for lock-free reads
	clock     atomic.Int64 // coarse unix nanos, updated by the ticker
	activity  atomic.Bool  // a reply arrived since the last tick
	hbPending atomic.Bool
	hbDone    func(*call)

	mu      sync.Mutex
	state   connState
	ready   chan struct{} // closed once the first dial finished
	downErr error
	cur     *generation
	pending pendingTable
	nextOp  int32
	// Requests are encoded straight into wbuf; the writer swaps it with
	// spare and writes it out, so a connection owns exactly two buffers
	// for its life and encoding allocates nothing. Not a pool's job (no
	// buffer changes hands), so not bytebufferpool's: that one holds the
	// variable-size pieces built per request (a put's properties line,
	// sendState) and copied replies (call.bodyBuf).
	wbuf     []byte
	spare    []byte
	writing  bool // the write side is taken: the writer or a synchronous caller writes (endSync)
	closeErr error
	syncMode bool // the last request registered was one its caller waits for (selfread.go)

	tl *produceRing // a traced producer's: produce events its reader completed (trace.go)

	retired []*sendState // the reader goroutine's: async sends its batch completed (sendfree.go)
}

func newBrokerConn(addr string, cfg *connConfig) *brokerConn {
	c := &brokerConn{
		addr:       addr,
		timeoutErr: &brokerTimeout{addr: addr},
		cfg:        cfg,
		log:        cfg.log.With("broker", addr),
		window:     newWindow(min(cfg.window, maxWindow)),
		closing:    make(chan struct{}),
		runDone:    make(chan struct{}),
		ready:      make(chan struct{}),
		pending:    newPendingTable(cfg.window),
		wbuf:       make([]byte, 0, 64<<10),
		spare:      make([]byte, 0, 64<<10),
	}
	if cfg.trace != nil {
		c.tl = cfg.trace.newRing(addr)
	}
	c.dialCtx, c.cancel = context.WithCancel(context.Background())
	c.up.Store(true)
	c.clock.Store(time.Now().UnixNano())
	c.hbDone = c.heartbeatDone
	go c.run()
	return c
}

// healthy reports whether the connection is up (or still being made for the
// first time).
func (c *brokerConn) healthy() bool { return c.up.Load() }

// deadlineFor is the call deadline: ctx's deadline or now+timeout, the
// earlier.
func (c *brokerConn) deadlineFor(ctx context.Context, timeout time.Duration) int64 {
	d := c.clock.Load() + int64(timeout)
	if t, ok := ctx.Deadline(); ok {
		d = min(d, t.UnixNano())
	}
	return d
}

// begin reserves a window slot and registers cl as pending with a fresh
// opaque. On success it returns with c.mu held: the caller appends the
// request (with cl.opaque) to c.wbuf and calls end.
func (c *brokerConn) begin(ctx context.Context, cl *call, deadline int64) error {
	if !c.window.tryAcquire() {
		if err := c.window.acquire(ctx, c.closing); err != nil {
			if err == errWindowClosing {
				return c.closedErr()
			}
			return err
		}
	}
	return c.register(ctx, cl, deadline)
}

// register is begin after the window slot was taken (it gives the slot back
// on failure).
func (c *brokerConn) register(ctx context.Context, cl *call, deadline int64) error {
	c.mu.Lock()
	if c.state == stateConnecting {
		ready := c.ready
		c.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			c.releaseFor(cl)
			return ctx.Err()
		case <-c.closing:
		}
		c.mu.Lock()
	}
	if c.state != stateUp {
		err := c.downErr
		if c.state == stateClosed {
			err = c.closeErr
		}
		c.mu.Unlock()
		c.releaseFor(cl)
		return err
	}
	for {
		c.nextOp++
		if c.nextOp <= 0 || c.nextOp == math.MaxInt32 {
			c.nextOp = 1
		}
		if !c.pending.busy(c.nextOp) {
			break
		}
	}
	cl.opaque = c.nextOp
	cl.deadline = deadline
	cl.stamp, cl.by, cl.selfg = 0, nil, nil
	c.pending.put(cl)
	c.onRegisterLocked(c.cur, cl) // selfread.go
	return nil
}

// end releases c.mu after begin and wakes the writer.
func (c *brokerConn) end() {
	g := c.cur
	c.mu.Unlock()
	select {
	case g.wkick <- struct{}{}:
	default:
	}
}

// endSync is end for a caller that will wait for the reply (Send, admin
// requests): when nobody is writing, it writes the buffer itself instead
// of waking the writer goroutine. The caller parks right after anyway, so
// this saves a goroutine hand-off (and on an idle machine a futex wake of a
// second OS thread) on the request's path. Requests stay in order: what
// other goroutines appended before goes out in the same write, and while a
// write is in progress (writing) everything else waits for the writer.
func (c *brokerConn) endSync() {
	g := c.cur
	if c.writing || g == nil || g.failed || len(c.wbuf) == 0 {
		c.end()
		return
	}
	err := c.writeOutLocked(g)
	cur := c.cur // the connection may have been replaced meanwhile
	more := len(c.wbuf) > 0 && cur != nil
	c.mu.Unlock()
	if err != nil {
		_ = c.fail(g, &ConnError{Addr: c.addr, Err: err})
		return
	}
	if more {
		select {
		case cur.wkick <- struct{}{}:
		default:
		}
	}
}

// writeOutLocked writes what c.wbuf holds (the writer or endSync). Called
// with c.mu held and c.writing false; it releases c.mu for the write (with
// c.writing set, so nobody else writes meanwhile and appends go to a fresh
// buffer) and returns with c.mu held again, the written buffer kept as the
// spare unless it grew past 4 MiB.
func (c *brokerConn) writeOutLocked(g *generation) error {
	buf := c.wbuf
	c.wbuf, c.spare = c.spare[:0], nil
	c.writing = true
	c.mu.Unlock()
	err := c.writeBuf(g, buf)
	if cap(buf) > 4<<20 {
		buf = make([]byte, 0, 64<<10)
	}
	c.mu.Lock()
	c.spare = buf[:0]
	c.writing = false
	return err
}

// writeBuf writes one buffer of requests (the writer or endSync, with
// c.writing set).
func (c *brokerConn) writeBuf(g *generation, buf []byte) error {
	_ = g.nc.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
	_, err := g.nc.Write(buf)
	c.activity.Store(true)
	return err
}

// abandon removes cl from the pending calls; false when it already completed
// (or is completing: its finish is on the way).
func (c *brokerConn) abandon(cl *call) bool {
	c.mu.Lock()
	if c.pending.get(cl.opaque) != cl {
		c.mu.Unlock()
		return false
	}
	c.pending.take(cl.opaque)
	c.mu.Unlock()
	c.releaseFor(cl)
	return true
}

// wait waits for a call registered without onDone (reading its reply
// itself when it took the read side: selfread.go).
func (c *brokerConn) wait(ctx context.Context, cl *call) error {
	if g := cl.selfg; g != nil {
		cl.selfg = nil
		return c.selfWait(ctx, cl, g)
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.abandon(cl) {
			return ctx.Err()
		}
		<-cl.done
	}
	return cl.err
}

func (c *brokerConn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeErr != nil {
		return c.closeErr
	}
	return ErrClosed
}

// --- requests -------------------------------------------------------------

// startPut registers and queues a put. With cl.onDone nil the caller waits
// with c.wait; otherwise onDone runs on completion.
func (c *brokerConn) startPut(ctx context.Context, cl *call, deadline int64, topic string, partition int32, d *protocol.MessageData, checksum bool) error {
	sum := protocol.ChecksumNone
	if checksum {
		sum = d.Checksum() // before begin: not under c.mu
	}
	if err := c.begin(ctx, cl, deadline); err != nil {
		return err
	}
	c.wbuf = protocol.AppendPutMessage(c.wbuf, topic, partition, d, sum, cl.opaque)
	if cl.onDone == nil {
		c.endSync() // the caller waits (put)
	} else {
		c.endAsync() // asyncwrite.go
	}
	return nil
}

// startFreePut starts an async put (cl.onDone set) that takes no slot of
// the window (cl.free): a traced producer's trace records (trace.go), which
// must neither wait for the producer's window nor take its slots.
func (c *brokerConn) startFreePut(ctx context.Context, cl *call, deadline int64, topic string, partition int32, d *protocol.MessageData) error {
	cl.free = true
	if err := c.register(ctx, cl, deadline); err != nil {
		return err
	}
	c.wbuf = protocol.AppendPutMessage(c.wbuf, topic, partition, d, protocol.ChecksumNone, cl.opaque)
	c.end()
	return nil
}

// releaseFor gives back the window slot of a call that ended (none for a
// free one).
func (c *brokerConn) releaseFor(cl *call) {
	if !cl.free {
		c.window.release(1)
	}
}

// put sends a put (cl without onDone) and waits for its reply, bounded by ctx
// and timeout; a reply other than success is a *BrokerError. On success the
// result is in cl.
func (c *brokerConn) put(ctx context.Context, cl *call, timeout time.Duration, topic string, partition int32, d *protocol.MessageData, checksum bool) error {
	if err := c.startPut(ctx, cl, c.deadlineFor(ctx, timeout), topic, partition, d, checksum); err != nil {
		return err
	}
	if err := c.wait(ctx, cl); err != nil {
		return err
	}
	if cl.code != protocol.StatusSuccess {
		return brokerErr(c.addr, cl.code, cl.body)
	}
	return nil
}

// do sends a request built by enc and waits for its reply. The returned
// call must be released with putCall.
func (c *brokerConn) do(ctx context.Context, kind callKind, timeout time.Duration, enc func(dst []byte, opaque int32) []byte) (*call, error) {
	return c.doCall(ctx, getCall(kind), timeout, enc)
}

// doCall is do with a call the caller took from getCall and prepared (a
// get's buffer); it is returned to the pool on failure.
func (c *brokerConn) doCall(ctx context.Context, cl *call, timeout time.Duration, enc func(dst []byte, opaque int32) []byte) (*call, error) {
	if err := c.begin(ctx, cl, c.deadlineFor(ctx, timeout)); err != nil {
		putCall(cl)
		return nil, err
	}
	c.wbuf = enc(c.wbuf, cl.opaque)
	c.endSync()
	if err := c.wait(ctx, cl); err != nil {
		putCall(cl)
		return nil, err
	}
	return cl, nil
}

// --- connection life ------------------------------------------------------

func (c *brokerConn) run() {
	defer close(c.runDone)
	backoff := c.cfg.backoffMin
	failures := 0
	for {
		d := net.Dialer{Timeout: c.cfg.dialTimeout, KeepAlive: 30 * time.Second}
		nc, err := d.DialContext(c.dialCtx, "tcp", c.cfg.sec.dialAddr(c.addr))
		if err == nil {
			nc, err = c.cfg.sec.secure(c.dialCtx, nc, c.addr, c.cfg.dialTimeout) // secure.go
		}
		if err != nil {
			if c.isClosing() {
				return
			}
			failures++
			c.setDown(&ConnError{Addr: c.addr, Err: err})
			if failures == 1 || failures&(failures-1) == 0 { // 1, 2, 4, 8 … failures
				c.log.Warn("metaq client: cannot connect to broker; retrying with backoff", "err", err, "attempts", failures, "backoff", backoff)
			}
			if !c.sleep(backoff) {
				return
			}
			backoff = min(backoff*2, c.cfg.backoffMax)
			continue
		}
		if failures > 0 {
			c.log.Info("metaq client: connected to broker again", "attempts", failures)
		}
		failures = 0
		started := time.Now()
		err = c.serve(nc)
		if c.isClosing() {
			return
		}
		c.log.Warn("metaq client: broker connection lost; reconnecting", "err", err)
		if time.Since(started) > 2*time.Second {
			backoff = c.cfg.backoffMin
		}
		if !c.sleep(backoff) {
			return
		}
		backoff = min(backoff*2, c.cfg.backoffMax)
	}
}

func (c *brokerConn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

func (c *brokerConn) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closing:
		return false
	}
}

func (c *brokerConn) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return
	}
	if c.state == stateConnecting {
		close(c.ready)
	}
	c.state, c.downErr = stateDown, err
	c.up.Store(false)
}

// serve runs one connection until it fails or the brokerConn closes.
func (c *brokerConn) serve(nc net.Conn) error {
	g := &generation{nc: nc, dead: make(chan struct{}), wkick: make(chan struct{}, 1), raw: rawConn(nc)}
	g.rs = newReadSide(c, g) // selfread.go
	var src io.Reader = &g.rs.sr
	if c.tl != nil {
		g.stamp = &stampReader{r: src} // trace.go
		src = g.stamp
	}
	g.rs.rr = protocol.NewReplyReader(src, c.cfg.maxReplyBody)
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		nc.Close()
		return ErrClosed
	}
	if c.state == stateConnecting {
		close(c.ready)
	}
	c.state, c.downErr, c.cur = stateUp, nil, g
	c.up.Store(true)
	c.wbuf = c.wbuf[:0]
	if c.tl != nil {
		c.wbuf = appendTraceOn(c.wbuf) // trace.go: before any put of this connection
		g.wkick <- struct{}{}
	}
	c.mu.Unlock()
	c.clock.Store(time.Now().UnixNano())
	if f := c.cfg.onUp; f != nil {
		f(c)
	}

	var failErr atomic.Value
	fail := func(err error) {
		if c.fail(g, &ConnError{Addr: c.addr, Err: err}) {
			failErr.Store(err)
		}
	}
	g.fail = fail
	g.wg.Add(2)
	go c.reader(g)
	go c.writer(g, fail)

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	idleSince := time.Now()
	for {
		select {
		case <-g.dead:
			g.wg.Wait()
			err, _ := failErr.Load().(error)
			if err == nil {
				err = io.EOF
			}
			return err
		case <-c.closing:
			c.fail(g, c.closedErr())
			g.wg.Wait()
			return ErrClosed
		case now := <-tick.C:
			c.clock.Store(now.UnixNano())
			c.sweep(now.UnixNano())
			if c.activity.Swap(false) {
				idleSince = now
			} else if now.Sub(idleSince) >= c.cfg.heartbeat && !c.hbPending.Load() {
				c.heartbeat()
				idleSince = now
			}
		}
	}
}

// fail ends generation g: every pending call fails with err. It reports
// whether this call did it (false when g had already failed).
func (c *brokerConn) fail(g *generation, err error) bool {
	c.mu.Lock()
	if g.failed {
		c.mu.Unlock()
		return false
	}
	g.failed = true
	close(g.dead)
	if c.cur == g {
		c.cur = nil
	}
	if c.state == stateUp {
		c.state, c.downErr = stateDown, err
		c.up.Store(false)
	}
	if c.state == stateClosed {
		err = c.closeErr
	}
	calls := c.pending.takeAll(nil)
	c.wbuf = c.wbuf[:0]
	c.mu.Unlock()
	g.nc.Close()
	for _, cl := range calls {
		c.releaseFor(cl)
		cl.err = err
		cl.finish()
	}
	return true
}

// sweep fails the calls whose deadline passed.
func (c *brokerConn) sweep(now int64) {
	var expired []*call
	c.mu.Lock()
	expired = c.pending.takeExpired(expired, now)
	if g := c.cur; g != nil && g.rs.rcall != nil && c.pending.get(g.rs.rcall.opaque) != g.rs.rcall {
		c.interruptLocked(g, g.rs.rcall) // its caller reads: stop it (selfread.go)
	}
	c.mu.Unlock()
	for _, cl := range expired {
		c.releaseFor(cl)
		cl.err = c.timeoutErr
		cl.finish()
	}
}

func (c *brokerConn) heartbeat() {
	cl := getCall(kindHeartbeat)
	cl.onDone = c.hbDone
	if !c.window.tryAcquire() {
		putCall(cl) // the window is full: the connection is anything but idle
		return
	}
	c.hbPending.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // never wait for the first dial: the serve loop must not block
	err := c.register(ctx, cl, c.clock.Load()+int64(c.cfg.requestTimeout))
	if err != nil {
		c.hbPending.Store(false)
		putCall(cl)
		return
	}
	c.wbuf = protocol.AppendVersion(c.wbuf, cl.opaque)
	c.end()
}

func (c *brokerConn) heartbeatDone(cl *call) {
	err := cl.err
	putCall(cl)
	c.hbPending.Store(false)
	if errors.Is(err, ErrTimeout) {
		c.mu.Lock()
		g := c.cur
		c.mu.Unlock()
		if g != nil {
			c.log.Warn("metaq client: broker does not answer heartbeats; closing the connection")
			c.fail(g, &ConnError{Addr: c.addr, Err: errors.New("heartbeat timed out")})
		}
	}
}

// reader reads replies while it owns g's read side (selfread.go).
func (c *brokerConn) reader(g *generation) {
	defer g.wg.Done()
	if c.tl != nil {
		defer c.tl.publish()
	}
	defer c.flushRetired()
	rs := g.rs
	for {
		if rs.rr.Buffered() == 0 {
			c.flushRetired() // sendfree.go: the read batch is done
			if c.tl != nil {
				c.tl.publish() // the read batch is done: its produce events go to the writer
			}
			if rs.lazy && !c.parkReader(g) {
				return
			}
		}
		if c.readBatch(g) { // selfread.go
			continue
		}
		c.flushRetired() // before a read that may wait for the socket
		if _, err := c.readReply(g); err != nil {
			c.readFailed(g, err)
			return
		}
	}
}

func (c *brokerConn) writer(g *generation, fail func(error)) {
	defer g.wg.Done()
	for {
		select {
		case <-g.wkick:
		case <-g.dead:
			return
		}
		for {
			c.mu.Lock()
			if g.failed {
				c.mu.Unlock()
				return
			}
			if len(c.wbuf) == 0 || c.writing { // a synchronous caller writes and kicks again (endSync)
				c.mu.Unlock()
				break
			}
			err := c.writeOutLocked(g)
			c.mu.Unlock()
			if err != nil {
				fail(err)
				return
			}
		}
	}
}

// close closes the connection; pending calls fail with err (ErrClosed when
// nil). It waits for the connection's goroutines.
func (c *brokerConn) close(err error) {
	if err == nil {
		err = ErrClosed
	}
	c.once.Do(func() {
		c.mu.Lock()
		if c.state == stateConnecting {
			close(c.ready)
		}
		c.state, c.closeErr = stateClosed, err
		c.up.Store(false)
		c.mu.Unlock()
		close(c.closing)
		c.cancel()
	})
	<-c.runDone
	if c.tl != nil {
		c.tl.retired.Store(true) // trace.go: the writer drains it one last time
	}
}

// --- pool -------------------------------------------------------------------

// connPool holds one brokerConn per broker address.
type connPool struct {
	cfg    *connConfig
	mu     sync.Mutex
	conns  map[string]*brokerConn
	closed bool
}

func newConnPool(cfg *connConfig) *connPool {
	return &connPool{cfg: cfg, conns: map[string]*brokerConn{}}
}

// get returns the connection to addr, dialling it on first use; nil after
// close.
func (p *connPool) get(addr string) *brokerConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	c := p.conns[addr]
	if c == nil {
		c = newBrokerConn(addr, p.cfg)
		p.conns[addr] = c
	}
	return c
}

// retain removes the connections to addresses not in keep (brokers that
// left) and returns them; the caller closes them with closeGone, without
// holding locks their failing calls' completions may need.
func (p *connPool) retain(keep map[string]bool) []*brokerConn {
	var gone []*brokerConn
	p.mu.Lock()
	for addr, c := range p.conns {
		if !keep[addr] {
			gone = append(gone, c)
			delete(p.conns, addr)
		}
	}
	p.mu.Unlock()
	return gone
}

// closeGone closes connections removed by retain: their pending calls fail
// with ErrBrokerGone (retriable).
func closeGone(gone []*brokerConn) {
	for _, c := range gone {
		c.close(&ConnError{Addr: c.addr, Err: ErrBrokerGone})
	}
}

func (p *connPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*brokerConn{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.close(ErrClosed) })
	}
	wg.Wait()
}
