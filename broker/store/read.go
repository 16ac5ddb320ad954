package store

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// ReadStatus is the outcome of a Read.
type ReadStatus int

const (
	ReadFound          ReadStatus = iota // Bufs holds >= 1 record
	ReadNoMessage                        // offset == readable max: nothing yet (wait / 404)
	ReadFiltered                         // every scanned unit was filtered out: continue at NextOffset (301)
	ReadOffsetTooSmall                   // offset < min: 301 with MinOffset
	ReadOffsetTooLarge                   // offset > max: 301 with MaxOffset
)

func (st ReadStatus) String() string {
	switch st {
	case ReadFound:
		return "found"
	case ReadNoMessage:
		return "no message"
	case ReadFiltered:
		return "filtered"
	case ReadOffsetTooSmall:
		return "offset too small"
	case ReadOffsetTooLarge:
		return "offset too large"
	}
	return "unknown"
}

// ReadResult is the result of a read. Results are pooled: call Release
// exactly once when done with Bufs.
type ReadResult struct {
	Status     ReadStatus
	Bufs       [][]byte // whole records, slices of the mapped commit log (no copy); adjacent records coalesced
	Bytes      int      // sum of len(Bufs)
	Count      int      // records in Bufs
	NextOffset int64    // queue offset after the last unit scanned (filtered ones included)
	MinOffset  int64
	MaxOffset  int64

	segs    []*segment // references held until Release
	units   []byte     // unit read buffer
	lastSeg *segment   // segment of the last record appended (coalescing)
	lastBeg int64      // physical start of the last buffer
	lastEnd int64      // physical end of the last buffer
	lastBuf *coldBuf   // the direct read the last buffer is in (nil: the mapping)
	cold    []*coldBuf // direct reads served from (coldread.go), held until Release
	ucold   coldUnits  // index units read directly (coldunits.go); its buffer stays with the pooled result
	live    bool
}

// readUnitBatch is how many units one pread fetches.
const readUnitBatch = 256

// filteredUnitBatch is readUnitBatch for a filtered read, which may skip
// thousands of units (from the units alone: tag hashes, signatures) per
// record it serves: a 4 KiB pread per 256 skipped units was most of its
// cost.
const filteredUnitBatch = 1024

// maxFilteredScan bounds the records a filtered Read reads from the commit
// log and rejects without a match, maxIndexSkips the units it skips from
// the unit alone (tag hash, property signature: ~10 ns each, 8x cheaper per
// unit than a record read); then ReadFiltered tells the caller where to
// continue.
const (
	maxFilteredScan = 8192
	maxIndexSkips   = 8 * maxFilteredScan
)

var resultPool = sync.Pool{New: func() any {
	return &ReadResult{units: make([]byte, readUnitBatch*unitSize), Bufs: make([][]byte, 0, 4)}
}}

func getResult() *ReadResult {
	r := resultPool.Get().(*ReadResult)
	r.live = true
	return r
}

// Release returns the result to a pool and drops the segment references;
// Bufs is invalid afterwards. Must be called exactly once for every non-nil
// result (a second call right after the first is ignored).
func (r *ReadResult) Release() {
	if r == nil || !r.live {
		return
	}
	r.live = false
	for i, g := range r.segs {
		g.release()
		r.segs[i] = nil
	}
	r.segs = r.segs[:0]
	for i, b := range r.cold {
		putColdBuf(b)
		r.cold[i] = nil
	}
	r.cold, r.lastBuf = r.cold[:0], nil
	r.ucold.reset()
	clear(r.Bufs)
	r.Bufs = r.Bufs[:0]
	r.Status, r.Bytes, r.Count = 0, 0, 0
	r.NextOffset, r.MinOffset, r.MaxOffset = 0, 0, 0
	r.lastSeg, r.lastBeg, r.lastEnd = nil, 0, 0
	resultPool.Put(r)
}

// Read returns whole records of topic/partition from queue offset offset, at
// most maxBytes (but at least one record when one is readable), skipping
// units whose tag hash the filter rejects (nil = all). A partition never
// written reads as empty. Records are verified (header against the index
// unit, and CRC) before they are served; a record failing verification is
// never served: the read stops before it, or fails with ErrCorrupt when it is
// the first.
func (s *Store) Read(topic string, partition int32, offset int64, maxBytes int, f *protocol.TagFilter) (*ReadResult, error) {
	return s.read(topic, partition, offset, maxBytes, f, true)
}

