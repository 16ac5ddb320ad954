package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Admin is a toolbox for tools (the metaq CLI) and tests: one-off requests to
// a broker by address — fetch a batch, min/max offsets, seek by time, query
// by id or key, stats — plus ZooKeeper lookups when Config.ZKConnect is set.
// Connections are kept (one per broker) until Close. Safe for concurrent use.
type Admin struct {
	cfg  Config
	zk   *zkmeta.Client
	pool *connPool
}

// AdminGroup is the group name Admin's gets carry when FetchRequest.Group is
// empty (the broker requires one but keeps no state for it).
const AdminGroup = "metaq-admin"

// NewAdmin creates an Admin. ZooKeeper is optional: without ZKConnect only
// the methods taking a broker address work.
func NewAdmin(cfg Config) (*Admin, error) {
	cfg = cfg.withDefaults()
	a := &Admin{cfg: cfg}
	a.pool = newConnPool(a.cfg.connConfig())
	if cfg.ZKConnect != "" {
		zc, err := cfg.newZK()
		if err != nil {
			return nil, err
		}
		a.zk = zc
	}
	return a, nil
}

// ZK is the Admin's ZooKeeper client (nil without Config.ZKConnect), for the
// group and offset operations of package zkmeta.
func (a *Admin) ZK() *zkmeta.Client { return a.zk }

// Close closes the connections and the ZooKeeper session.
func (a *Admin) Close() error {
	a.pool.close()
	if a.zk != nil {
		a.zk.Close()
	}
	return nil
}

func (a *Admin) conn(addr string) (*brokerConn, error) {
	if addr == "" {
		return nil, errors.New("metaq client: no broker address")
	}
	c := a.pool.get(addr)
	if c == nil {
		return nil, ErrClosed
	}
	return c, nil
}

// BrokerAddr returns the address of a broker id's master (a slave's when no
// master is registered), from ZooKeeper.
func (a *Admin) BrokerAddr(ctx context.Context, brokerID int) (string, error) {
	if a.zk == nil {
		return "", errors.New("metaq client: BrokerAddr needs Config.ZKConnect")
	}
	bs, err := a.zk.Brokers(ctx)
	if err != nil {
		return "", err
	}
	for _, b := range bs {
		if b.ID == brokerID {
			if addr := brokerAddr(b); addr != "" {
				return addr, nil
			}
		}
	}
	return "", fmt.Errorf("metaq client: broker %d is not registered in ZooKeeper", brokerID)
}

// brokerAddr prefers the master, else the lowest slave.
func brokerAddr(b zkmeta.BrokerInfo) string {
	if b.Master != "" {
		return b.Master
	}
	best := -1
	for id := range b.Slaves {
		if best < 0 || id < best {
			best = id
		}
	}
	if best >= 0 {
		return b.Slaves[best]
	}
	return ""
}

// FetchRequest is a get.
type FetchRequest struct {
	Topic     string
	Group     string // default AdminGroup
	Partition int
	Offset    int64
	MaxBytes  int           // default 1 MiB
	MaxWait   time.Duration // long polling; 0 = answer at once
	Tags      string        // "" or "*" = all, else "a||b"
	Where     string        // a filter expression (SQL92 subset, sql.go); "" = none
}

// FetchResult is the answer to a get.
type FetchResult struct {
	// Messages in offset order; with a tag filter offsets may skip. Empty
	// when nothing was there (404) or when the offset moved.
	Messages []Message
	// NextOffset is where to fetch next: after the last message, the offset
	// the broker moved us to (Moved), or the same offset (nothing new).
	NextOffset int64
	// Moved: the broker answered 301 — the offset was out of range (below
	// the retained minimum or above the maximum) or every record scanned was
	// filtered out; NextOffset is the valid offset to continue from.
	Moved bool
}

// Fetch reads up to maxBytes of messages (at least one when there is one)
// from a partition of the broker at addr, starting at offset, without
// waiting.
func (a *Admin) Fetch(ctx context.Context, addr, topic string, partition int, offset int64, maxBytes int) (*FetchResult, error) {
	return a.FetchWith(ctx, addr, FetchRequest{Topic: topic, Partition: partition, Offset: offset, MaxBytes: maxBytes})
}

