package pop

import (
	"errors"
	"fmt"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Checkpoints and recovery (docs/push.md, "State and recovery").
//
// A checkpoint is taken in this order: read cover = the next %POP%
// partition-0 offset, then snapshot every queue, then append the chunks to
// partition 1. Every done record below cover was applied in memory before
// it was appended, so it is in the snapshot; done records at or above
// cover are replayed at recovery (replaying one twice is harmless). In
// sync-flush mode a durable checkpoint implies every record before it is
// durable (log order).

const idleCheckpoint = time.Minute

func (s *Pop) checkpointLoop() {
	t := time.NewTicker(s.cfg.CheckpointInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		force := time.Since(last) >= idleCheckpoint
		if err := s.checkpoint(force); err != nil {
			if !errors.Is(err, store.ErrClosed) {
				s.log.Error("pop checkpoint failed", "err", err)
			}
			continue
		}
		if force {
			last = time.Now()
		}
	}
}

// checkpoint writes the state when it changed (or when force).
func (s *Pop) checkpoint(force bool) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	cover := s.st.MaxOffset(popTopic, partDone)
	s.mu.RLock()
	var qs []*queue
	for _, m := range s.queues {
		for _, q := range m {
			qs = append(qs, q)
		}
	}
	s.mu.RUnlock()
	w := ckWriter{max: s.cfg.MaxRecordSize}
	changed := force
	for _, q := range qs {
		q.mu.Lock()
		changed = changed || q.dirty
		q.dirty = false
		for _, p := range q.parts {
			if !p.inited {
				continue
			}
			w.beginState(q.group, q.topic, p.id, p.base)
			var cur uint16
			var n uint32
			p.scan(&s.ckBuf, func(o int64, ents []entry) {
				for i := range ents {
					v := ents[i].attempt
					if ents[i].state == stDone {
						v = runDone
					}
					if n > 0 && (v != cur || n == 1<<32-1) {
						w.addRun(n, cur, o)
						n = 0
					}
					cur = v
					n++
					o++
				}
			})
			if n > 0 {
				w.addRun(n, cur, p.cursor)
			}
			w.endState()
		}
		q.mu.Unlock()
	}
	if !changed {
		return nil
	}
	s.ckID++
	chunks := w.finish(s.ckID, cover)
	var last *store.Flush
	for _, c := range chunks {
		m := store.Message{Topic: popTopic, Partition: partCk, Data: c}
		_, f, err := s.st.AppendAsync(&m)
		if err != nil {
			return err
		}
		if f != nil {
			last = f
		}
	}
	s.stats.Checkpoints.Add(1)
	return s.durable(last)
}

