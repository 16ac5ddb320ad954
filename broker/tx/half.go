package tx

import (
	"bytes"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Properties of a transactional (half) message put: `tx=half&pgroup=<G>`.
const (
	PropTx     = "tx"
	PropPGroup = "pgroup"
)

// HalfGroup reports whether props mark a half message and returns its
// producer group. ok && group == "" is a half message without a group (the
// broker refuses it).
func HalfGroup(props []byte) (group string, ok bool) {
	raw, ok := HalfGroupRaw(props)
	if !ok {
		return "", false
	}
	return protocol.Unescape(raw), true
}

// HalfGroupRaw is HalfGroup without allocation: the group's raw (still
// URL-escaped) value, aliasing props. One pass over the properties.
func HalfGroupRaw(props []byte) (group []byte, ok bool) {
	half := false
	for rest := props; len(rest) > 0; {
		var k, v []byte
		k, v, rest = protocol.NextProperty(rest)
		switch string(k) {
		case PropTx:
			if string(v) != "half" {
				return nil, false
			}
			half = true
		case PropPGroup:
			group = v
		}
	}
	if !half {
		return nil, false
	}
	return group, true
}

// Action is a txend outcome.
type Action uint8

const (
	Commit Action = iota + 1
	Rollback
	Unknown
)

// ParseAction parses `commit`, `rollback` or `unknown`
// (any case; no allocation).
func ParseAction(b []byte) (Action, bool) {
	switch {
	case bytes.EqualFold(b, []byte("commit")):
		return Commit, true
	case bytes.EqualFold(b, []byte("rollback")):
		return Rollback, true
	case bytes.EqualFold(b, []byte("unknown")):
		return Unknown, true
	}
	return 0, false
}

// PutHalf stores msg (real topic and partition) as a half message of group
// in %TX_HALF%: invisible until txend commits it. The result's MsgID is the
// id txend and check use. In sync-flush mode the Flush must complete before
// the put is acknowledged; in async mode the record is written out already
// (or by the caller, Config.CallerWritesOut). The record keeps the
// message's own properties without `tx=half` (its sysFlag and the `pg=`
// prefix say what it is), so that a commit copies them as they are.
func (m *Manager) PutHalf(s *Session, grp string, msg *store.Message) (store.AppendResult, *store.Flush, error) {
	if m.pending.Load() >= int64(m.cfg.MaxPendingHalf) {
		return store.AppendResult{}, nil, ErrBusy
	}
	var buf []byte
	if s != nil {
		buf = s.props[:0] // the store copies the properties: reused put after put
	}
	buf = halfProps(buf, msg.Topic, msg.Partition, "pg", grp, nil)
	pre := len(buf)
	buf = appendPropsWithout(buf, msg.Properties, PropTx)
	if s != nil {
		s.props = buf
	}
	if len(buf) > protocol.MaxPropertiesLen {
		return store.AppendResult{}, nil, &BadRequest{Msg: "properties too long for a half message: with the " + HalfTopic +
			" prefix rt=&rp=&pg= its record would have more than " + strconv.Itoa(protocol.MaxPropertiesLen) + " bytes of properties"}
	}
	if m.cfg.Schedule != nil && mayDelay(buf[pre:]) {
		committed := *msg
		committed.Properties = ownProps(buf, pre)
		if err := m.scheduleFits(&committed); err != nil {
			return store.AppendResult{}, nil, err
		}
	}
	rec := store.Message{
		Topic: HalfTopic, Flag: msg.Flag, BornTime: msg.BornTime, SysFlag: protocol.SysFlagTxPrepared | msg.SysFlag&protocol.SysFlagTraced,
		Properties: buf, Data: msg.Data,
	}
	res, f, err := m.st.AppendAsync(&rec)
	if err == nil {
		err = m.writeOut(f)
	}
	if err != nil {
		return res, nil, err
	}
	due := m.cfg.Now().Add(m.cfg.CheckInterval)
	m.mu.Lock()
	h := m.newHalfLocked()
	spare := h.body // a recycled buffer, reused when the body is kept
	h.id, h.group, h.due, h.body = res.MsgID, grp, due, nil
	if own := ownProps(buf, pre); len(own)+len(msg.Data) <= maxKeptBody && m.kept < maxKeptBytes {
		// Kept for the commit: it then needs no read of the log.
		h.topic, h.partition, h.flag, h.born = msg.Topic, msg.Partition, msg.Flag, msg.BornTime
		h.traced = msg.SysFlag & protocol.SysFlagTraced
		if h.born == 0 {
			h.born = res.StoreTime // what the half record holds
		}
		h.body = append(append(spare[:0], own...), msg.Data...)
		h.nprops = len(own)
		m.kept += int64(cap(h.body))
	}
	m.addHalfLocked(h)
	m.registerLocked(s, grp)
	m.mu.Unlock()
	m.emit(Event{Kind: EvHalf, ID: res.MsgID, Group: grp, Topic: msg.Topic, Partition: msg.Partition, Props: msg.Properties,
		SysFlag: msg.SysFlag, Result: res})
	return res, f, nil
}

// scheduleFits refuses (BadRequest) a delayed transactional message, as it
// will be committed, whose %SCHEDULE% record could not be appended: its
// properties with realTopic= and realPartition= added beyond the record's
// limit. The commit would fail, at every attempt (docs/transactions.md: a
// delay the broker cannot honour is refused at the put).
func (m *Manager) scheduleFits(msg *store.Message) error {
	if m.cfg.Schedule == nil || !mayDelay(msg.Properties) {
		return nil
	}
	out, ok, err := m.cfg.Schedule(msg)
	if err != nil {
		return &BadRequest{Msg: err.Error()}
	}
	if ok && len(out.Properties) > protocol.MaxPropertiesLen {
		return &BadRequest{Msg: "properties too long for a delayed transactional message: its %SCHEDULE% record (realTopic=, realPartition= added) would have " +
			strconv.Itoa(len(out.Properties)) + " bytes of properties, more than " + strconv.Itoa(protocol.MaxPropertiesLen)}
	}
	return nil
}

// Half bodies kept in memory from the put to the commit: each at most
// maxKeptBody bytes, all together at most maxKeptBytes; the others are read
// back from the log.
const (
	maxKeptBody  = 4 << 10
	maxKeptBytes = 64 << 20
)

// ownProps is the message's own properties in the half record's
// properties buf, from pre (the end of the prefix) on.
func ownProps(buf []byte, pre int) []byte {
	if len(buf) > pre {
		return buf[pre+1:] // after the '&'
	}
	return nil
}

// newHalfLocked returns a zeroed half from the free list (EndBatch returns
// finished ones to it) or a new one: no allocation per message in steady
// state.
func (m *Manager) newHalfLocked() *half {
	if n := len(m.free); n > 0 {
		h := m.free[n-1]
		m.free = m.free[:n-1]
		return h
	}
	return &half{}
}

// freeHalfLocked recycles a half nobody refers to any more (its body
// buffer too).
func (m *Manager) freeHalfLocked(h *half) {
	if h.body != nil {
		m.kept -= int64(cap(h.body))
	}
	if len(m.free) < maxFreeHalves {
		body := h.body[:0]
		*h = half{body: body}
		m.free = append(m.free, h)
	}
}

const maxFreeHalves = 4096

func (m *Manager) addHalfLocked(h *half) {
	if _, dup := m.halves[h.id]; dup {
		return
	}
	m.halves[h.id] = h
	m.pending.Add(1)
	m.linkDueLocked(h)
}

func (m *Manager) removeHalfLocked(h *half) {
	delete(m.halves, h.id)
	m.pending.Add(-1)
	m.unlinkDueLocked(h)
}

// The due list: the pending half messages in order of due time (then id),
// earliest at the head, a doubly-linked list through the halves. A half
// message is due CheckInterval after it was stored or last checked, so a new
// entry nearly always goes at the tail (O(1); a heap cost a log-n sift per
// put and per txend). The walk back from the tail is bounded: after a clock
// step backwards an entry may sit behind a later one and is checked at most
// that step late.
const maxDueWalk = 64

func dueBefore(a, b *half) bool {
	if a.due.Equal(b.due) {
		return a.id < b.id
	}
	return a.due.Before(b.due)
}

func (m *Manager) linkDueLocked(h *half) {
	p := m.dueTail
	for i := 0; p != nil && i < maxDueWalk && dueBefore(h, p); i++ {
		p = p.prev
	}
	h.prev = p
	if p == nil {
		h.next = m.dueHead
		m.dueHead = h
	} else {
		h.next = p.next
		p.next = h
	}
	if h.next != nil {
		h.next.prev = h
	} else {
		m.dueTail = h
	}
}

func (m *Manager) unlinkDueLocked(h *half) {
	if h.prev != nil {
		h.prev.next = h.next
	} else if m.dueHead == h {
		m.dueHead = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else if m.dueTail == h {
		m.dueTail = h.prev
	}
	h.prev, h.next = nil, nil
}

// End finishes half message id (txend). Unknown leaves it pending.
func (m *Manager) End(id int64, a Action) (Result, error) {
	reqs := [1]EndReq{{ID: id, Action: a}}
	m.EndBatch(nil, reqs[:])
	r := &reqs[0]
	return Result{Flush: r.Flush, Appended: r.Appended}, r.Err
}

// RegisterProducer makes s's connection a live producer of grp (it sent a
// half message of grp, or `producer <grp>`): checks of grp's half messages
// may be sent to it.
func (m *Manager) RegisterProducer(s *Session, grp string) {
	if s == nil || s.probe == nil {
		return
	}
	m.mu.Lock()
	m.registerLocked(s, grp)
	m.mu.Unlock()
}

func (m *Manager) registerLocked(s *Session, grp string) {
	if s == nil || s.probe == nil || s.closed {
		return
	}
	for _, g := range s.probes {
		if g == grp {
			return
		}
	}
	if len(s.probes) >= 64 {
		return // bounded: a connection is rarely a producer of many groups
	}
	s.probes = append(s.probes, grp)
	g := m.groups[grp]
	if g == nil {
		g = &group{}
		m.groups[grp] = g
	}
	g.members = append(g.members, s.probe)
}

func (m *Manager) removeProberLocked(grp string, p Prober) {
	g := m.groups[grp]
	if g == nil {
		return
	}
	for i, q := range g.members {
		if q == p {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	if len(g.members) == 0 {
		delete(m.groups, grp)
	}
}

// checkLoop runs a check scan every tick.
func (m *Manager) checkLoop() {
	defer m.wg.Done()
	tick := min(max(m.cfg.CheckInterval/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if !m.standby.Load() { // a slave checks nothing (standby.go)
				m.scanChecks()
			}
		}
	}
}

// scanChecks handles the half messages whose time has come, earliest
// first, for at most ScanBudget: each one is checked (sent to a live
// producer of its group, or counted as a check when none is connected) and
// rescheduled a CheckInterval later, or rolled back once it had CheckMax
// checks. Every entry taken is rescheduled or removed whatever happens, so
// a scan always makes progress and a failure never stalls later ones.
func (m *Manager) scanChecks() {
	start := time.Now()
	for n := 0; n == 0 || time.Since(start) < m.cfg.ScanBudget; n++ { // at least one per scan
		now := m.cfg.Now()
		m.mu.Lock()
		h := m.dueHead
		if h == nil || h.due.After(now) || m.closed {
			m.mu.Unlock()
			return
		}
		// Copied under the lock: once it is unlocked a txend may finish h
		// and its struct be reused (freeHalfLocked).
		id, grp, checks := h.id, h.group, h.checks
		if checks >= m.cfg.CheckMax {
			m.removeHalfLocked(h)
			m.mu.Unlock()
			err := m.finishOne(h, Rollback)
			if err != nil {
				m.log.Error("rolling back an unresolved half message failed; retrying later", "msgId", id, "err", err)
				continue
			}
			// Logged before it is counted: whoever sees the count sees the line.
			m.log.Warn("half message rolled back: no outcome after the maximum number of checks",
				"msgId", id, "producerGroup", grp, "checks", checks)
			m.checkRollbacks.Add(1)
			continue
		}
		h.checks++
		checks++
		h.due = now.Add(m.cfg.CheckInterval)
		m.unlinkDueLocked(h)
		m.linkDueLocked(h)
		var p Prober
		if g := m.groups[grp]; g != nil && len(g.members) > 0 {
			g.next = (g.next + 1) % len(g.members)
			p = g.members[g.next]
		}
		warn := p == nil && now.Sub(m.lastWarn) > 10*time.Second
		if warn {
			m.lastWarn = now
		}
		m.mu.Unlock()
		m.recordCheck(id)
		m.emit(Event{Kind: EvCheck, ID: id, Group: grp, Checks: checks, Sent: p != nil})
		if p != nil && p.SendCheck(id) {
			m.checksSent.Add(1)
		} else if warn {
			m.log.Warn("half message due for a check but no live producer of its group is connected",
				"msgId", id, "producerGroup", grp, "checks", checks)
		}
	}
}

// recordCheck appends an `hcheck` op so that the number of checks a half
// message had survives a restart (transactionCheckMax counts them all). It
// is not waited for: a check lost in a crash is only a check more.
func (m *Manager) recordCheck(id int64) {
	op := store.Message{Topic: OpTopic, Data: strconv.AppendInt([]byte("hcheck "), id, 10)}
	if _, f, err := m.st.AppendAsync(&op); err == nil && f == nil {
		err = m.st.WriteOut()
		if err != nil {
			m.log.Warn("recording a check failed", "msgId", id, "err", err)
		}
	} else if err != nil {
		m.log.Warn("recording a check failed", "msgId", id, "err", err)
	}
}