// FetchWith is Fetch with every field of the get.
func (a *Admin) FetchWith(ctx context.Context, addr string, req FetchRequest) (*FetchResult, error) {
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	d := decoder{topic: req.Topic, brokerID: -1}
	return fetchOn(ctx, c, &req, a.cfg.RequestTimeout, &d)
}

func fetchOn(ctx context.Context, c *brokerConn, req *FetchRequest, timeout time.Duration, d *decoder) (*FetchResult, error) {
	if !protocol.ValidName(req.Topic) {
		return nil, fmt.Errorf("%w: topic %q", zkmeta.ErrBadName, req.Topic)
	}
	group := req.Group
	if group == "" {
		group = AdminGroup
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	maxBytes = min(maxBytes, math.MaxInt32)
	wm, err := d.whereMatcher(req.Where)
	if err != nil {
		return nil, err
	}
	cl := getCall(kindGet)
	cl.hint = maxBytes // the block is read into a fresh buffer of its size, which the messages alias
	cl, err = c.doCall(ctx, cl, timeout+req.MaxWait, func(dst []byte, op int32) []byte {
		return protocol.AppendGetWhere(dst, req.Topic, group, int32(req.Partition), req.Offset, int32(maxBytes), op, req.MaxWait.Milliseconds(), req.Tags, req.Where)
	})
	if err != nil {
		return nil, err
	}
	defer putCall(cl)
	res := &FetchResult{NextOffset: req.Offset}
	switch {
	case cl.value:
		msgs, next, derr := d.decodeBlockWhere(cl.body, wm)
		res.Messages = msgs
		if next >= 0 {
			res.NextOffset = next
		}
		// All filtered out here (a broker that does not evaluate the
		// expression): continue at NextOffset, as after a 301.
		res.Moved = len(msgs) == 0 && next >= 0
		if derr != nil {
			return res, &ConnError{Addr: c.addr, Err: fmt.Errorf("bad record in value block at offset %d: %w", res.NextOffset, derr)}
		}
	case cl.code == protocol.StatusMoved:
		off, perr := protocol.ParseInt(cl.body)
		if perr != nil {
			return nil, &ConnError{Addr: c.addr, Err: perr}
		}
		res.NextOffset, res.Moved = off, true
	case cl.code == protocol.StatusNotFound:
	default:
		return nil, brokerErr(c.addr, cl.code, cl.body)
	}
	return res, nil
}

// Offset returns the valid offset nearest to offset in a partition (the
// broker's `offset` command clamps to [min, max]).
func (a *Admin) Offset(ctx context.Context, addr, topic string, partition int, offset int64) (int64, error) {
	c, err := a.conn(addr)
	if err != nil {
		return 0, err
	}
	return offsetOn(ctx, c, topic, AdminGroup, partition, offset, a.cfg.RequestTimeout)
}

// MinOffset is the smallest offset still retained in a partition.
func (a *Admin) MinOffset(ctx context.Context, addr, topic string, partition int) (int64, error) {
	return a.Offset(ctx, addr, topic, partition, 0)
}

// MaxOffset is the offset the partition's next message will get (its
// message count since the beginning).
func (a *Admin) MaxOffset(ctx context.Context, addr, topic string, partition int) (int64, error) {
	return a.Offset(ctx, addr, topic, partition, math.MaxInt64)
}

// OffsetForTime returns the first offset of a partition whose message was
// stored at or after t (the max offset when none was).
func (a *Admin) OffsetForTime(ctx context.Context, addr, topic string, partition int, t time.Time) (int64, error) {
	c, err := a.conn(addr)
	if err != nil {
		return 0, err
	}
	return seekOn(ctx, c, topic, partition, t.UnixMilli(), a.cfg.RequestTimeout)
}

// QueryID returns the message with that id. addr "" looks the broker up in
// ZooKeeper (the id holds the broker id).
func (a *Admin) QueryID(ctx context.Context, addr string, msgID int64) (*Message, error) {
	if addr == "" {
		bid, _ := protocol.SplitMsgID(msgID)
		var err error
		if addr, err = a.BrokerAddr(ctx, bid); err != nil {
			return nil, err
		}
	}
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	msgs, err := queryOn(ctx, c, a.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendQueryID(dst, msgID, op)
	})
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, &BrokerError{Addr: addr, Code: protocol.StatusNotFound, Message: "message not found"}
	}
	return &msgs[0], nil
}

