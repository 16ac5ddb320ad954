package store

import (
	"encoding/binary"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Retention (deletePolicy=delete,N).
//
// The commit log is shared by every topic, so a segment can only be deleted
// once every topic allows it: a segment goes when its newest record is older
// than the LONGEST retention among the store's topics (Retention, or
// TopicRetention's override; a topic that keeps forever keeps every
// segment). The newest record of a segment is bounded by the first record of
// the next one (records are appended in storeTime order and a roll happens
// right before that record), so no segment scan is needed. The active
// segment, and any segment not yet fully flushed and dispatched, is never
// deleted. A deleted segment is unlinked at once and unmapped when its last
// reader releases it.
//
// Topics with a shorter retention than the longest are expired logically:
// their partitions' min offsets move forward to the first message younger
// than their retention, so consumers behind get 301 exactly as if the
// messages had been deleted.
//
// After a deletion, min offsets move to the first unit pointing into the
// oldest segment; index files whose units are all below it are deleted
// (except each partition's last file, which keeps the partition's max
// offset), and so are key-index files wholly below the oldest segment.

// hourly is the default schedule: at the top of every hour.
type hourly struct{}

func (hourly) Next(after time.Time) time.Time { return after.Truncate(time.Hour).Add(time.Hour) }

type every time.Duration

func (e every) Next(after time.Time) time.Time { return after.Add(time.Duration(e)) }

// Every returns a Schedule firing every d (an addition; the broker may supply
// a cron-like Schedule for MetaQ's deleteWhen instead).
func Every(d time.Duration) Schedule {
	if d <= 0 {
		d = time.Hour
	}
	return every(d)
}

// housekeep is the housekeeper goroutine: checkpoints and scheduled retention.
func (s *Store) housekeep() {
	defer s.wg.Done()
	ck := time.NewTicker(s.cfg.CheckpointInterval)
	defer ck.Stop()
	sched := s.cfg.DeleteWhen
	if sched == nil {
		sched = hourly{}
	}
	until := func() time.Duration {
		return max(time.Until(sched.Next(time.Now())), time.Millisecond)
	}
	timer := time.NewTimer(until())
	defer timer.Stop()
	for {
		select {
		case <-ck.C:
			_ = s.checkpointNow(false)
		case <-timer.C:
			if n, err := s.DeleteExpired(s.now()); err != nil {
				s.log.Error("retention pass failed", "err", err)
			} else if n > 0 {
				s.log.Info("retention: deleted segments", "segments", n, "logMin", s.clog.minPos())
			}
			timer.Reset(until())
		case <-s.stop:
			return
		}
	}
}

// retentionOf returns a topic's retention (0 = forever).
func (s *Store) retentionOf(topic string) time.Duration {
	if s.cfg.TopicRetention != nil {
		if d := s.cfg.TopicRetention(topic); d > 0 {
			return d
		}
	}
	return s.cfg.Retention
}

// DeleteExpired runs a retention pass as of now and returns how many
// segments it deleted.
func (s *Store) DeleteExpired(now time.Time) (segments int, err error) {
	if s.isClosed.Load() {
		return 0, ErrClosed
	}
	s.retMu.Lock()
	defer s.retMu.Unlock()
	if s.isClosed.Load() {
		return 0, ErrClosed
	}

	s.partsMu.RLock()
	var longest time.Duration
	forever := len(s.topics) == 0
	short := make(map[string]time.Duration)
	for name := range s.topics {
		r := s.retentionOf(name)
		if r <= 0 {
			forever = true
		}
		longest = max(longest, r)
		if r > 0 {
			short[name] = r
		}
	}
	s.partsMu.RUnlock()

	if !forever && longest > 0 {
		segments, err = s.deleteSegments(now.Add(-longest).UnixMilli())
	}
	logMin := s.clog.minPos()
	for _, p := range s.allPartitions() {
		s.refreshMin(p)
		s.deleteIndexFilesBelow(p)
		if r, ok := short[p.topic.name]; ok && (forever || r < longest) {
			s.expireLogically(p, now.Add(-r).UnixMilli())
		}
	}
	if s.keys != nil {
		s.keys.deleteBelow(logMin)
	}
	return segments, err
}

// deleteSegments deletes the oldest segments whose records are all older
// than cutoff (unix ms).
func (s *Store) deleteSegments(cutoff int64) (int, error) {
	limit := min(s.clog.flushedPos(), s.dispatched.Load())
	segs := s.clog.segments()
	n := 0
	for i := 0; i+1 < len(segs); i++ {
		g, next := segs[i], segs[i+1]
		if g.end() > limit {
			break
		}
		t, ok := s.firstStoreTime(next, limit)
		if !ok || t >= cutoff {
			break
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if !s.clog.dropBefore(segs[0], n) {
		return 0, nil
	}
	s.pf.dropBelow(s.clog.minPos()) // windows read ahead of deleted segments hold their files (coldread.go)
	s.counters.segmentsDeleted.Add(int64(n))
	return n, ioError("fsync dir", syncDir(s.logDir))
}

// firstStoreTime returns the storeTime of g's first record if it is below limit.
func (s *Store) firstStoreTime(g *segment, limit int64) (int64, bool) {
	size, magic, ok := protocol.PeekRecord(g.data)
	if !ok || magic != protocol.RecordMagic || g.base+int64(size) > limit || size < protocol.RecordOverhead {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(g.data[protocol.OffStoreTime:])), true
}

// deleteIndexFilesBelow deletes p's index files whose units are all below its
// min offset, keeping the last file.
func (s *Store) deleteIndexFilesBelow(p *partition) {
	minByte := p.min.Load() * unitSize
	p.ixMu.Lock()
	n := 0
	for n+1 < len(p.files) && p.files[n].base+s.cfg.IndexFileSize <= minByte {
		n++
	}
	dead := append([]*ixFile(nil), p.files[:n]...)
	p.files = append(p.files[:0:0], p.files[n:]...)
	p.ixMu.Unlock()
	for _, x := range dead {
		s.files.remove(x)
	}
	if len(dead) > 0 {
		s.files.markDirDirty(p.dir)
	}
}

// expireLogically moves p's min offset to its first message stored at or
// after cutoff (unix ms).
func (s *Store) expireLogically(p *partition, cutoff int64) {
	lo, hi := p.min.Load(), p.indexed.Load()
	q, err := s.searchUnits(p, lo, hi, func(phys int64, size int32) bool {
		t, ok := s.storeTimeAt(phys, size)
		return ok && t >= cutoff
	})
	if err != nil {
		return
	}
	for {
		cur := p.min.Load()
		if q <= cur || p.min.CompareAndSwap(cur, q) {
			return
		}
	}
}

// RetentionOf is how long topic's records are kept at least (0 = forever):
// a record stored at time S stays readable (by offset and by id) until
// S + RetentionOf(topic). The delay service rolls far-future records
// forward before that (docs/delay.md).
func (s *Store) RetentionOf(topic string) time.Duration { return s.retentionOf(topic) }
