package tx

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Finishing half messages (txend commit / rollback), many per append.
//
// A connection hands the txends it read in one batch to EndBatch, which
// appends their outcomes as one contiguous run of the commit log:
//
//	hend <runBytes> <lastBytes> +<id> -<id> …    one %TX_OP% record: + committed, - rolled back
//	<the real message of each + id, in order>    runBytes of log right after the op, the last one lastBytes
//
// The op comes FIRST and says how long the run of real messages that
// follows it is, as a two-phase commit's op does (commit.go): a crash that
// keeps only a prefix of the run (a power loss, or a kill -9 in the middle
// of the write of a long run) leaves an op whose run is short, and recovery
// appends the messages that did not survive (checkEndRun). So a committed
// half message is never lost and never appears twice, whatever prefix of
// its run survives: before the op it is still pending (checked back), with
// the op it is committed exactly once. Only the newest op can have a short
// run (anything after it in the log means the run before it is whole).
//
// One op for a whole batch instead of one per message: a transactional
// message costs two records (its half and its real message) and a share of
// one op, and one append lock and one group commit serve the batch.

// EndReq is one txend of a batch.
type EndReq struct {
	ID     int64
	Action Action
	// Results. Err is ErrNotFound when no such half message is pending
	// (finished already, or unknown), or the error that kept its outcome
	// from being appended (it stays pending). Flush is the group commit the
	// reply waits for (nil: nothing to wait for); Appended says the outcome
	// was appended (with CallerWritesOut, the reply fails when the caller's
	// write-out fails).
	Err      error
	Flush    *store.Flush
	Appended bool
}

// endScratch holds EndBatch's buffers, reused batch after batch by one
// goroutine (a Session's reader, or the check scan).
type endScratch struct {
	items []endItem
	msgs  []store.Message
	res   []store.AppendResult
	op    []byte
	names nameCache // when no session is given
}

type endItem struct {
	h    *half
	req  *EndReq
	a    Action
	msg  store.Message     // commit: the real message (aliases rd)
	rd   *store.ReadResult // commit: the half record, held until appended
	size int64             // commit: the real message's record size
}

// Bounds of one run: the run must fit in a segment, the op in a record.
const (
	maxEndRunBytes = 1 << 20
	maxEndRunItems = 2048
)

// EndBatch finishes the half messages of reqs (the txends a connection read
// in one batch), filling in each request's results. s may be nil.
func (m *Manager) EndBatch(s *Session, reqs []EndReq) {
	sc := &endScratch{} // no session: any goroutine (tests, tools)
	if s != nil {
		sc = &s.end
	}
	items := sc.items[:0]
	m.mu.Lock()
	for i := range reqs {
		r := &reqs[i]
		r.Err, r.Flush, r.Appended = nil, nil, false
		h := m.halves[r.ID]
		if h == nil {
			r.Err = ErrNotFound
			continue
		}
		if r.Action != Commit && r.Action != Rollback {
			m.emit(Event{Kind: EvEnd, ID: r.ID, Group: h.group, Checks: h.checks, Action: r.Action})
			continue // unknown: it stays pending
		}
		m.removeHalfLocked(h) // ours now: a concurrent txend or check finds nothing
		items = append(items, endItem{h: h, req: r, a: r.Action})
	}
	m.mu.Unlock()
	names := &sc.names
	if s != nil {
		names = &s.names
	}
	m.finish(sc, names, items)
	sc.items = items[:0]
}

// finishOne appends the outcome of one half message removed from the table
// by the caller (the check scan's rollbacks); on failure it is pending again.
func (m *Manager) finishOne(h *half, a Action) error {
	var r EndReq
	sc := &m.scanEnd
	items := append(sc.items[:0], endItem{h: h, req: &r, a: a})
	m.finish(sc, &sc.names, items)
	sc.items = items[:0]
	if r.Err == nil && m.cfg.CallerWritesOut && r.Flush == nil {
		r.Err = m.st.WriteOut() // no connection writes this one out
	}
	return r.Err
}

