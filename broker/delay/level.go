package delay

import (
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// levelBatchBytes bounds one read of a level's partition.
const levelBatchBytes = 256 << 10

// runLevel delivers delay level p (%SCHEDULE% partition p). Every record of
// a level waits the same time and storeTime never decreases within a
// partition, so the partition is in due order: only its head is checked.
func (s *Service) runLevel(p int32) {
	defer s.wg.Done()
	wait := s.levels[p-1].Milliseconds()
	var scratch []byte
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	defer sleep.Stop()
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		off := s.levelOff[p-1].Load()
		res, err := s.st.Read(scheduleTopic, p, off, levelBatchBytes, nil)
		if err != nil {
			if !s.errBackoff("reading delay level", err) {
				return
			}
			continue
		}
		switch res.Status {
		case store.ReadNoMessage, store.ReadOffsetTooLarge: // too large: the store is still indexing after a restart
			res.Release()
			select {
			case <-s.stop:
				return
			case <-s.st.Wait(scheduleTopic, p, off):
			}
			continue
		case store.ReadOffsetTooSmall:
			s.log.Warn("delayed messages expired by retention before delivery", "level", p, "from", off, "to", res.MinOffset)
			s.levelOff[p-1].Store(res.MinOffset)
			res.Release()
			continue
		case store.ReadFiltered:
			s.levelOff[p-1].Store(min(res.MaxOffset, max(off, res.NextOffset)))
			res.Release()
			continue
		}
		var dueAt int64
		var failed error
		n := 0
	records:
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				r, size, derr := protocol.DecodeRecord(buf, 0)
				if derr != nil {
					s.log.Error("bad %SCHEDULE% record; skipped", "level", p, "offset", off, "err", derr)
					off++
					s.levelOff[p-1].Store(off)
					break records
				}
				buf = buf[size:]
				due := r.StoreTime + wait
				if now := time.Now().UnixMilli(); due > now {
					dueAt = due
					break records
				}
				scratch, failed = s.deliver(&r, due, scratch)
				if failed != nil {
					break records
				}
				off = r.QueueOffset + 1
				s.levelOff[p-1].Store(off)
				n++
			}
		}
		res.Release()
		if n > 0 {
			if err := s.st.WriteOut(); err != nil && !s.errBackoff("writing delivered messages", err) {
				return
			}
			s.timer.poke()
		}
		if failed != nil {
			if !s.errBackoff("delivering a delayed message", failed) {
				return
			}
			continue
		}
		if dueAt > 0 {
			sleep.Reset(time.Duration(dueAt-time.Now().UnixMilli()) * time.Millisecond)
			select {
			case <-s.stop:
				return
			case <-sleep.C:
			}
		}
	}
}
