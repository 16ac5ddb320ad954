package tx

import (
	"container/heap"
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
	if len(props) == 0 {
		return "", false
	}
	v, found := protocol.PropertyRaw(props, PropTx)
	if !found || string(v) != "half" {
		return "", false
	}
	return protocol.Property(props, PropPGroup), true
}

// Action is a txend outcome.
type Action uint8

const (
	Commit Action = iota + 1
	Rollback
	Unknown
)

// ParseAction parses `commit`, `rollback` or `unknown`.
func ParseAction(b []byte) (Action, bool) {
	switch string(b) {
	case "commit", "COMMIT":
		return Commit, true
	case "rollback", "ROLLBACK":
		return Rollback, true
	case "unknown", "UNKNOWN":
		return Unknown, true
	}
	return 0, false
}

// PutHalf stores msg (real topic and partition) as a half message of group
// in %TX_HALF%: invisible until txend commits it. The result's MsgID is the
// id txend and check use. In sync-flush mode the Flush must complete before
// the put is acknowledged; in async mode the record is written out already.
func (m *Manager) PutHalf(s *Session, grp string, msg *store.Message) (store.AppendResult, *store.Flush, error) {
	m.mu.Lock()
	full := len(m.halves) >= m.cfg.MaxPendingHalf
	m.mu.Unlock()
	if full {
		return store.AppendResult{}, nil, ErrBusy
	}
	rec := store.Message{
		Topic: HalfTopic, Flag: msg.Flag, BornTime: msg.BornTime, SysFlag: protocol.SysFlagTxPrepared,
		Properties: halfProps(nil, msg.Topic, msg.Partition, "pg", grp, msg.Properties),
		Data:       msg.Data,
	}
	res, f, err := m.st.AppendAsync(&rec)
	if err == nil {
		err = m.writeOut(f)
	}
	if err != nil {
		return res, nil, err
	}
	m.mu.Lock()
	m.addHalfLocked(&half{id: res.MsgID, group: grp, due: m.cfg.Now().Add(m.cfg.CheckInterval)})
	m.mu.Unlock()
	m.RegisterProducer(s, grp)
	return res, f, nil
}

func (m *Manager) addHalfLocked(h *half) {
	if _, dup := m.halves[h.id]; dup {
		return
	}
	m.halves[h.id] = h
	heap.Push(&m.due, h)
}

func (m *Manager) removeHalfLocked(h *half) {
	delete(m.halves, h.id)
	if h.idx >= 0 {
		heap.Remove(&m.due, h.idx)
	}
}

// End finishes half message id (txend). Unknown leaves it pending.
func (m *Manager) End(id int64, a Action) (Result, error) {
	m.mu.Lock()
	h := m.halves[id]
	if h == nil {
		m.mu.Unlock()
		return Result{}, ErrNotFound
	}
	if a == Unknown {
		m.mu.Unlock()
		return Result{}, nil
	}
	m.removeHalfLocked(h) // ours now: a concurrent txend or check finds nothing
	m.mu.Unlock()
	f, err := m.finishHalf(id, a)
	if err != nil {
		m.mu.Lock()
		h.due = m.cfg.Now().Add(m.cfg.CheckInterval)
		m.addHalfLocked(h)
		m.mu.Unlock()
		return Result{}, err
	}
	return Result{Flush: f, Appended: true}, nil
}

// finishHalf appends the outcome of a half message: for a commit the real
// message followed by its op record in one run, for a rollback the op only.
func (m *Manager) finishHalf(id int64, a Action) (*store.Flush, error) {
	key := strconv.FormatInt(id, 10)
	if a == Rollback {
		f, err := m.appendRun([]store.Message{{Topic: OpTopic, Data: appendOp(nil, "hrollback", key, 0, 0)}})
		if err == nil {
			m.rolledBack.Add(1)
		}
		return f, err
	}
	res, err := m.st.ReadByID(id)
	if err != nil {
		return nil, err
	}
	var real store.Message
	var perr error
	found := false
	for _, b := range res.Bufs {
		it := protocol.NewRecordIterator(b)
		if it.Next() {
			r := it.Record()
			h, err := parseHalfProps(r.Properties)
			if err != nil || string(r.Topic) != HalfTopic || h.group == "" {
				perr = errBadHalf
			} else {
				real, found = realMessage(r, &h), true
			}
		}
	}
	res.Release()
	if perr != nil {
		return nil, perr
	}
	if !found {
		return nil, ErrNotFound
	}
	run := []store.Message{real}
	if err := m.schedule(run); err != nil {
		return nil, err
	}
	real = run[0]
	f, err := m.appendRun([]store.Message{real, {Topic: OpTopic, Data: appendOp(nil, "hcommit", key, 0, 0)}})
	if err == nil {
		m.committed.Add(1)
	}
	return f, err
}

