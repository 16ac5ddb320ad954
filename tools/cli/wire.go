package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// BrokerError is a non-success reply of a broker.
type BrokerError struct {
	Addr string
	Code int
	Msg  string
}

func (e *BrokerError) Error() string {
	msg := strings.TrimSpace(e.Msg)
	if msg == "" {
		msg = protocol.StatusText(e.Code)
	}
	return fmt.Sprintf("broker %s: %d %s", e.Addr, e.Code, msg)
}

// brokerConn is one TCP connection to a broker speaking the text protocol. Requests may be
// pipelined: each gets its own opaque and replies are matched by it, so many goroutines can
// share one connection (a long-polling get does not hold up a put sent after it).
type brokerConn struct {
	addr string
	nc   net.Conn

	wmu sync.Mutex
	bw  *bufio.Writer
	buf []byte

	mu      sync.Mutex
	pending map[int32]chan wireResult
	opaque  int32
	err     error // sticky: set when the connection broke
	done    chan struct{}
}

type wireResult struct {
	reply protocol.Reply
	err   error
}

// dialBroker connects to addr ("host:port").
func dialBroker(ctx context.Context, addr string, timeout time.Duration) (*brokerConn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("cannot connect to broker %s: %w", addr, err)}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &brokerConn{
		addr:    addr,
		nc:      nc,
		bw:      bufio.NewWriterSize(nc, 64<<10),
		pending: map[int32]chan wireResult{},
		done:    make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

func (c *brokerConn) readLoop() {
	defer close(c.done)
	rr := protocol.NewReplyReader(c.nc, 64<<20)
	rr.KeepBodies = true
	for {
		r, err := rr.Next()
		if err != nil {
			c.fail(fmt.Errorf("broker %s: connection lost: %w", c.addr, err))
			return
		}
		c.mu.Lock()
		ch, ok := c.pending[r.Opaque]
		delete(c.pending, r.Opaque)
		c.mu.Unlock()
		if ok {
			ch <- wireResult{reply: r}
		}
	}
}

func (c *brokerConn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	p := c.pending
	c.pending = map[int32]chan wireResult{}
	c.mu.Unlock()
	for _, ch := range p {
		ch <- wireResult{err: err}
	}
	_ = c.nc.Close()
}

// Close closes the connection; pending requests fail.
func (c *brokerConn) Close() {
	c.fail(errors.New("connection closed"))
	<-c.done
}

// send writes one request built by build (which appends it to dst with the given opaque) and
// returns the channel its reply arrives on.
func (c *brokerConn) send(build func(dst []byte, opaque int32) []byte) (<-chan wireResult, int32, error) {
	ch := make(chan wireResult, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, 0, err
	}
	c.opaque++
	if c.opaque <= 0 || c.opaque == math.MaxInt32 { // MaxInt32 is the "no opaque" marker
		c.opaque = 1
	}
	op := c.opaque
	c.pending[op] = ch
	c.mu.Unlock()

	c.wmu.Lock()
	c.buf = build(c.buf[:0], op)
	_ = c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := c.bw.Write(c.buf)
	if err == nil {
		err = c.bw.Flush()
	}
	if cap(c.buf) > 1<<20 {
		c.buf = nil
	}
	c.wmu.Unlock()
	if err != nil {
		err = fmt.Errorf("broker %s: %w", c.addr, err)
		c.fail(err)
		return nil, 0, err
	}
	return ch, op, nil
}

func (c *brokerConn) forget(op int32) {
	c.mu.Lock()
	delete(c.pending, op)
	c.mu.Unlock()
}

// do sends a request and waits for its reply (bounded by ctx). A reply that is neither 200,
// a value block, nor one of okCodes is returned as *BrokerError.
func (c *brokerConn) do(ctx context.Context, build func(dst []byte, opaque int32) []byte, okCodes ...int) (protocol.Reply, error) {
	ch, op, err := c.send(build)
	if err != nil {
		return protocol.Reply{}, err
	}
	select {
	case res := <-ch:
		if res.err != nil {
			return protocol.Reply{}, res.err
		}
		return res.reply, c.check(res.reply, okCodes)
	case <-ctx.Done():
		c.forget(op)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return protocol.Reply{}, &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("broker %s did not answer in time", c.addr)}
		}
		return protocol.Reply{}, ctx.Err()
	}
}

func (c *brokerConn) check(r protocol.Reply, okCodes []int) error {
	if r.Kind == protocol.ReplyValue || r.Code == protocol.StatusSuccess {
		return nil
	}
	for _, k := range okCodes {
		if r.Code == k {
			return nil
		}
	}
	return &BrokerError{Addr: c.addr, Code: r.Code, Msg: string(r.Body)}
}

