package tx

import (
	"sort"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// recover rebuilds the table from the log: %TX_OP% says which XA
// transactions are prepared, which half messages are finished and how often
// the others were checked; the
// %TX_HALF% records that are neither are pending half messages. Malformed
// records (the system topics never accept client puts, so only a bug or a
// damaged log makes them) are logged and skipped.
func (m *Manager) recover() error {
	start := time.Now()
	prepared := map[string]op{}
	done := map[int64]struct{}{}
	checks := map[int64]int{}
	bad := 0
	// The newest op, when it is an hend or a commit op: only its run can
	// have been cut by a crash (any record after an op means its run is
	// whole, and the records of that run may be gone with retention since).
	var lastEnd *endAt
	var lastCommit *commitAt
	err := m.scanAll(OpTopic, func(r *protocol.Record) error {
		lastEnd, lastCommit = nil, nil // a record after the op: its run is whole
		o, err := parseOp(r.Data)
		if err != nil {
			if bad++; bad <= 10 {
				m.log.Warn("skipping malformed transaction op record", "offset", r.QueueOffset, "err", err)
			}
			return nil
		}
		switch o.verb {
		case "prepare":
			prepared[o.key] = o
		case "commit", "rollback":
			delete(prepared, o.key)
			if o.verb == "commit" && o.runKnown {
				lastCommit = &commitAt{op: o, runStart: r.PhysicalOffset +
					int64(protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))}
			}
		case "hend":
			for _, x := range o.ends {
				done[x.id] = struct{}{}
				delete(checks, x.id)
			}
			lastEnd = &endAt{op: o, runStart: r.PhysicalOffset +
				int64(protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))}
		case "hcommit", "hrollback":
			if id, err := strconv.ParseInt(o.key, 10, 64); err == nil {
				done[id] = struct{}{}
				delete(checks, id)
			}
		case "hcheck":
			if id, err := strconv.ParseInt(o.key, 10, 64); err == nil {
				if _, fin := done[id]; !fin {
					checks[id]++
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var pending []*half
	err = m.scanAll(HalfTopic, func(r *protocol.Record) error {
		if _, ok := done[r.MsgID]; ok {
			return nil
		}
		h, err := parseHalfProps(r.Properties)
		if err != nil {
			if bad++; bad <= 10 {
				m.log.Warn("skipping malformed half record", "offset", r.QueueOffset, "err", err)
			}
			return nil
		}
		if h.group == "" {
			return nil // a prepared XA message: found through its prepare op
		}
		due := time.UnixMilli(r.StoreTime).Add(m.cfg.CheckInterval)
		pending = append(pending, &half{id: r.MsgID, group: h.group, due: due, checks: checks[r.MsgID]})
		m.emit(Event{Kind: EvPending, ID: r.MsgID, Group: h.group, Checks: checks[r.MsgID], Props: r.Properties, SysFlag: r.SysFlag})
		return nil
	})
	if err != nil {
		return err
	}
	// Into the due list in its order (store times are not strictly
	// monotonic across a clock step).
	sort.Slice(pending, func(i, j int) bool { return dueBefore(pending[i], pending[j]) })
	for _, h := range pending {
		m.addHalfLocked(h)
	}
	if lastEnd != nil && !m.standby.Load() { // a slave's log: the master completes the run
		if err := m.checkEndRun(lastEnd); err != nil {
			return err
		}
	}
	if lastCommit != nil && !m.standby.Load() { // a slave's log: the master completes the run (standby.go)
		if err := m.checkCommitRun(lastCommit); err != nil {
			return err
		}
	}
	for key, o := range prepared {
		_, uq, err := ParseKey([]byte(key))
		if err != nil {
			m.log.Warn("skipping prepared transaction with a malformed id", "tx", key, "err", err)
			continue
		}
		m.xa[key] = &Tx{key: key, kind: KindXA, uq: uq, state: stPrepared, halfFrom: o.halfFrom, halfN: o.n,
			owner: o.owner, noOwner: !o.ownerKnown}
	}
	if len(prepared) > 0 || len(m.halves) > 0 || bad > 0 {
		m.log.Info("transactions recovered from the commit log", "preparedXA", len(m.xa), "pendingHalf", len(m.halves),
			"malformedRecords", bad, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// scanAll scans every retained record of topic/0.
func (m *Manager) scanAll(topic string, fn func(*protocol.Record) error) error {
	return m.scan(topic, m.st.MinOffset(topic, 0), m.st.MaxOffset(topic, 0), fn)
}