// RegisterProducer makes s's connection a live producer of grp (it sent a
// half message of grp, or `producer <grp>`): checks of grp's half messages
// may be sent to it.
func (m *Manager) RegisterProducer(s *Session, grp string) {
	if s == nil || s.probe == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.closed {
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
		if len(m.due) == 0 || m.due[0].due.After(now) || m.closed {
			m.mu.Unlock()
			return
		}
		h := m.due[0]
		if h.checks >= m.cfg.CheckMax {
			m.removeHalfLocked(h)
			m.mu.Unlock()
			_, err := m.finishHalf(h.id, Rollback)
			if err == nil && m.cfg.CallerWritesOut {
				err = m.st.WriteOut() // no connection writes this one out
			}
			if err != nil {
				m.log.Error("rolling back an unresolved half message failed; retrying later", "msgId", h.id, "err", err)
				m.mu.Lock()
				h.due = now.Add(m.cfg.CheckInterval)
				m.addHalfLocked(h)
				m.mu.Unlock()
				continue
			}
			m.checkRollbacks.Add(1)
			m.log.Warn("half message rolled back: no outcome after the maximum number of checks",
				"msgId", h.id, "producerGroup", h.group, "checks", h.checks)
			continue
		}
		h.checks++
		h.due = now.Add(m.cfg.CheckInterval)
		heap.Fix(&m.due, h.idx)
		var p Prober
		if g := m.groups[h.group]; g != nil && len(g.members) > 0 {
			g.next = (g.next + 1) % len(g.members)
			p = g.members[g.next]
		}
		warn := p == nil && now.Sub(m.lastWarn) > 10*time.Second
		if warn {
			m.lastWarn = now
		}
		m.mu.Unlock()
		m.recordCheck(h.id)
		if p != nil && p.SendCheck(h.id) {
			m.checksSent.Add(1)
		} else if warn {
			m.log.Warn("half message due for a check but no live producer of its group is connected",
				"msgId", h.id, "producerGroup", h.group, "checks", h.checks)
		}
	}
}

// recordCheck appends an `hcheck` op so that the number of checks a half
// message had survives a restart (transactionCheckMax counts them all). It
// is not waited for: a check lost in a crash is only a check more.
func (m *Manager) recordCheck(id int64) {
	op := store.Message{Topic: OpTopic, Data: appendOp(nil, "hcheck", strconv.FormatInt(id, 10), 0, 0)}
	if _, f, err := m.st.AppendAsync(&op); err == nil && f == nil {
		err = m.st.WriteOut()
		if err != nil {
			m.log.Warn("recording a check failed", "msgId", id, "err", err)
		}
	} else if err != nil {
		m.log.Warn("recording a check failed", "msgId", id, "err", err)
	}
}

// dueHeap orders pending half messages by due time.
type dueHeap []*half

func (d dueHeap) Len() int { return len(d) }
func (d dueHeap) Less(i, j int) bool {
	if d[i].due.Equal(d[j].due) {
		return d[i].id < d[j].id
	}
	return d[i].due.Before(d[j].due)
}
func (d dueHeap) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].idx, d[j].idx = i, j
}
func (d *dueHeap) Push(x any) {
	h := x.(*half)
	h.idx = len(*d)
	*d = append(*d, h)
}
func (d *dueHeap) Pop() any {
	old := *d
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.idx = -1
	*d = old[:len(old)-1]
	return h
}