// finish appends the outcomes of items (removed from the table) in runs of
// at most maxEndRunBytes, and puts back the ones that failed.
func (m *Manager) finish(sc *endScratch, names *nameCache, items []endItem) {
	for i := range items {
		it := &items[i]
		if it.a != Commit {
			continue
		}
		if err := m.loadReal(names, it); err != nil {
			it.req.Err = err
		}
	}
	for from := 0; from < len(items); {
		to, runBytes := from, int64(0)
		for to < len(items) && to-from < maxEndRunItems {
			it := &items[to]
			if it.req.Err == nil && it.a == Commit {
				if runBytes > 0 && runBytes+it.size > maxEndRunBytes {
					break
				}
				runBytes += it.size
			}
			to++
		}
		m.appendEnds(sc, items[from:to]) // each item gets its result
		from = to
	}
	for i := range items {
		if items[i].rd != nil {
			items[i].rd.Release()
			items[i].rd = nil
		}
	}
	now := m.cfg.Now()
	m.mu.Lock()
	for i := range items {
		it := &items[i]
		if it.req.Err != nil {
			// Not finished: pending again, checked one interval later.
			it.h.due = now.Add(m.cfg.CheckInterval)
			m.addHalfLocked(it.h)
			continue
		}
		m.freeHalfLocked(it.h)
	}
	m.mu.Unlock()
}

// loadReal reads the half record of a commit and makes it.msg the real
// message, aliasing the record (held in it.rd until the append).
func (m *Manager) loadReal(names *nameCache, it *endItem) error {
	if h := it.h; h.body != nil { // kept since the put: no read
		it.msg = store.Message{Topic: h.topic, Partition: h.partition, Flag: h.flag, BornTime: h.born,
			SysFlag: protocol.SysFlagTxCommit | h.traced, Properties: h.body[:h.nprops:h.nprops], Data: h.body[h.nprops:]}
		return m.planReal(it)
	}
	rd, err := m.st.ReadByID(it.h.id)
	if err != nil {
		return err
	}
	if rd.Count == 0 {
		rd.Release()
		return ErrNotFound
	}
	r, _, err := protocol.DecodeRecordNoCRC(rd.Bufs[0]) // ReadByID verified it
	var meta halfRaw
	if err == nil {
		meta, err = parseHalfRaw(r.Properties)
	}
	if err != nil || string(r.Topic) != HalfTopic || len(meta.group) == 0 {
		rd.Release()
		return errBadHalf
	}
	own := meta.own
	if hasProp(own, PropTx) { // written by an older broker, tx=half kept
		own = withoutProp(own, PropTx)
	}
	it.msg = store.Message{
		Topic: names.topicName(meta.topic), Partition: meta.partition, Flag: r.Flag, BornTime: r.BornTime,
		SysFlag: protocol.SysFlagTxCommit | r.SysFlag&protocol.SysFlagTraced, Properties: own, Data: r.Data,
	}
	it.rd = rd
	if err := m.planReal(it); err != nil {
		rd.Release()
		it.rd = nil
		return err
	}
	return nil
}