// readRecords calls fn with the data of every %POP% record of partition
// part in [from, to), waiting for the dispatcher to index them (right after
// a crash it may still be re-indexing the tail).
func (s *Pop) readRecords(part int32, from, to int64, fn func(off int64, data []byte) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for from < to {
		res, err := s.st.Read(popTopic, part, from, 1<<20, nil)
		if err != nil {
			return err
		}
		switch res.Status {
		case store.ReadFound:
		case store.ReadOffsetTooSmall:
			from = res.MinOffset
			res.Release()
			continue
		case store.ReadNoMessage:
			res.Release()
			if time.Now().After(deadline) {
				return fmt.Errorf("pop: %%POP%% partition %d offset %d not readable", part, from)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		default:
			res.Release()
			return nil
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 && from < to {
				rec, n, err := protocol.DecodeRecord(buf, 0)
				if err != nil || n <= 0 {
					res.Release()
					return fmt.Errorf("pop: damaged %%POP%% record at %d: %v", from, err)
				}
				buf = buf[n:]
				if rec.QueueOffset != from {
					from = rec.QueueOffset
				}
				if err := fn(from, rec.Data); err != nil {
					s.log.Warn("skipping a malformed %POP% record", "partition", part, "offset", from, "err", err)
				}
				from++
			}
		}
		res.Release()
	}
	return nil
}

// lastCheckpoint finds the newest complete checkpoint set: its records are
// consecutive in partition 1, the last one has chunk == chunks-1.
func (s *Pop) lastCheckpoint() (first, last int64, h ckHeader, ok bool, err error) {
	min := s.st.MinOffset(popTopic, partCk)
	end := s.st.MaxOffset(popTopic, partCk)
	for tries := 0; end > min && tries < 4; tries++ {
		var hh ckHeader
		var herr error
		if err := s.readRecords(partCk, end-1, end, func(_ int64, d []byte) error {
			hh, herr = decodeCk(d, nil)
			return nil
		}); err != nil {
			return 0, 0, h, false, err
		}
		if herr != nil {
			end--
			continue
		}
		if hh.chunk != hh.chunks-1 { // torn set: the previous one ends before it
			end = end - 1 - int64(hh.chunk)
			continue
		}
		first = end - int64(hh.chunks)
		if first < min {
			return 0, 0, h, false, nil
		}
		return first, end, hh, true, nil
	}
	return 0, 0, h, false, nil
}

func (s *Pop) recover() error {
	t0 := time.Now()
	first, last, h, ok, err := s.lastCheckpoint()
	if err != nil {
		return err
	}
	cover := s.st.MinOffset(popTopic, partDone)
	states := 0
	if ok {
		cover = max(cover, h.cover)
		idx := uint16(0)
		bad := false
		if err := s.readRecords(partCk, first, last, func(_ int64, d []byte) error {
			hh, err := decodeCk(d, func(st ckState) {
				states++
				s.applyState(st)
			})
			if err != nil || hh.id != h.id || hh.chunk != idx {
				bad = true
			}
			idx++
			return err
		}); err != nil {
			return err
		}
		if bad {
			s.log.Warn("pop checkpoint set inconsistent; state rebuilt from what it holds and the done records")
		}
		s.ckID = max(s.ckID, h.id)
	}
	dones := 0
	end := s.st.MaxOffset(popTopic, partDone)
	if err := s.readRecords(partDone, cover, end, func(_ int64, d []byte) error {
		return decodeDone(d, func(group, topic string, part int32, off int64) {
			dones++
			s.applyDone(group, topic, part, off)
		})
	}); err != nil {
		return err
	}
	pending := 0
	s.mu.RLock()
	for _, m := range s.queues {
		for _, q := range m {
			q.mu.Lock()
			for _, p := range q.parts {
				for o := p.base; o < p.cursor; o++ {
					if e := p.at(o); e.state != stDone {
						e.state = stReady
						p.addReady(o)
						pending++
					}
				}
				p.advance()
			}
			q.dirty = true
			q.mu.Unlock()
		}
	}
	s.mu.RUnlock()
	if ok || dones > 0 {
		s.log.Info("pop state recovered", "checkpointStates", states, "doneRecordsFrom", cover, "doneOffsets", dones,
			"redeliver", pending, "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

func (s *Pop) applyState(st ckState) {
	if checkName(st.group) != nil || st.part < 0 || st.part > 1<<16 {
		return
	}
	q, _ := s.queueFor(st.group, st.topic, false)
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.partLocked(st.part)
	if !p.inited {
		p.reset(st.from)
		p.inited = true
	}
	if st.from != p.cursor {
		return // a fragment that does not continue the previous one
	}
	// Not bounded by MaxInflight, which may have been lowered since the
	// checkpoint was written: dropping its tail would deliver acknowledged
	// messages again. The checkpoint bounds it, and so does what was ever
	// written to the partition (a damaged length cannot run away).
	now := nowMs()
	end := s.st.MaxOffset(st.topic, st.part)
	for _, r := range st.runs {
		e := entry{attempt: r.val, state: stReady}
		if r.val == runDone {
			e = entry{state: stDone}
		}
		for i := uint32(0); i < r.n && p.cursor < end; i++ {
			p.push(e, now)
		}
	}
}

func (s *Pop) applyDone(group, topic string, part int32, off int64) {
	if checkName(group) != nil || part < 0 || part > 1<<16 {
		return
	}
	q, _ := s.queueFor(group, topic, false)
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.partLocked(part)
	if !p.inited {
		p.base = s.st.MinOffset(topic, part)
		p.cursor, p.inited = p.base, true
	}
	// An offset never written is not a message (a damaged record); below
	// base it is done already. Otherwise it is marked done however far
	// past base it lies: the window held it before the crash, and base
	// moves over the done prefix at once, so the window replayed is never
	// longer than the one the broker had.
	if off < p.base || off >= s.st.MaxOffset(topic, part) {
		return
	}
	now := nowMs()
	for p.cursor <= off {
		p.push(entry{state: stReady}, now) // delivered or not: unknown (attempt 0)
	}
	p.at(off).state = stDone
	p.advance()
}
