package store

import "github.com/metaqgo/metaq/protocol"

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
	var total int64
	for i := range msgs {
		m := &msgs[i]
		switch {
		case len(m.Topic) == 0 || len(m.Topic) > maxTopicLen:
			return nil, ErrBadTopic
		case m.Partition < 0:
			return nil, ErrBadPartition
		case len(m.Data) > s.cfg.MaxMessageSize || len(m.Properties) > protocol.MaxPropertiesLen:
			return nil, ErrMessageTooLarge
		}
		total += int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
	}
	// Room for total+BlankMinSize guarantees that every prefix of the run
	// leaves room for a BLANK, so no record of it makes the segment roll.
	room := total + protocol.BlankMinSize
	if room+protocol.BlankMinSize > s.cfg.SegmentSize {
		return nil, ErrMessageTooLarge
	}
	return s.clog.appendBatch(msgs, res, room, s.now().UnixMilli())
}

// appendBatch appends validated msgs as one run needing room bytes (AppendBatch).
func (l *commitLog) appendBatch(msgs []Message, res []AppendResult, room, now int64) (*Flush, error) {
	l.mu.Lock()
	if err := l.localAppendErrLocked(); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
	}
	parts := make([]*partition, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		p := l.appendParts.get(m.Topic, m.Partition)
		if p == nil {
			if p = l.appendPartitionLocked(m.Topic, m.Partition); p == nil {
				l.mu.Unlock()
				return nil, ErrBadTopic
			}
		}
		parts[i] = p
	}
	if err := l.makeRoomLocked(room); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return nil, err
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