// ReadIndexed is Read without the catch-up: it serves what is indexed and
// never waits for the dispatcher (a WaitFunc callback, which may run on the
// dispatcher, reads with it; wait.go).
func (s *Store) ReadIndexed(topic string, partition int32, offset int64, maxBytes int, f *protocol.TagFilter) (*ReadResult, error) {
	return s.read(topic, partition, offset, maxBytes, f, false)
}

func (s *Store) read(topic string, partition int32, offset int64, maxBytes int, f *protocol.TagFilter, catchUp bool) (*ReadResult, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	r := getResult()
	p := s.partition(topic, partition, false)
	var lo, readable, hi int64
	if p != nil {
		lo = p.min.Load()
		readable = p.indexed.Load()
		hi = p.next.Load()
	}
	r.MinOffset, r.MaxOffset = lo, hi
	switch {
	case offset < lo:
		r.Status, r.NextOffset = ReadOffsetTooSmall, lo
		return r, nil
	case offset > hi:
		r.Status, r.NextOffset = ReadOffsetTooLarge, hi
		return r, nil
	case offset >= readable && offset < hi && catchUp:
		// Assigned but not indexed yet: it may already be visible (see catchUp).
		s.catchUp(s.clog.appendedLimit())
		if readable = p.indexed.Load(); offset >= readable {
			r.Status, r.NextOffset = ReadNoMessage, offset
			return r, nil
		}
	case offset >= readable:
		r.Status, r.NextOffset = ReadNoMessage, offset
		return r, nil
	}
	if err := s.readInto(r, p, offset, readable, maxBytes, f, catchUp); err != nil {
		r.Release()
		return nil, err
	}
	if r.lastBuf != nil && r.Bytes >= maxBytes/2 && r.NextOffset < readable {
		// A cold stream with more to read: its next window, while this
		// reply is written (coldread.go).
		s.readAheadDirect(r.lastSeg, r.lastEnd-r.lastSeg.base, s.clog.writePos(), r.lastBuf.end)
	}
	return r, nil
}