// Version asks the broker's version (the heartbeat command).
func (c *brokerConn) Version(ctx context.Context) (string, error) {
	r, err := c.do(ctx, protocol.AppendVersion)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(r.Body)), nil
}

// cliGroup is the group name the CLI uses for commands that need one but do not consume
// (offset lookups).
const cliGroup = "metaq-cli"

// Offset asks `offset`: the nearest valid queue offset to off, clamped to [min, max].
func (c *brokerConn) Offset(ctx context.Context, topic string, partition int, off int64) (int64, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendOffset(dst, topic, cliGroup, int32(partition), off, op)
	})
	if err != nil {
		return 0, err
	}
	return protocol.ParseInt(r.Body)
}

// MinMax returns a partition's min and max queue offsets (max = next offset to be written).
func (c *brokerConn) MinMax(ctx context.Context, topic string, partition int) (lo, hi int64, err error) {
	if lo, err = c.Offset(ctx, topic, partition, 0); err != nil {
		return 0, 0, err
	}
	hi, err = c.Offset(ctx, topic, partition, math.MaxInt64)
	return lo, hi, err
}

// Seek asks `seek`: the first queue offset stored at or after ms (unix milliseconds).
func (c *brokerConn) Seek(ctx context.Context, topic string, partition int, ms int64) (int64, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendSeek(dst, topic, int32(partition), ms, op)
	})
	if err != nil {
		return 0, err
	}
	return protocol.ParseInt(r.Body)
}

// Stats asks `stats [item]` and returns the raw body.
func (c *brokerConn) Stats(ctx context.Context, item string) ([]byte, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte { return protocol.AppendStats(dst, item, op) })
	if err != nil {
		return nil, err
	}
	return r.Body, nil
}

// QueryID asks `query id`; a 404 is returned as (nil, nil).
func (c *brokerConn) QueryID(ctx context.Context, id int64) ([]message, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte { return protocol.AppendQueryID(dst, id, op) }, 404)
	if err != nil {
		return nil, err
	}
	if r.Kind != protocol.ReplyValue {
		return nil, nil
	}
	return decodeMessages(r.Body)
}

// QueryKey asks `query key`; a 404 is returned as (nil, nil).
func (c *brokerConn) QueryKey(ctx context.Context, topic, key string, maxNum int) ([]message, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendQueryKey(dst, topic, key, int32(maxNum), op)
	}, 404)
	if err != nil {
		return nil, err
	}
	if r.Kind != protocol.ReplyValue {
		return nil, nil
	}
	return decodeMessages(r.Body)
}

// putResult is what a broker answers to a put.
type putResult struct {
	MsgID     int64
	Partition int
	Offset    int64
}

// sendPut pipelines a put; the returned channel delivers its reply.
func (c *brokerConn) sendPut(topic string, partition int, flag int32, data []byte) (<-chan wireResult, error) {
	ch, _, err := c.send(func(dst []byte, op int32) []byte {
		return protocol.AppendPut(dst, topic, int32(partition), flag, protocol.MessageChecksum(data), "", op, data)
	})
	return ch, err
}

func (c *brokerConn) putReply(res wireResult) (putResult, error) {
	if res.err != nil {
		return putResult{}, res.err
	}
	if err := c.check(res.reply, nil); err != nil {
		return putResult{}, err
	}
	id, p, off, err := protocol.ParsePutResult(res.reply.Body)
	if err != nil {
		return putResult{}, err
	}
	return putResult{MsgID: id, Partition: int(p), Offset: off}, nil
}

// getOutcome is the reply to a get: records, a moved offset (301), or nothing new (404).
type getOutcome struct {
	Msgs    []message
	Moved   bool
	MovedTo int64
	Empty   bool
}

// Get fetches from a partition, waiting up to maxWait on the broker for new messages.
func (c *brokerConn) Get(ctx context.Context, topic, group string, partition int, off int64, maxSize int, maxWait time.Duration, tags string) (getOutcome, error) {
	r, err := c.do(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, topic, group, int32(partition), off, int32(maxSize), op, maxWait.Milliseconds(), tags)
	}, 301, 404)
	if err != nil {
		return getOutcome{}, err
	}
	switch {
	case r.Kind == protocol.ReplyValue:
		msgs, err := decodeMessages(r.Body)
		return getOutcome{Msgs: msgs}, err
	case r.Code == 301:
		to, err := protocol.ParseInt(r.Body)
		return getOutcome{Moved: true, MovedTo: to}, err
	case strings.HasPrefix(string(r.Body), "Could not find message"):
		return getOutcome{Empty: true}, nil
	default: // 404 for another reason: the topic or partition is not served
		return getOutcome{}, &BrokerError{Addr: c.addr, Code: r.Code, Msg: string(r.Body)}
	}
}