// planReal routes a delayed real message to %SCHEDULE% (Config.Schedule)
// and sizes its record. A record the store would refuse is this item's
// error, not its run's: the run of a batch is one append, which one record
// too large fails whole (PutHalf refuses such a message at the put; one
// stored before that check, or while no delay service ran, stays pending
// and is rolled back after transactionCheckMax checks).
func (m *Manager) planReal(it *endItem) error {
	if mayDelay(it.msg.Properties) && m.cfg.Schedule != nil {
		out, ok, err := m.cfg.Schedule(&it.msg)
		if err != nil {
			return err
		}
		if ok {
			it.msg = out
		}
	}
	it.size = int64(protocol.RecordSize(len(it.msg.Topic), len(it.msg.Properties), len(it.msg.Data)))
	switch {
	case len(it.msg.Properties) > protocol.MaxPropertiesLen:
		return errors.New("tx: cannot commit " + strconv.FormatInt(it.h.id, 10) + ": its record to " + it.msg.Topic + " would have " +
			strconv.Itoa(len(it.msg.Properties)) + " bytes of properties, more than " + strconv.Itoa(protocol.MaxPropertiesLen))
	case it.size+2*protocol.BlankMinSize > m.st.SegmentSize():
		return errors.New("tx: cannot commit " + strconv.FormatInt(it.h.id, 10) + ": its record of " + strconv.FormatInt(it.size, 10) +
			" bytes does not fit a segment")
	}
	return nil
}

// appendEnds appends one run: the hend op of items (those still without
// error), then their real messages. Every item of the run gets its result.
func (m *Manager) appendEnds(sc *endScratch, items []endItem) {
	msgs := append(sc.msgs[:0], store.Message{Topic: OpTopic})
	var runBytes, lastBytes int64
	n := 0
	for i := range items {
		it := &items[i]
		if it.req.Err != nil {
			continue
		}
		n++
		if it.a == Commit {
			msgs = append(msgs, it.msg)
			runBytes += it.size
			lastBytes = it.size
		}
	}
	if n == 0 {
		sc.msgs = msgs[:0]
		return
	}
	op := appendEndOp(sc.op[:0], runBytes, lastBytes, items)
	sc.op = op
	msgs[0].Data = op
	if cap(sc.res) < len(msgs) {
		sc.res = make([]store.AppendResult, len(msgs))
	}
	f, err := m.st.AppendBatch(msgs, sc.res[:len(msgs)])
	if err == nil {
		err = m.writeOut(f)
	}
	clear(msgs) // drop the references to the records
	sc.msgs = msgs[:0]
	for i := range items {
		it := &items[i]
		if it.req.Err != nil {
			continue
		}
		if err != nil {
			it.req.Err = err
			continue
		}
		it.req.Flush, it.req.Appended = f, true
		if m.cfg.EndWithoutFlush {
			it.req.Flush = nil
		}
		if it.a == Commit {
			m.committed.Add(1)
		} else {
			m.rolledBack.Add(1)
		}
	}
	m.emitEnds(sc, items, sc.res[:len(msgs)], err)
}

// appendEndOp renders `hend <runBytes> <lastBytes> +<id> -<id> …` for the
// items without error.
func appendEndOp(dst []byte, runBytes, lastBytes int64, items []endItem) []byte {
	dst = append(dst, "hend "...)
	dst = strconv.AppendInt(dst, runBytes, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, lastBytes, 10)
	for i := range items {
		it := &items[i]
		if it.req.Err != nil {
			continue
		}
		if it.a == Commit {
			dst = append(dst, " +"...)
		} else {
			dst = append(dst, " -"...)
		}
		dst = strconv.AppendInt(dst, it.h.id, 10)
	}
	return dst
}

// parseEndOp decodes the fields after `hend`.
func parseEndOp(f [][]byte, o *op) bool {
	if len(f) < 4 {
		return false
	}
	rb, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	lb, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil || rb < 0 || lb < 0 || lb > rb || (rb > 0) != (lb > 0) {
		return false
	}
	o.runBytes, o.lastBytes = rb, lb
	commits := 0
	for _, t := range f[3:] {
		if len(t) < 2 || (t[0] != '+' && t[0] != '-') {
			return false
		}
		id, err := strconv.ParseInt(string(t[1:]), 10, 64)
		if err != nil || id < 0 {
			return false
		}
		o.ends = append(o.ends, endID{id: id, commit: t[0] == '+'})
		if t[0] == '+' {
			commits++
		}
	}
	return (commits > 0) == (rb > 0)
}

// endID is one half message an hend op finishes.
type endID struct {
	id     int64
	commit bool
}

