package store

import (
	"sync"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Index verification and repair on the read path.
//
// Every unit a read scans is checked before it is used (plausibleUnit: its
// size is a possible record size, it points inside the log written so far,
// and after the previous unit's record — units of a partition follow the
// log's order); every unit whose record is served is checked against that
// record's header (verifyRecord: size, magic, partition, queue offset,
// topic, CRC; the header is read anyway to serve the record). A unit that
// fails (index file damage: a disk error, a stray write, an operator's dd)
// is not served, skipped or used to send the reader elsewhere: repairIndex
// rebuilds the damaged units from the commit log, where the records still
// are, and the read goes on with the right records. The repair is logged
// (rate-limited). Only when the commit log has no record for an offset
// either (the log itself was damaged) is that offset skipped, logged as such.
//
// The repair looks for the nearest units before and after the damaged one
// that verify (at most repairWindow units each way) and scans the commit log
// between their records — a few records when the damage is a few units —
// picking this partition's records; without a good unit before it scans from
// the oldest segment, without one after up to the visible limit. Repairs are
// serialised by s.repairMu (a reader that waited re-checks the unit first).

// repairWindow bounds how many units a repair examines each way.
const repairWindow = 4096

// plausibleUnit reports whether a unit can describe a record: size within
// record bounds, position non-negative, below limit (the write position) and
// at or after prevEnd (the end of the partition's previous record, -1 when
// unknown).
func (s *Store) plausibleUnit(phys int64, size int32, prevEnd, limit int64) bool {
	return size > protocol.RecordOverhead && int64(size) <= s.cfg.SegmentSize &&
		phys >= 0 && phys >= prevEnd && phys+int64(size) <= limit
}

// unitGood reads the unit at q and reports whether it verifies against the
// record it points to (which must still be in the log); it returns the
// unit's fields.
func (s *Store) unitGood(p *partition, q int64) (phys int64, size int32, ok bool) {
	phys, size, ok, _ = s.checkUnit(p, q)
	return phys, size, ok
}

// checkUnit is unitGood that also tells (named) when the unit points at a
// record whose header matches it but whose CRC fails: the index is right and
// the record is damaged.
func (s *Store) checkUnit(p *partition, q int64) (phys int64, size int32, ok, named bool) {
	phys, size, _, err := s.readUnit(p, q)
	if err != nil || !s.plausibleUnit(phys, size, 0, s.clog.writePos()) || phys < s.clog.minPos() {
		return phys, size, false, false
	}
	g := s.clog.acquireSegment(phys)
	if g == nil {
		return phys, size, false, false
	}
	defer g.release()
	off := phys - g.base
	if off+int64(size) > g.size {
		return phys, size, false, false
	}
	rec := g.data[off : off+int64(size)]
	if !headerMatches(rec, p, q) {
		return phys, size, false, false
	}
	ok = verifyRecord(rec, p, q)
	return phys, size, ok, !ok
}

// repairIndex rebuilds p's units around q, which failed verification, from
// the commit log. ok: the unit at q is good now (re-read it). Otherwise
// skipTo > q means the log holds no record for offsets [q, skipTo) (the
// read skips them); 0 means the repair failed (the read reports ErrCorrupt).
func (s *Store) repairIndex(p *partition, q, readable int64) (ok bool, skipTo int64) {
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	if _, _, good, named := s.checkUnit(p, q); good || named {
		// good: another reader repaired it meanwhile. named: the unit is
		// right, the record is damaged (the read reports ErrCorrupt).
		return good, 0
	}
	logMin := s.clog.minPos()
	// The nearest good unit before q bounds the scan from below.
	qLo, physLo := max(p.min.Load(), q-repairWindow), logMin
	for b := q - 1; b >= qLo; b-- {
		if phys, size, good := s.unitGood(p, b); good {
			qLo, physLo = b+1, phys+int64(size)
			break
		}
	}
	// The nearest good unit after q bounds it from above.
	qHi, physHi := min(readable, q+repairWindow+1), s.clog.visibleLimit()
	for a := q + 1; a < qHi; a++ {
		if phys, _, good := s.unitGood(p, a); good {
			qHi, physHi = a, phys
			break
		}
	}
	units := make([]byte, (qHi-qLo)*unitSize)
	found := make([]bool, qHi-qLo)
	scanned, nfound, err := s.scanPartition(p, physLo, physHi, qLo, qHi, units, found)
	s.counters.indexRepairs.Add(1)
	if err == nil {
		err = s.writeRepairedUnits(p, qLo, units, found)
	}
	now := time.Now()
	if err != nil {
		if n, ok := s.logLimit.allow("repair-failed", now); ok {
			s.log.Error("read: index units failed verification and could not be rebuilt from the commit log",
				"topic", p.topic.name, "partition", p.id, "offset", q, "err", err, "suppressed", n)
		}
		return false, 0
	}
	if found[q-qLo] {
		if n, ok := s.logLimit.allow("repaired", now); ok {
			s.log.Warn("read: index units failed verification; rebuilt them from the commit log",
				"topic", p.topic.name, "partition", p.id, "offset", q, "unitsRebuilt", nfound,
				"from", qLo, "to", qHi, "logBytesScanned", scanned, "suppressed", n)
		}
		return true, 0
	}
	skipTo = qHi
	for i := q - qLo; i < int64(len(found)); i++ {
		if found[i] {
			skipTo = qLo + i
			break
		}
	}
	if n, ok := s.logLimit.allow("no-record", now); ok {
		s.log.Error("read: index units failed verification and the commit log holds no record for them; skipping these offsets",
			"topic", p.topic.name, "partition", p.id, "from", q, "to", skipTo, "unitsRebuilt", nfound,
			"logBytesScanned", scanned, "suppressed", n)
	}
	return false, skipTo
}

// scanPartition walks the commit log over [from, to) (from a record
// boundary) and fills units/found with p's records whose queue offsets lie
// in [qLo, qHi). It stops at the first record that is not well formed.
func (s *Store) scanPartition(p *partition, from, to, qLo, qHi int64, units []byte, found []bool) (scanned int64, n int, err error) {
	var g *segment
	defer func() {
		if g != nil {
			g.release()
		}
	}()
	pos := from
	for pos < to {
		if g == nil || pos >= g.end() {
			if g != nil {
				g.release()
			}
			if g = s.clog.acquireSegment(pos); g == nil {
				return pos - from, n, errMissingSegment
			}
		}
		b := g.data[pos-g.base : min(g.size, to-g.base)]
		size, magic, ok := protocol.PeekRecord(b)
		if ok && magic == protocol.BlankMagic {
			pos = g.end()
			continue
		}
		if !ok || size < protocol.RecordOverhead || size > len(b) {
			return pos - from, n, ErrCorrupt
		}
		rec, _, err := protocol.DecodeRecordNoCRC(b[:size])
		if err != nil {
			return pos - from, n, ErrCorrupt
		}
		if q := rec.QueueOffset; rec.Partition == p.id && q >= qLo && q < qHi && string(rec.Topic) == p.topic.name &&
			verifyRecord(b[:size], p, q) && !found[q-qLo] {
			putRecordUnit(units[(q-qLo)*unitSize:], pos, int32(size), rec.Properties)
			found[q-qLo] = true
			n++
		}
		pos += int64(size)
	}
	return pos - from, n, nil
}

// writeRepairedUnits writes the found units (queue offsets from qLo) where
// they live: the index file below the partition's tail, the in-memory tail
// within it (p.tailMu held, as the dispatcher holds it).
func (s *Store) writeRepairedUnits(p *partition, qLo int64, units []byte, found []bool) error {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	t := &p.tail
	for i := 0; i < len(found); {
		if !found[i] {
			i++
			continue
		}
		j := i
		for j < len(found) && found[j] {
			j++
		}
		from, to := qLo+int64(i), qLo+int64(j)
		if fileEnd := min(to, t.start); from < fileEnd {
			if err := s.writeUnits(p, from, units[int64(i)*unitSize:(fileEnd-qLo)*unitSize]); err != nil {
				return err
			}
		}
		if lo, hi := max(from, t.start), min(to, t.end()); t.n > 0 && lo < hi {
			copy(t.buf[(lo-t.start)*unitSize:], units[(lo-qLo)*unitSize:(hi-qLo)*unitSize])
		}
		i = j
	}
	return nil
}

// logLimiter rate-limits repeated log lines a client can trigger at will
// (every read of a damaged range): the first of each kind is logged, then
// at most one per logLimitEvery, carrying how many were suppressed.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]*limitState
}

type limitState struct {
	at         time.Time
	suppressed int
}

const logLimitEvery = 10 * time.Second

// allow reports whether a line of this kind may be logged now, and how many
// were suppressed since the last one.
func (l *logLimiter) allow(kind string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[string]*limitState)
	}
	st := l.last[kind]
	if st == nil {
		l.last[kind] = &limitState{at: now}
		return 0, true
	}
	if now.Sub(st.at) < logLimitEvery {
		st.suppressed++
		return 0, false
	}
	n := st.suppressed
	st.at, st.suppressed = now, 0
	return n, true
}