func (s *Store) readInto(r *ReadResult, p *partition, offset, readable int64, maxBytes int, f *protocol.TagFilter, catchUp bool) error {
	q := offset
	skipped, indexSkips := 0, 0 // units rejected by reading the record, from the unit alone
	all := f.All()
	rm := f.RecordMatcher() // an expression on the record (readmatch.go)
	sm := signatureMatcher(rm)
	var pk recordPeek
	defer pk.release()
	batch := int64(readUnitBatch)
	if !all {
		batch = filteredUnitBatch
		if len(r.units) < filteredUnitBatch*unitSize {
			r.units = make([]byte, filteredUnitBatch*unitSize) // once per pooled result
		}
	}
	caughtUp := !catchUp
	repairs := 0 // index repairs by this read (repair.go)
	limit := s.clog.writePos()
again:
	stopped := false // the scan ended for a reason other than reaching readable
	prevEnd := int64(-1)
scan:
	for q < readable {
		bad, badPhys := "", int64(-1) // a damaged unit at q (repair.go)
		want := min(readable-q, batch)
		units, nb, err := s.scanUnits(r, p, q, want, maxBytes)
		switch {
		case err == nil:
		case r.Count > 0:
			stopped = true
			break scan
		case err != errGone:
			return err
		default:
			if m := s.refreshMin(p); m > q {
				// Retention removed it: the reader moves forward to min.
				r.Status, r.NextOffset, r.MinOffset = ReadOffsetTooSmall, m, m
				return nil
			}
			bad = "index file missing above the partition's min offset"
		}
		for i := 0; bad == "" && i < nb; i += unitSize {
			phys, size, tag := getUnit(units[i:])
			if !s.plausibleUnit(phys, size, prevEnd, limit) {
				bad, badPhys = "index unit is not a possible record position", phys
				break
			}
			prevEnd = phys + int64(size)
			// The unit alone may show the read cannot select the record: a tag
			// miss, or a property signature the expression rules out.
			skip := !all && !f.MatchHash(tag)
			if !skip && sm != nil {
				sig, ok := unitSignature(units[i:])
				skip = ok && !sm.MaySignature(sig)
			}
			if skip {
				q++
				if indexSkips++; indexSkips >= maxIndexSkips && r.Count == 0 {
					stopped = true
					break scan
				}
				continue
			}
			if rm != nil {
				ok, err := s.peekMatch(&pk, p, q, phys, int(size), rm)
				if err != nil {
					switch act, why := s.onRecordError(r, p, q, err); act {
					case recordStop:
						stopped = true
						break scan
					case recordTooSmall:
						return nil
					default:
						bad, badPhys = why, phys
					}
					break
				}
				if !ok {
					q++
					if skipped++; skipped >= maxFilteredScan && r.Count == 0 {
						stopped = true
						break scan
					}
					continue
				}
			}
			if r.Count > 0 && r.Bytes+int(size) > maxBytes {
				stopped = true
				break scan
			}
			if err := s.appendRecord(r, p, q, phys, int(size), maxBytes); err != nil {
				switch act, why := s.onRecordError(r, p, q, err); act {
				case recordStop:
					stopped = true
					break scan
				case recordTooSmall:
					return nil
				default:
					bad, badPhys = why, phys
				}
				break
			}
			q++
			if r.Bytes >= maxBytes {
				stopped = true
				break scan
			}
		}
		if bad == "" {
			continue
		}
		// A damaged index unit: rebuild it from the commit log and go on
		// from here; never serve, skip or redirect on its word.
		if repairs < maxReadRepairs {
			repairs++
			ok, skipTo := s.repairIndex(p, q, readable)
			r.ucold.reset() // units read directly before the repair are stale
			if ok {
				goto again
			}
			if skipTo > q {
				q = skipTo
				goto again
			}
		}
		if r.Count > 0 {
			stopped = true
			break
		}
		return s.corrupt(bad, p, q, badPhys)
	}
	// The read reached the indexing frontier with room left while later
	// offsets are already assigned: let the dispatcher catch up with what is
	// visible now (once), so a read returns every record acknowledged before
	// it (read-your-writes), not just the indexed prefix.
	if !stopped && !caughtUp && q < p.next.Load() {
		caughtUp = true
		s.catchUp(s.clog.appendedLimit())
		if n := p.indexed.Load(); n > readable {
			readable = n
			limit = s.clog.writePos()
			goto again
		}
	}
	r.NextOffset = q
	switch {
	case r.Count > 0:
		r.Status = ReadFound
	case q > offset:
		r.Status = ReadFiltered
	default:
		r.Status = ReadNoMessage
	}
	return nil
}

// recordAction is what readInto does about an error from reading the record
// an index unit points at (peekMatch or appendRecord).
type recordAction int

const (
	recordDamaged  recordAction = iota // the unit is damaged: repair it (repair.go)
	recordStop                         // end the block with the records it holds
	recordTooSmall                     // retention removed it: r answers "offset too small" with min
)

// onRecordError classifies err for the unit at queue offset q, the one
// policy for both ways a read touches a record: a record below the oldest
// segment ends a block that holds records, moves an empty read forward to
// the partition's min when retention explains it, and is otherwise a damaged
// unit, as is any other error (the reason is returned for the repair log).
func (s *Store) onRecordError(r *ReadResult, p *partition, q int64, err error) (recordAction, string) {
	switch {
	case err != errBelowMin:
		return recordDamaged, err.Error()
	case r.Count > 0:
		return recordStop, ""
	}
	if m := s.refreshMin(p); m > q {
		r.Status, r.NextOffset, r.MinOffset = ReadOffsetTooSmall, m, m
		return recordTooSmall, ""
	}
	return recordDamaged, "index unit points below the oldest segment"
}

// maxReadRepairs bounds the index repairs one read may run (repair.go).
const maxReadRepairs = 4