// An hend op found at recovery, with where its run starts in the log.
type endAt struct {
	op
	runStart int64 // physical offset right after the op record
}

// checkEndRun is recovery's check of the newest hend op: when the run of
// real messages after it is shorter than the op says (a crash kept only a
// prefix), the missing ones are appended now, after an hend op of their
// own, and made durable before the broker serves.
func (m *Manager) checkEndRun(e *endAt) error {
	var commits []int64
	for _, x := range e.ends {
		if x.commit {
			commits = append(commits, x.id)
		}
	}
	if len(commits) == 0 {
		return nil
	}
	lo := m.st.MinPos()
	for _, id := range commits {
		if _, pos := protocol.SplitMsgID(id); pos < lo {
			// Half records gone with retention: nothing to check the run
			// against, nor to complete it with.
			m.log.Warn("not checking the newest txend batch for a run cut by a crash: retention deleted half messages it committed",
				"committed", len(commits), "deleted", id, "minPos", lo)
			return nil
		}
	}
	have := survivedRun(e.runStart, e.runBytes, e.lastBytes, len(commits), func(pos int64, i int) (int64, bool) {
		return m.committedRecordAt(pos, func() (*store.ReadResult, error) { return m.st.ReadByID(commits[i]) })
	})
	if have == len(commits) {
		return nil
	}
	rest := commits[have:]
	reqs := make([]EndReq, len(rest))
	items := make([]endItem, len(rest))
	for i, id := range rest {
		items[i] = endItem{h: &half{id: id}, req: &reqs[i], a: Commit}
	}
	sc := &endScratch{}
	m.finish(sc, &sc.names, items)
	m.mu.Lock()
	for i := range items { // recovery knows them finished: not pending, even when this failed
		if h := m.halves[rest[i]]; h != nil {
			m.removeHalfLocked(h)
		}
	}
	m.mu.Unlock()
	var err error
	for i := range reqs {
		if err = reqs[i].Err; err != nil {
			break
		}
	}
	if err == nil {
		if f := reqs[len(reqs)-1].Flush; f != nil {
			err = f.Wait()
		} else {
			err = m.st.WriteOut()
		}
	}
	if err != nil {
		return errors.New("tx: completing the commit of half messages cut by a crash: " + err.Error())
	}
	m.log.Warn("completed the commit of half messages a crash had cut short", "survived", have, "appended", len(rest))
	return nil
}

// hasProp reports whether props has a pair with key key (fast: a substring
// search, no parse).
func hasProp(props []byte, key string) bool {
	if len(props) <= len(key) {
		return false
	}
	if bytes.HasPrefix(props, []byte(key)) && props[len(key)] == '=' {
		return true
	}
	var pat [32]byte // keys are short constants
	pat[0] = '&'
	n := copy(pat[1:], key)
	pat[n+1] = '='
	return bytes.Contains(props, pat[:n+2])
}

// MayDelay reports whether props may hold a delay property (delay=,
// deliverAt=): false means there is nothing to plan (Config.Schedule, the
// delay service's check of a put) — two substring searches instead of a
// parse of the properties.
func MayDelay(props []byte) bool { return mayDelay(props) }

func mayDelay(props []byte) bool {
	return len(props) > 0 && (bytes.Contains(props, []byte("delay=")) || bytes.Contains(props, []byte("deliverAt=")))
}

// appendPropsWithout appends `&pair` for every pair of props whose key is
// not key (dst holds properties already).
func appendPropsWithout(dst, props []byte, key string) []byte {
	for rest := props; len(rest) > 0; {
		pair := rest
		if i := bytes.IndexByte(rest, '&'); i >= 0 {
			pair, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		k, _, _ := bytes.Cut(pair, []byte("="))
		if len(pair) == 0 || string(k) == key {
			continue
		}
		dst = append(dst, '&')
		dst = append(dst, pair...)
	}
	return dst
}
