package store

import (
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
)

// AppendBatch appends msgs in order as one run of the commit log: room for
// the whole run is made first (rolling to the next segment if it does not
// fit in the active one), then every record is encoded without releasing the
// append lock, so no other append lands between them and the messages of a
// partition get consecutive queue offsets. Transactions use it to make a
// commit appear all at once (broker/tx). res receives one result per
// message (len(res) >= len(msgs)). The run must fit in one segment
// (ErrMessageTooLarge otherwise). Durability is AppendAsync's: in sync-flush
// mode wait for the returned *Flush, in async mode call WriteOut. On error
// nothing was appended.
func (s *Store) AppendBatch(msgs []Message, res []AppendResult) (*Flush, error) {
	if len(res) < len(msgs) {
		panic("store: AppendBatch: res shorter than msgs")
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	room, err := s.batchRoom(msgs)
	if err != nil {
		return nil, err
	}
	return s.clog.appendBatch(msgs, res, room, s.now().UnixMilli())
}

// RunResult describes a run appended by AppendRun: its records are
// adjacent, so record i (counted from 0) is at FirstPhys plus the sizes of
// the records before it (protocol.RecordSize of each message), has queue
// offset FirstOffset+i and message id FirstMsgID plus the same distance
// (protocol.MakeMsgID is linear in the physical offset).
type RunResult struct {
	FirstMsgID, FirstOffset, FirstPhys, StoreTime int64
}

// AppendRun is AppendBatch for messages that all go to one partition (a
// batch put), reporting the run instead of one AppendResult per message: a
// frame of 1,000 messages does not write and read back 40 KB of results.
// ErrBadPartition when the messages do not share msgs[0]'s topic and
// partition; otherwise as AppendBatch.
func (s *Store) AppendRun(msgs []Message, run *RunResult) (*Flush, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Topic != msgs[0].Topic || msgs[i].Partition != msgs[0].Partition {
			return nil, ErrBadPartition
		}
	}
	room, err := s.batchRoom(msgs)
	if err != nil {
		return nil, err
	}
	return s.clog.appendRun(msgs, run, room, s.now().UnixMilli())
}

// batchRoom validates msgs and returns the room their run needs.
func (s *Store) batchRoom(msgs []Message) (int64, error) {
	var total int64
	for i := range msgs {
		m := &msgs[i]
		switch {
		case len(m.Topic) == 0 || len(m.Topic) > maxTopicLen:
			return 0, ErrBadTopic
		case m.Partition < 0:
			return 0, ErrBadPartition
		case len(m.Data) > s.cfg.MaxMessageSize || len(m.Properties) > protocol.MaxPropertiesLen:
			return 0, ErrMessageTooLarge
		}
		total += int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
	}
	// Room for total+BlankMinSize guarantees that every prefix of the run
	// leaves room for a BLANK, so no record of it makes the segment roll.
	room := total + protocol.BlankMinSize
	if room+protocol.BlankMinSize > s.cfg.SegmentSize {
		return 0, ErrMessageTooLarge
	}
	return room, nil
}

// appendRun appends validated msgs of one partition as one run needing
// room bytes (AppendRun).
func (l *commitLog) appendRun(msgs []Message, run *RunResult, room, now int64) (*Flush, error) {
	l.mu.Lock()
	if err := l.localAppendErrLocked(); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
	}
	p, err := l.batchPartitionLocked(&msgs[0])
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	if err := l.makeRoomLocked(room); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
	}
	run.FirstPhys, run.FirstOffset = l.wpos, p.next.Load()
	run.FirstMsgID = protocol.MakeMsgID(l.cfg.BrokerID, l.wpos)
	run.StoreTime = l.storeTimeLocked(now)
	flush, kickFlusher := l.appendRunLocked(p, msgs, nil, run.StoreTime)
	l.mu.Unlock()
	if kickFlusher {
		kick(l.flushKick)
	}
	return flush, nil
}

// appendBatch appends validated msgs as one run needing room bytes (AppendBatch).
func (l *commitLog) appendBatch(msgs []Message, res []AppendResult, room, now int64) (*Flush, error) {
	l.mu.Lock()
	if err := l.localAppendErrLocked(); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
	}
	// One partition for the whole run (a batch put) needs no table; a
	// transaction's commit may span several.
	first, err := l.batchPartitionLocked(&msgs[0])
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	var parts []*partition
	for i := 1; i < len(msgs); i++ {
		if m := &msgs[i]; m.Topic == msgs[0].Topic && m.Partition == msgs[0].Partition {
			continue
		}
		parts = make([]*partition, len(msgs))
		for j := range msgs {
			if parts[j], err = l.batchPartitionLocked(&msgs[j]); err != nil {
				l.mu.Unlock()
				return nil, err
			}
		}
		break
	}
	if err := l.makeRoomLocked(room); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
	}
	if parts == nil {
		flush, kickFlusher := l.appendRunLocked(first, msgs, res, l.storeTimeLocked(now))
		l.mu.Unlock()
		if kickFlusher {
			kick(l.flushKick)
		}
		return flush, nil
	}
	var flush *Flush
	kickFlusher := false
	for i := range msgs {
		m := &msgs[i]
		size := int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
		r, f, k := l.appendLocked(parts[i], m, size, now)
		res[i] = r
		if f != nil {
			flush = f
		}
		kickFlusher = kickFlusher || k
	}
	l.mu.Unlock()
	if kickFlusher {
		kick(l.flushKick)
	}
	return flush, nil
}

// appendRunLocked is appendLocked for a run of msgs to one partition p (a
// batch put), room made for all of them: the records are encoded one after
// the other, and what appendLocked does per record — the store time, the
// published write position, the partition's next offset, the counters, the
// zero-fill kick and the group-commit membership — is done once for the
// run, by the same appendedLocked. res may be nil (AppendRun). It returns
// the run's flush round (sync mode) and whether to kick the flusher. st is
// the run's store time (storeTimeLocked, taken once by the caller).
func (l *commitLog) appendRunLocked(p *partition, msgs []Message, res []AppendResult, st int64) (*Flush, bool) {
	start, last := l.wpos, l.wpos
	q := p.next.Load()
	topic := unsafe.Slice(unsafe.StringData(msgs[0].Topic), len(msgs[0].Topic))
	for i := range msgs {
		m := &msgs[i]
		last = l.wpos
		size := int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
		id := l.encodeLocked(m, topic, last, q, st, size)
		if res != nil { // nil: AppendRun, which reports the run instead
			res[i] = AppendResult{MsgID: id, QueueOffset: q, PhysicalOffset: last, StoreTime: st, Size: int(size)}
		}
		l.wpos = last + size
		q++
	}
	return l.appendedLocked(p, start, last, q, len(msgs))
}

// batchPartitionLocked finds (or creates) the partition m is appended to.
func (l *commitLog) batchPartitionLocked(m *Message) (*partition, error) {
	if p := l.appendPartLocked(m); p != nil {
		return p, nil
	}
	return nil, ErrBadTopic
}