// appendRecord verifies the record a unit points to and adds it to r,
// coalescing it with the previous one when adjacent. maxBytes is the read's
// byte budget (what a cold read populates ahead, readahead.go).
func (s *Store) appendRecord(r *ReadResult, p *partition, q, phys int64, size, maxBytes int) error {
	g := r.lastSeg
	if g == nil || phys < g.base || phys+int64(size) > g.end() {
		if phys < s.clog.minPos() {
			return errBelowMin
		}
		if g = s.clog.acquireSegment(phys); g == nil {
			if phys < s.clog.minPos() {
				return errBelowMin
			}
			return errUnitOutside
		}
		r.segs = append(r.segs, g)
	}
	off := phys - g.base
	if off+int64(size) > g.size {
		return errUnitPastSegment
	}
	var cb *coldBuf // the direct read that holds the record (coldread.go)
	if n := len(r.cold); n > 0 && r.cold[n-1].covers(g, phys, size) {
		cb = r.cold[n-1]
	} else if r.Count == 0 || r.lastSeg != g || r.lastBuf != nil {
		// (A record larger than a direct read's window is read through the mapping.)
		// A run starts (or leaves its direct read): cold bytes are read
		// directly, others through the mapping with read-ahead.
		limit := s.clog.writePos()
		budget := max(maxBytes-r.Bytes, size)
		if size <= coldWindow && s.coldRead(r, g, off, budget, limit) && r.cold[len(r.cold)-1].covers(g, phys, size) {
			cb = r.cold[len(r.cold)-1]
		} else {
			s.readAhead(g, off, limit) // readahead.go
			s.populate(g, off, budget, limit)
		}
	}
	var rec []byte
	if cb != nil {
		rec = cb.bytes(phys, size)
	} else {
		rec = g.data[off : off+int64(size)]
	}
	if !verifyRecord(rec, p, q) {
		return errRecordMismatch
	}
	if r.Count > 0 && r.lastSeg == g && r.lastEnd == phys && r.lastBuf == cb {
		if cb != nil {
			r.Bufs[len(r.Bufs)-1] = cb.bytes(r.lastBeg, int(phys+int64(size)-r.lastBeg))
		} else {
			r.Bufs[len(r.Bufs)-1] = g.data[r.lastBeg-g.base : off+int64(size)]
		}
	} else {
		r.Bufs = append(r.Bufs, rec)
		r.lastBeg = phys
	}
	r.lastSeg, r.lastEnd, r.lastBuf = g, phys+int64(size), cb
	r.Bytes += size
	r.Count++
	return nil
}

// verifyRecord checks a record against the unit that points to it: size,
// magic, partition, queue offset, topic, then the CRC.
func verifyRecord(rec []byte, p *partition, q int64) bool {
	return headerMatches(rec, p, q) &&
		binary.BigEndian.Uint32(rec[protocol.OffCRC:]) == protocol.CRC32C(rec[protocol.OffMsgID:])
}

// headerMatches is verifyRecord without the CRC: the record's header names
// p's topic and partition, queue offset q and its own length.
func headerMatches(rec []byte, p *partition, q int64) bool {
	be := binary.BigEndian
	if len(rec) < protocol.RecordOverhead+1 ||
		int(be.Uint32(rec[protocol.OffSize:])) != len(rec) ||
		be.Uint32(rec[protocol.OffMagic:]) != protocol.RecordMagic ||
		int32(be.Uint32(rec[protocol.OffPartition:])) != p.id ||
		int64(be.Uint64(rec[protocol.OffQueueOffset:])) != q {
		return false
	}
	tl := int(rec[protocol.OffTopicLen])
	return protocol.OffTopicLen+1+tl <= len(rec) && string(rec[protocol.OffTopicLen+1:protocol.OffTopicLen+1+tl]) == p.topic.name
}

// Why appendRecord refused a unit (the read repairs the index, repair.go).
var (
	errUnitOutside     = errors.New("index unit points outside the commit log")
	errUnitPastSegment = errors.New("index unit runs past its segment")
	errRecordMismatch  = errors.New("record fails verification against its index unit")
)

// corrupt logs a verification failure (rate-limited) and returns ErrCorrupt.
func (s *Store) corrupt(what string, p *partition, q, phys int64) error {
	s.counters.corruptReads.Add(1)
	if n, ok := s.logLimit.allow("corrupt", time.Now()); ok {
		s.log.Error("read: "+what+"; not served", "topic", p.topic.name, "partition", p.id, "offset", q,
			"physicalOffset", phys, "suppressed", n)
	}
	return ErrCorrupt
}

// MinOffset returns the smallest readable queue offset of the partition.
func (s *Store) MinOffset(topic string, partition int32) int64 {
	if p := s.partition(topic, partition, false); p != nil {
		return p.min.Load()
	}
	return 0
}

