package tx

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

func (m *Manager) commit(s *Session, key string, kind Kind, onePhase bool) (Result, error) {
	if kind == KindNull {
		return Result{}, &BadRequest{Msg: "COMMIT needs a transaction id, not null"}
	}
	t, err := m.take(s, key, kind, func(t *Tx) error {
		switch {
		case onePhase && t.state == stPrepared:
			return xaErr(XAErrProto, "transaction '"+key+"' is prepared: commit it in two phases")
		case !onePhase && t.state != stPrepared:
			return xaErr(XAErrProto, "transaction '"+key+"' is not prepared")
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	var run []store.Message
	if onePhase {
		run = t.msgs
		err = m.schedule(run)
	} else {
		run, err = m.loadPrepared(t)
		if err == nil {
			err = m.schedule(run)
		}
		if err != nil {
			m.release(t, false)
			return Result{}, xaErr(XAErrRMErr, "commit failed, the transaction stays prepared: "+err.Error())
		}
		run = commitRun(key, t.halfFrom, t.halfN, 0, run)
	}
	if onePhase && err != nil {
		m.emitTxRollbackLocked(t, "rolled back: the commit failed: "+err.Error()) // event.go
		m.release(t, true)
		m.rolledBack.Add(1)
		return Result{}, xaErr(XARBOther, "commit failed, rolled back: "+err.Error())
	}
	if len(run) == 0 {
		m.release(t, true)
		m.committed.Add(1)
		return Result{}, nil
	}
	f, res, err := m.appendRunResults(run)
	if err != nil {
		if onePhase {
			// Nothing was appended: the transaction is rolled back.
			m.emitTxRollbackLocked(t, "rolled back: the commit failed: "+err.Error())
			m.release(t, true)
			m.rolledBack.Add(1)
			return Result{}, xaErr(XARBOther, "commit failed, rolled back: "+err.Error())
		}
		m.release(t, false)
		return Result{}, xaErr(XAErrRMErr, "commit failed, the transaction stays prepared: "+err.Error())
	}
	if onePhase {
		m.emitTxRun(t, run, res, false) // event.go
	} else {
		m.emitTxRun(t, run[1:], res[1:], true) // after the commit op
	}
	m.release(t, true)
	m.committed.Add(1)
	return Result{Flush: f, Appended: true}, nil
}

func (m *Manager) rollback(s *Session, key string, kind Kind) (Result, error) {
	if kind == KindNull {
		return Result{}, &BadRequest{Msg: "ROLLBACK needs a transaction id, not null"}
	}
	t, err := m.take(s, key, kind, func(*Tx) error { return nil })
	if err != nil {
		return Result{}, err
	}
	if t.state != stPrepared {
		m.emitTxRollbackLocked(t, "rolled back") // event.go
		m.release(t, true)
		m.rolledBack.Add(1)
		return Result{}, nil
	}
	f, err := m.appendRun([]store.Message{{Topic: OpTopic, Data: appendOp(nil, "rollback", key, 0, 0)}})
	if err != nil {
		m.release(t, false)
		return Result{}, xaErr(XAErrRMErr, "rollback failed, the transaction stays prepared: "+err.Error())
	}
	m.emitTxRollbackLocked(t, "rolled back (it was prepared)")
	m.release(t, true)
	m.rolledBack.Add(1)
	return Result{Flush: f, Appended: true}, nil
}

// commitRun is the append of a two-phase commit: the commit op first, then
// the messages [from, n) of the transaction (msgs), in one contiguous run.
// The op records where the run ends, so that recovery can tell a run a
// power loss cut short (the log keeps a prefix of it) and complete it: the
// commit is idempotent per xid, never applied twice nor half.
func commitRun(key string, halfFrom int64, n, from int, msgs []store.Message) []store.Message {
	o := op{key: key, halfFrom: halfFrom, n: n, from: from}
	for i := range msgs {
		mm := &msgs[i]
		o.lastBytes = int64(protocol.RecordSize(len(mm.Topic), len(mm.Properties), len(mm.Data)))
		o.runBytes += o.lastBytes
	}
	run := make([]store.Message, 0, len(msgs)+1)
	run = append(run, store.Message{Topic: OpTopic, Data: appendCommitOp(nil, &o)})
	return append(run, msgs...)
}

// loadPrepared reads a prepared transaction's messages back from %TX_HALF%
// and rebuilds them as they were put.
func (m *Manager) loadPrepared(t *Tx) ([]store.Message, error) {
	return m.loadHalves(t.key, t.halfFrom, t.halfN, 0)
}

// loadHalves rebuilds messages [from, n) of the prepared transaction key
// whose half records are %TX_HALF%/0 [halfFrom, halfFrom+n).
func (m *Manager) loadHalves(key string, halfFrom int64, n, from int) ([]store.Message, error) {
	out := make([]store.Message, 0, n-from)
	err := m.scan(HalfTopic, halfFrom+int64(from), halfFrom+int64(n), func(r *protocol.Record) error {
		h, err := parseHalfProps(r.Properties)
		if err != nil {
			return err
		}
		if h.xid != key {
			return errors.New("half record at " + strconv.FormatInt(r.QueueOffset, 10) + " belongs to " + strconv.Quote(h.xid))
		}
		out = append(out, realMessage(r, &h))
		return nil
	})
	if err == nil && len(out) != n-from {
		err = errors.New("found " + strconv.Itoa(len(out)) + " of its " + strconv.Itoa(n-from) + " messages in " + HalfTopic +
			" (cut by retention?)")
	}
	return out, err
}

// A commit op found at recovery, with where its run starts in the log.
type commitAt struct {
	op
	runStart int64 // physical offset right after the op record
}

// checkCommitRun is recovery's check of the commit op that is the newest
// op of the log: when the run after it is shorter than the op says (a power
// loss kept only a prefix), the missing messages are appended now, after a
// new commit op that names them. A retried COMMIT finds the transaction
// committed (XAER_NOTA), so nothing is appended twice. When retention has
// deleted the transaction's %TX_HALF% records, the run cannot be checked
// (nor completed): that is logged and the run taken as whole.
func (m *Manager) checkCommitRun(c *commitAt) error {
	if lo := m.st.MinOffset(HalfTopic, 0); c.halfFrom+int64(c.from) < lo {
		m.log.Warn("not checking the newest two-phase commit for a run cut by a crash: retention deleted its messages in "+HalfTopic,
			"tx", c.key, "halfFrom", c.halfFrom+int64(c.from), "messages", c.n-c.from, "halfMinOffset", lo)
		return nil
	}
	want := c.n - c.from
	have := survivedRun(c.runStart, c.runBytes, c.lastBytes, want, func(pos int64, i int) (int64, bool) {
		return m.committedRecordAt(pos, func() (*store.ReadResult, error) {
			return m.st.Read(HalfTopic, 0, c.halfFrom+int64(c.from+i), 1, nil)
		})
	})
	if have == want {
		return nil
	}
	rest, err := m.loadHalves(c.key, c.halfFrom, c.n, c.from+have)
	if err == nil {
		err = m.schedule(rest)
	}
	if err == nil {
		var f *store.Flush
		if f, err = m.appendRun(commitRun(c.key, c.halfFrom, c.n, c.from+have, rest)); err == nil {
			if f != nil {
				err = f.Wait()
			} else {
				err = m.st.WriteOut()
			}
		}
	}
	if err != nil {
		return errors.New("tx: completing the commit of " + c.key + " cut by a crash: " + err.Error())
	}
	m.log.Warn("completed a two-phase commit a crash had cut short", "tx", c.key, "survived", have, "appended", len(rest))
	return nil
}

// survivedRun counts the records of a run of n that survived a crash, in
// order from runStart: all n when its last record (lastBytes long, ending at
// runStart+runBytes) is there, else the prefix found. recordAt reports the
// size of the record at pos when it is record i of the run.
func survivedRun(runStart, runBytes, lastBytes int64, n int, recordAt func(pos int64, i int) (int64, bool)) int {
	if size, ok := recordAt(runStart+runBytes-lastBytes, n-1); ok && size == lastBytes {
		return n
	}
	have, pos := 0, runStart
	for have < n {
		size, ok := recordAt(pos, have)
		if !ok {
			break
		}
		have++
		pos += size
	}
	return have
}

// committedRecordAt reads the record at physical offset pos and reports its
// size when it is the real message of the half record readHalf reads: a
// TxCommit record with the half record's born time and data.
func (m *Manager) committedRecordAt(pos int64, readHalf func() (*store.ReadResult, error)) (int64, bool) {
	res, err := m.st.ReadByID(protocol.MakeMsgID(m.cfg.BrokerID, pos))
	if err != nil {
		return 0, false
	}
	defer res.Release()
	if res.Count == 0 {
		return 0, false
	}
	r, _, err := protocol.DecodeRecordNoCRC(res.Bufs[0]) // ReadByID checked it
	if err != nil || r.SysFlag&protocol.SysFlagTxCommit == 0 {
		return 0, false
	}
	hr, err := readHalf()
	if err != nil {
		return 0, false
	}
	defer hr.Release()
	if hr.Count == 0 || hr.Status != store.ReadFound {
		return 0, false
	}
	h, _, err := protocol.DecodeRecord(hr.Bufs[0], 0)
	if err != nil || h.BornTime != r.BornTime || string(h.Data) != string(r.Data) {
		return 0, false
	}
	return int64(protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data))), true
}

// realMessage rebuilds the message a %TX_HALF% record holds (copied).
func realMessage(r *protocol.Record, h *halfMeta) store.Message {
	own := h.own
	if h.group != "" {
		own = withoutProp(own, PropTx)
	}
	buf := make([]byte, len(own)+len(r.Data))
	copy(buf, own)
	copy(buf[len(own):], r.Data)
	return store.Message{
		Topic: h.topic, Partition: h.partition, Flag: r.Flag, BornTime: r.BornTime,
		SysFlag:    protocol.SysFlagTxCommit | r.SysFlag&protocol.SysFlagTraced,
		Properties: buf[:len(own):len(own)],
		Data:       buf[len(own):],
	}
}

// scan calls fn for every record of topic/0 in [from, to) in order, waiting
// briefly for the index to catch up with records already appended.
func (m *Manager) scan(topic string, from, to int64, fn func(*protocol.Record) error) error {
	for off := from; off < to; {
		res, err := m.st.Read(topic, 0, off, 1<<20, nil)
		if err != nil {
			return err
		}
		switch res.Status {
		case store.ReadFound:
		case store.ReadNoMessage:
			res.Release()
			select {
			case <-m.st.Wait(topic, 0, off):
			case <-time.After(5 * time.Second):
				return errors.New("tx: " + topic + " offset " + strconv.FormatInt(off, 10) + " not readable")
			}
			continue
		case store.ReadOffsetTooSmall:
			off = res.MinOffset
			res.Release()
			continue
		default:
			res.Release()
			return nil
		}
		var ferr error
		for _, b := range res.Bufs {
			it := protocol.NewRecordIterator(b)
			for it.Next() && ferr == nil {
				if r := it.Record(); r.QueueOffset < to {
					ferr = fn(r)
				}
			}
			if ferr == nil && it.Err() != nil {
				ferr = it.Err()
			}
		}
		off = res.NextOffset
		res.Release()
		if ferr != nil {
			return ferr
		}
	}
	return nil
}
