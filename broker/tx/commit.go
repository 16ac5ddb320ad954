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
		run = append(run, store.Message{Topic: OpTopic, Data: appendOp(nil, "commit", key, 0, 0)})
	}
	if onePhase && err != nil {
		m.release(t, true)
		m.rolledBack.Add(1)
		return Result{}, xaErr(XARBOther, "commit failed, rolled back: "+err.Error())
	}
	if len(run) == 0 {
		m.release(t, true)
		m.committed.Add(1)
		return Result{}, nil
	}
	f, err := m.appendRun(run)
	if err != nil {
		if onePhase {
			// Nothing was appended: the transaction is rolled back.
			m.release(t, true)
			m.rolledBack.Add(1)
			return Result{}, xaErr(XARBOther, "commit failed, rolled back: "+err.Error())
		}
		m.release(t, false)
		return Result{}, xaErr(XAErrRMErr, "commit failed, the transaction stays prepared: "+err.Error())
	}
	m.release(t, true)
	m.committed.Add(1)
	return Result{Flush: f}, nil
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
		m.release(t, true)
		m.rolledBack.Add(1)
		return Result{}, nil
	}
	f, err := m.appendRun([]store.Message{{Topic: OpTopic, Data: appendOp(nil, "rollback", key, 0, 0)}})
	if err != nil {
		m.release(t, false)
		return Result{}, xaErr(XAErrRMErr, "rollback failed, the transaction stays prepared: "+err.Error())
	}
	m.release(t, true)
	m.rolledBack.Add(1)
	return Result{Flush: f}, nil
}

// loadPrepared reads a prepared transaction's messages back from %TX_HALF%
// and rebuilds them as they were put.
func (m *Manager) loadPrepared(t *Tx) ([]store.Message, error) {
	out := make([]store.Message, 0, t.halfN)
	err := m.scan(HalfTopic, t.halfFrom, t.halfFrom+int64(t.halfN), func(r *protocol.Record) error {
		h, err := parseHalfProps(r.Properties)
		if err != nil {
			return err
		}
		if h.xid != t.key {
			return errors.New("half record at " + strconv.FormatInt(r.QueueOffset, 10) + " belongs to " + strconv.Quote(h.xid))
		}
		out = append(out, realMessage(r, &h))
		return nil
	})
	if err == nil && len(out) != t.halfN {
		err = errors.New("found " + strconv.Itoa(len(out)) + " of its " + strconv.Itoa(t.halfN) + " messages in " + HalfTopic +
			" (cut by retention?)")
	}
	return out, err
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
		SysFlag:    protocol.SysFlagTxCommit,
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