// MaxOffset returns the next queue offset to be assigned; on a replica
// with a read limit (SetReadLimit) the first offset it may not serve yet.
func (s *Store) MaxOffset(topic string, partition int32) int64 {
	p := s.partition(topic, partition, false)
	if p == nil {
		return 0
	}
	if s.clog.readLimit.Load() == math.MaxInt64 {
		return p.next.Load()
	}
	if p.indexed.Load() < p.next.Load() {
		s.catchUp(s.clog.appendedLimit()) // what lies below the limit is indexed
	}
	return p.indexed.Load()
}

// OffsetForTime returns the first queue offset whose storeTime >= tsMs
// (MaxOffset if none), by binary search over the index units. Offsets
// assigned but not indexed yet are searched too, after the same catch-up as
// a read (read-your-writes: a consumer starting "from now" right after a put
// must not start past it); if the dispatcher still lags after that, the
// answer is the first unindexed offset rather than MaxOffset, so that nothing
// stored after tsMs is skipped.
func (s *Store) OffsetForTime(topic string, partition int32, tsMs int64) int64 {
	p := s.partition(topic, partition, false)
	if p == nil {
		return 0
	}
	lo, hi := p.min.Load(), p.indexed.Load()
	if hi < p.next.Load() {
		s.catchUp(s.clog.appendedLimit())
		hi = p.indexed.Load()
	}
	q, _ := s.searchUnits(p, lo, hi, func(phys int64, size int32) bool {
		t, ok := s.storeTimeAt(phys, size)
		return ok && t >= tsMs
	})
	return min(q, hi) // hi is MaxOffset unless the dispatcher lags
}

// storeTimeAt reads the storeTime of the record at phys.
func (s *Store) storeTimeAt(phys int64, size int32) (int64, bool) {
	if size <= 0 || phys < s.clog.minPos() {
		return 0, false
	}
	g := s.clog.acquireSegment(phys)
	if g == nil {
		return 0, false
	}
	defer g.release()
	off := phys - g.base
	if off+protocol.RecordOverhead > g.size {
		return 0, false
	}
	b := g.data[off:]
	if binary.BigEndian.Uint32(b[protocol.OffMagic:]) != protocol.RecordMagic {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[protocol.OffStoreTime:])), true
}

// ReadByID returns the one record with that message id (verified), or
// ErrNotFound. The record must be visible (durable in sync mode).
func (s *Store) ReadByID(msgID int64) (*ReadResult, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	bid, phys := protocol.SplitMsgID(msgID)
	vis := s.clog.visibleLimit()
	if !s.sync && phys >= vis && phys < s.clog.writePos() {
		_ = s.clog.writeOut() // appended but still staged (stage.go)
		vis = s.clog.visibleLimit()
	}
	if bid != s.cfg.BrokerID || msgID < 0 || phys < s.clog.minPos() || phys >= vis {
		return nil, ErrNotFound
	}
	g := s.clog.acquireSegment(phys)
	if g == nil {
		return nil, ErrNotFound
	}
	off := phys - g.base
	end := min(g.size, vis-g.base)
	rec, n, err := protocol.DecodeRecord(g.data[off:end], 0)
	if err != nil || rec.MsgID != msgID || rec.PhysicalOffset != phys {
		named := err == protocol.ErrBadCRC && int64(binary.BigEndian.Uint64(g.data[off+protocol.OffMsgID:])) == msgID
		g.release()
		if named {
			// A record header naming this id sits here but its bytes are damaged.
			s.counters.corruptReads.Add(1)
			s.log.Error("read by id: record fails its checksum; not served", "msgId", msgID, "physicalOffset", phys)
			return nil, ErrCorrupt
		}
		return nil, ErrNotFound
	}
	r := getResult()
	r.segs = append(r.segs, g)
	r.Bufs = append(r.Bufs, g.data[off:off+int64(n)])
	r.Bytes, r.Count, r.Status = n, 1, ReadFound
	r.NextOffset = rec.QueueOffset + 1
	if p := s.partitionBytes(rec.Topic, rec.Partition); p != nil {
		r.MinOffset, r.MaxOffset = p.min.Load(), p.next.Load()
	}
	return r, nil
}
