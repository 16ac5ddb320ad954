package broker

import (
	"errors"
	"strconv"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

// handle is the parser's callback, run on the reader goroutine. Replies go
// to the reader-local queue c.rq and are published after the whole read
// buffer is parsed, so a burst of pipelined requests costs one hand-off.
func (c *conn) handle(cmd *protocol.Command) error {
	if cmd.Err != nil {
		c.srv.stats.badReqs.Add(1)
		c.log.Debug("bad request", "op", cmd.Op.String(), "err", cmd.Err.Msg)
		c.rq.addResultString(cmd.Err.Code, cmd.Err.Msg, cmd.Opaque)
		return nil
	}
	if c.srv.opts.Auth != nil && !c.authorize(cmd) { // security.go
		return nil
	}
	switch cmd.Op {
	case protocol.OpPut, protocol.OpBatchPut, protocol.OpTransaction, protocol.OpTxEnd, protocol.OpRetry:
		if c.refuseWrite(cmd) { // a slave, or a fenced master (replication.go)
			break
		}
		switch cmd.Op {
		case protocol.OpPut:
			c.handlePut(cmd)
		case protocol.OpBatchPut:
			c.handleBatchPut(cmd) // batchput.go
		case protocol.OpTransaction:
			c.handleTransaction(cmd)
		case protocol.OpTxEnd:
			c.handleTxEnd(cmd)
		default:
			c.handleRetry(cmd)
		}
	case protocol.OpGet:
		c.handleGet(cmd)
	case protocol.OpOffset:
		c.handleOffset(cmd)
	case protocol.OpStats:
		c.handleStats(cmd)
	case protocol.OpVersion:
		c.rq.addResultString(protocol.StatusSuccess, Version, cmd.Opaque)
	case protocol.OpQuit:
		c.quit = true
	case protocol.OpSeek:
		c.handleSeek(cmd)
	case protocol.OpQueryID:
		c.handleQueryID(cmd)
	case protocol.OpQueryKey:
		c.handleQueryKey(cmd)
	case protocol.OpPop:
		c.handlePop(cmd) // popconn.go
	case protocol.OpAck, protocol.OpRelease, protocol.OpReject, protocol.OpExtend:
		c.handleFinish(cmd) // popconn.go
	case protocol.OpProducer:
		c.handleProducer(cmd)
	case protocol.OpReplicate:
		c.handleReplicate(cmd) // replication.go
	case protocol.OpAuth:
		c.handleAuth(cmd) // security.go
	case protocol.OpTrace:
		c.handleTrace(cmd) // traceput.go
	case protocol.OpSync:
		c.rq.addResultString(protocol.StatusServiceUnavailable, "sync (replication) is not supported yet", cmd.Opaque)
	default:
		c.rq.addResultString(protocol.StatusBadRequest, "unknown command", cmd.Opaque)
	}
	return nil
}

// putFailedMessage renders MetaQ's put failure text for an error that has
// no topic context (a failed group commit).
func (s *Server) putFailedMessage(err error) string {
	return "Put message failed. Detail:" + err.Error()
}

// putError is MetaQ's `Put message to [broker '…'] [partition '…'] failed.Detail:…`.
func (s *Server) putError(topic []byte, partition int32, detail string) string {
	return "Put message to [broker '" + s.BrokerString() + "'] [partition '" + string(topic) + "-" +
		strconv.Itoa(int(partition)) + "'] failed.Detail:" + detail
}

// BrokerString is the broker's URL as registered in ZooKeeper.
func (s *Server) BrokerString() string {
	host := s.opts.HostName
	if host == "" {
		host = "127.0.0.1"
	}
	return "meta://" + host + ":" + strconv.Itoa(s.Port())
}

// failPut counts a failed put (for its topic too, when known) and queues its
// error reply.
func (c *conn) failPut(ts *topicState, code int, body string, opaque int32) {
	if ts != nil {
		ts.putFailed.Add(1)
	}
	c.srv.stats.putFailed.Add(1)
	c.rq.addResultString(code, body, opaque)
}

func (c *conn) handlePut(cmd *protocol.Command) {
	s := c.srv
	if string(cmd.Topic) == trace.Topic {
		s.stats.cmdPut.Add(1)
		c.tracePut(cmd) // traceput.go: the one system topic that takes puts
		return
	}
	// The put path is shared with Server.Publish (publish.go): refusals,
	// partition choice, delays and the append live there. The counters are
	// the connection's until the end of the read (putcount.go).
	ts, perr := c.cachedPutTopic(cmd.Topic, cmd.Partition)
	if perr != nil {
		s.stats.cmdPut.Add(1)
		c.failPut(nil, perr.Code, perr.Msg, cmd.Opaque)
		return
	}
	sampled := s.sampleStart(c.countPut(ts))
	if len(cmd.TxKey) > 0 || isSystemTopic(ts.name) {
		c.txPut(ts, cmd) // txconn.go
		return
	}
	partition, perr := s.putPartition(ts, cmd.Partition)
	if perr != nil {
		c.failPut(ts, perr.Code, perr.Msg, cmd.Opaque)
		return
	}
	props, data, flag, err := protocol.SplitProperties(cmd.Flag, cmd.Data)
	if err != nil {
		c.failPut(ts, protocol.StatusBadRequest, err.Error(), cmd.Opaque)
		return
	}
	msg := store.Message{Topic: ts.name, Partition: partition, Flag: flag, Properties: props, Data: data, StoreTime: c.readMs,
		SysFlag: c.traceMark, Ref: s.storeRef(ts)}
	if grp, half := tx.HalfGroupRaw(props); half {
		c.halfPut(ts, grp, &msg, cmd.Opaque) // txconn.go
		return
	}
	delayed, ok := c.delayPut(ts, &msg, cmd.Opaque)
	if !ok {
		return
	}
	n := len(msg.Data)
	res, flush, perr := s.putAppend(ts, &msg)
	if perr != nil {
		c.failPut(ts, perr.Code, perr.Msg, cmd.Opaque)
		return
	}
	c.putCounts.bytes += int64(n)
	if delayed {
		res.QueueOffset = -1 // stored in %SCHEDULE%: no queue offset in its topic yet
	}
	c.rq.addPut(flush, res.MsgID, partition, res.QueueOffset, cmd.Opaque)
	c.rq.replies[len(c.rq.replies)-1].t0 = sampled
	if !delayed { // a delayed message is not in its topic yet: nothing for a later get to wait for
		c.own.note(ts, partition, res.QueueOffset, flush)
	}
	s.topicWritten(ts)
}

// subscribable resolves a topic/partition for get, offset and seek. It queues
// MetaQ's reply and returns nil when the request cannot be served.
func (c *conn) subscribable(cmd *protocol.Command) *topicState {
	ts := c.srv.topics.lookup(cmd.Topic, cmd.Partition, c.srv.store) // a read interns no topic (topics.go)
	if ts == nil || cmd.Partition < 0 || int(cmd.Partition) >= ts.settings.NumPartitions {
		c.rq.addResultString(protocol.StatusNotFound, "The topic `"+string(cmd.Topic)+"` in partition `"+
			strconv.Itoa(int(cmd.Partition))+"` is not exists", cmd.Opaque)
		return nil
	}
	if !ts.settings.AcceptSubscribe {
		c.rq.addResultString(protocol.StatusForbidden, "The server do not accept subscriptions to topic "+ts.name, cmd.Opaque)
		return nil
	}
	return ts
}

func (c *conn) handleGet(cmd *protocol.Command) {
	s := c.srv
	s.stats.cmdGet.Add(1)
	ts := c.subscribable(cmd)
	if ts == nil {
		s.stats.getMiss.Add(1)
		return
	}
	sampled := s.sampleStart(ts.gets.Add(1))
	if cmd.MaxSize <= 0 {
		c.rq.addResultString(protocol.StatusBadRequest, "Bad request,invalid max size:"+strconv.Itoa(int(cmd.MaxSize)), cmd.Opaque)
		return
	}
	filter, bad := c.getFilter(cmd.Tags, cmd.Where)
	if bad != "" {
		c.rq.addResultString(protocol.StatusBadRequest, bad, cmd.Opaque)
		return
	}
	g := getReq{
		ts:        ts,
		partition: cmd.Partition,
		offset:    cmd.Offset,
		maxBytes:  min(int(cmd.MaxSize), s.opts.MaxTransferSize),
		filter:    filter,
		opaque:    cmd.Opaque,
	}
	c.awaitOwnPuts(ts, g.partition, g.offset)
	res, err := s.store.Read(ts.name, g.partition, g.offset, g.maxBytes, g.filter)
	if err == nil && res.Status == store.ReadNoMessage && cmd.MaxWaitMs > 0 && !s.shuttingDown.Load() {
		res.Release()
		if c.mayPark(&g) {
			c.park(g, cmd.MaxWaitMs)
		}
		return
	}
	c.srv.readReply(&c.rq, &g, res, err)
	s.observeGet(sampled)
}

// getReq is what a get needs to be answered later (long polling).
type getReq struct {
	ts        *topicState
	partition int32
	offset    int64
	maxBytes  int
	filter    *protocol.TagFilter
	opaque    int32
}

// readReply turns a store read into MetaQ's reply: value, 404 (nothing yet),
// or 301 with the offset to continue from.
func (s *Server) readReply(q *outQueue, g *getReq, res *store.ReadResult, err error) {
	if err != nil {
		s.stats.getFailed.Add(1)
		s.log.Error("read failed", "topic", g.ts.name, "partition", g.partition, "offset", g.offset, "err", err)
		q.addResultString(protocol.StatusInternalServerError, "Could not get message from position "+
			strconv.FormatInt(g.offset, 10)+": "+err.Error(), g.opaque)
		return
	}
	var moved int64
	switch res.Status {
	case store.ReadFound:
		g.ts.getMsgs.Add(int64(res.Count))
		g.ts.getBytes.Add(int64(res.Bytes))
		q.addValue(res, g.opaque)
		return
	case store.ReadNoMessage:
		res.Release()
		s.stats.getMiss.Add(1)
		g.ts.getMiss.Add(1)
		q.addResultString(protocol.StatusNotFound, "Could not find message at position "+strconv.FormatInt(g.offset, 10), g.opaque)
		return
	case store.ReadFiltered:
		moved = res.NextOffset
	case store.ReadOffsetTooSmall:
		moved = res.MinOffset
	case store.ReadOffsetTooLarge:
		moved = res.MaxOffset
	}
	res.Release()
	s.stats.getMiss.Add(1)
	addResultInt(q, protocol.StatusMoved, moved, g.opaque)
}

func addResultInt(q *outQueue, code int, v int64, opaque int32) {
	var b [24]byte
	q.addResult(code, strconv.AppendInt(b[:0], v, 10), opaque)
}

// tagFilter returns the parsed filter for a get's tag expression, cached per
// connection (consumers repeat the same expression on every get).
func (c *conn) tagFilter(expr []byte) *protocol.TagFilter {
	if len(expr) == 0 || (len(expr) == 1 && expr[0] == '*') {
		return nil
	}
	if f, ok := c.filters[string(expr)]; ok {
		return f
	}
	if c.filters == nil || len(c.filters) >= 64 {
		c.filters = make(map[string]*protocol.TagFilter)
	}
	f := protocol.ParseTagFilter(string(expr))
	if f.All() {
		f = nil
	}
	c.filters[string(expr)] = f
	return f
}

func (c *conn) handleOffset(cmd *protocol.Command) {
	s := c.srv
	s.stats.cmdOffset.Add(1)
	ts := c.subscribable(cmd)
	if ts == nil {
		return
	}
	ts.offsets.Add(1)
	lo, hi := s.store.MinOffset(ts.name, cmd.Partition), s.store.MaxOffset(ts.name, cmd.Partition)
	addResultInt(&c.rq, protocol.StatusSuccess, max(lo, min(cmd.Offset, hi)), cmd.Opaque)
}

func (c *conn) handleSeek(cmd *protocol.Command) {
	s := c.srv
	s.stats.cmdOffset.Add(1)
	ts := c.subscribable(cmd)
	if ts == nil {
		return
	}
	addResultInt(&c.rq, protocol.StatusSuccess, s.store.OffsetForTime(ts.name, cmd.Partition, cmd.Timestamp), cmd.Opaque)
}

func (c *conn) handleQueryID(cmd *protocol.Command) {
	res, err := c.srv.store.ReadByID(cmd.MsgID)
	c.queryReply(res, err, "message "+strconv.FormatInt(cmd.MsgID, 10)+" not found", cmd.Opaque)
}

func (c *conn) handleQueryKey(cmd *protocol.Command) {
	ts := c.srv.topics.lookup(cmd.Topic, -1, nil)
	if ts == nil {
		c.rq.addResultString(protocol.StatusNotFound, "The server do not accept topic "+string(cmd.Topic), cmd.Opaque)
		return
	}
	maxNum := int(cmd.MaxNum)
	if maxNum <= 0 || maxNum > 1000 {
		maxNum = 1000
	}
	res, err := c.srv.store.QueryKey(ts.name, string(cmd.Key), maxNum)
	c.queryReply(res, err, "no message with key "+string(cmd.Key)+" in topic "+ts.name, cmd.Opaque)
}

func (c *conn) queryReply(res *store.ReadResult, err error, notFound string, opaque int32) {
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && res.Count == 0):
		if res != nil {
			res.Release()
		}
		c.rq.addResultString(protocol.StatusNotFound, notFound, opaque)
	case err != nil:
		c.log.Error("query failed", "err", err)
		c.rq.addResultString(protocol.StatusInternalServerError, err.Error(), opaque)
	default:
		c.rq.addValue(res, opaque)
	}
}