// QueryKey returns up to maxNum messages of topic whose keys contain key, on
// the broker at addr (ask every broker to search the whole topic). No match
// is an empty result, not an error.
func (a *Admin) QueryKey(ctx context.Context, addr, topic, key string, maxNum int) ([]Message, error) {
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	if maxNum <= 0 {
		maxNum = 32
	}
	msgs, err := queryOn(ctx, c, a.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendQueryKey(dst, topic, key, int32(min(maxNum, math.MaxInt32)), op)
	})
	var be *BrokerError
	if errors.As(err, &be) && be.Code == protocol.StatusNotFound {
		return nil, nil
	}
	return msgs, err
}

func queryOn(ctx context.Context, c *brokerConn, timeout time.Duration, enc func([]byte, int32) []byte) ([]Message, error) {
	cl, err := c.do(ctx, kindGet, timeout, enc)
	if err != nil {
		return nil, err
	}
	defer putCall(cl)
	if !cl.value {
		return nil, brokerErr(c.addr, cl.code, cl.body)
	}
	d := decoder{brokerID: -1}
	msgs, err := d.decodeBlock(cl.body)
	if err != nil {
		return msgs, &ConnError{Addr: c.addr, Err: err}
	}
	return msgs, nil
}

// Stats returns a broker's `stats [item]` lines (item "" = general;
// "topics", "offsets", "realtime", "help", a topic name).
func (a *Admin) Stats(ctx context.Context, addr, item string) ([]protocol.Stat, error) {
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	return statsOn(ctx, c, item, a.cfg.RequestTimeout)
}

// Version returns the broker's version string.
func (a *Admin) Version(ctx context.Context, addr string) (string, error) {
	c, err := a.conn(addr)
	if err != nil {
		return "", err
	}
	cl, err := c.do(ctx, kindOther, a.cfg.RequestTimeout, protocol.AppendVersion)
	if err != nil {
		return "", err
	}
	defer putCall(cl)
	if cl.code != protocol.StatusSuccess {
		return "", brokerErr(c.addr, cl.code, cl.body)
	}
	return string(cl.body), nil
}

func statsOn(ctx context.Context, c *brokerConn, item string, timeout time.Duration) ([]protocol.Stat, error) {
	body, err := statsBodyOn(ctx, c, item, timeout)
	if err != nil {
		return nil, err
	}
	return protocol.ParseStats(body)
}

func offsetOn(ctx context.Context, c *brokerConn, topic, group string, partition int, offset int64, timeout time.Duration) (int64, error) {
	cl, err := c.do(ctx, kindOther, timeout, func(dst []byte, op int32) []byte {
		return protocol.AppendOffset(dst, topic, group, int32(partition), offset, op)
	})
	return intReply(c, cl, err)
}

func seekOn(ctx context.Context, c *brokerConn, topic string, partition int, tsMs int64, timeout time.Duration) (int64, error) {
	cl, err := c.do(ctx, kindOther, timeout, func(dst []byte, op int32) []byte {
		return protocol.AppendSeek(dst, topic, int32(partition), tsMs, op)
	})
	return intReply(c, cl, err)
}

func intReply(c *brokerConn, cl *call, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	defer putCall(cl)
	if cl.code != protocol.StatusSuccess {
		return 0, brokerErr(c.addr, cl.code, cl.body)
	}
	v, err := protocol.ParseInt(cl.body)
	if err != nil {
		return 0, &ConnError{Addr: c.addr, Err: err}
	}
	return v, nil
}
