package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
)

// The replication seam (docs/internal/store-api.md, "What replication will
// need"): a master's log is read as raw bytes from a physical offset
// (ReadRaw), a slave appends those bytes at the same physical offsets
// (AppendRaw) and makes them durable in batches (SyncRaw); the master's
// group-commit rounds can be held until a replication gate says enough
// slaves have them (SetReplicationGate); a slave's store refuses every
// local append (SetReplica). Truncation and the reset of a slave that is
// behind the master's retention are done at Open, from a marker written by
// ScheduleReset (raw_reset.go).

// Errors of the replication seam.
var (
	// ErrReplica: the store is a slave's copy and refuses local appends.
	ErrReplica = errors.New("store: this store is a replica (slave): local appends are refused")
	// ErrNotReplicated (matched by errors.Is on the replication gate's
	// errors): the round is durable locally but not confirmed by enough
	// slaves; the broker answers 503.
	ErrNotReplicated = errors.New("store: not replicated")
	// ErrRawPosition: AppendRaw at a position other than the write position,
	// or ReadRaw past the visible limit.
	ErrRawPosition = errors.New("store: raw position mismatch")
	// ErrRawTooOld: ReadRaw below the oldest segment (deleted by retention).
	ErrRawTooOld = errors.New("store: raw position below the oldest segment")
	// ErrRawBad: AppendRaw was given bytes that are not whole valid records
	// for this position (a damaged stream, or a different maxSegmentSize).
	ErrRawBad = errors.New("store: bad raw records")
)

// RawChunk is a run of commit-log bytes returned by ReadRaw. Buf aliases the
// mapped segment, whose reference the chunk holds until Release.
type RawChunk struct {
	Pos  int64  // physical offset of Buf[0]
	Buf  []byte // whole records, or one BLANK header (8 bytes) closing a segment
	Next int64  // position after this chunk (a BLANK: the next segment's base)
	seg  *segment
}

// Release drops the segment reference; Buf is invalid afterwards.
func (c *RawChunk) Release() {
	if c.seg != nil {
		c.seg.release()
		c.seg = nil
	}
	c.Buf = nil
}

// ReadRaw returns the visible commit-log bytes from pos (a record boundary),
// at most max bytes of whole records (at least one record when one is
// visible) and never past the end of pos's segment. A segment's BLANK tail
// is returned as its 8-byte header alone (Next is then the next segment's
// base). ok is false when nothing is visible at pos yet. pos below the
// oldest segment: ErrRawTooOld; past the visible limit: ErrRawPosition.
func (s *Store) ReadRaw(pos int64, max int) (c RawChunk, ok bool, err error) {
	return s.readRaw(pos, max, s.clog.visibleLimit())
}

// ReadRawWritten is ReadRaw up to WrittenPos instead of the visible limit:
// in sync-flush mode it also returns the records of the group-commit round
// being fsynced (written to the segment files, not yet durable), so that a
// master's slaves receive a round while the master syncs it
// (docs/replication.md, "Cost"). The bytes are the ones a crash of the
// process keeps (they are in the page cache); a crash of the machine may
// lose them, which is why a master's slave that holds more than the master
// recovered truncates (broker/ha).
func (s *Store) ReadRawWritten(pos int64, max int) (c RawChunk, ok bool, err error) {
	return s.readRaw(pos, max, s.clog.stage.written.Load())
}

// ScanWritten calls fn with each record of the log from pos (a record
// boundary) up to WrittenPos, in log order: the scans of a log's tail that
// no index covers (a slave's epoch records past its read limit, broker/ha).
// fn's error ends the scan and is returned. Not for hot paths: one chunk
// read per MiB.
func (s *Store) ScanWritten(pos int64, fn func(pos int64, rec []byte) error) error {
	return s.scanRecords(pos, func() int64 { return s.clog.stage.written.Load() }, fn)
}

// scanRecords is ScanWritten up to lim (read again for every chunk), which
// skips the BLANK tails of segments; a record cut short of its size is
// ErrCorrupt.
func (s *Store) scanRecords(pos int64, lim func() int64, fn func(pos int64, rec []byte) error) error {
	for {
		c, ok, err := s.readRaw(pos, 1<<20, lim())
		if err != nil || !ok {
			return err
		}
		for b := c.Buf; len(b) > 0; {
			at := c.Pos + int64(len(c.Buf)-len(b))
			size, magic, _ := protocol.PeekRecord(b)
			if magic != protocol.RecordMagic {
				break // a segment's BLANK: the next chunk starts at the next segment
			}
			err := error(nil)
			if size < protocol.RecordOverhead || size > len(b) {
				err = fmt.Errorf("%w: record at %d: %v", ErrCorrupt, at, protocol.ErrBadSize)
			} else {
				err = fn(at, b[:size])
			}
			if err != nil {
				c.Release()
				return err
			}
			b = b[size:]
		}
		pos = c.Next
		c.Release()
	}
}

func (s *Store) readRaw(pos int64, max int, lim int64) (c RawChunk, ok bool, err error) {
	l := s.clog
	switch {
	case pos > lim:
		return c, false, fmt.Errorf("%w: read at %d past the visible limit %d", ErrRawPosition, pos, lim)
	case pos < l.minPos():
		return c, false, fmt.Errorf("%w: %d < %d", ErrRawTooOld, pos, l.minPos())
	case pos == lim:
		return c, false, nil
	}
	g := l.acquireSegment(pos)
	if g == nil {
		if pos < l.minPos() {
			return c, false, fmt.Errorf("%w: %d < %d", ErrRawTooOld, pos, l.minPos())
		}
		return c, false, fmt.Errorf("%w: no segment at %d", ErrIO, pos)
	}
	end := min(lim, g.end())
	b := g.data[pos-g.base : end-g.base]
	if lim < g.end() && len(b) <= max {
		// The common case of a stream that keeps up: everything up to the
		// limit, inside one segment. The written and visible limits only
		// ever stop after a whole record, and a segment's BLANK is written
		// only when the log rolls past it (the limit is then in the next
		// segment, or still below the BLANK): [pos, lim) is whole records,
		// and walking every header (a cache miss each) is not needed. The
		// first header is checked; the walk below reports a bad one.
		if size, magic, okh := protocol.PeekRecord(b); okh && magic == protocol.RecordMagic &&
			size >= protocol.RecordOverhead && size <= len(b) {
			return RawChunk{Pos: pos, Buf: b, Next: lim, seg: g}, true, nil
		}
	}
	n := 0
	for n < len(b) {
		size, magic, okh := protocol.PeekRecord(b[n:])
		if !okh {
			break
		}
		if magic == protocol.BlankMagic {
			if n == 0 {
				return RawChunk{Pos: pos, Buf: b[:protocol.BlankMinSize], Next: g.end(), seg: g}, true, nil
			}
			break
		}
		if magic != protocol.RecordMagic || size < protocol.RecordOverhead || n+size > len(b) {
			g.release()
			return c, false, fmt.Errorf("%w: bad record header at %d", ErrCorrupt, pos+int64(n))
		}
		if n > 0 && n+size > max {
			break
		}
		n += size
	}
	if n == 0 {
		g.release()
		return c, false, nil
	}
	return RawChunk{Pos: pos, Buf: b[:n], Next: pos + int64(n), seg: g}, true, nil
}

// IndexedPos is the position below which every record is indexed (the
// dispatcher's progress; on a replica it stops at the read limit).
func (s *Store) IndexedPos() int64 { return s.dispatched.Load() }

// WritePos is the commit log's write position (the end of what is appended).
func (s *Store) WritePos() int64 { return s.clog.writePos() }

// FlushedPos is the durable end of the commit log.
func (s *Store) FlushedPos() int64 { return s.clog.flushedPos() }

// VisiblePos is the end of what may be read.
func (s *Store) VisiblePos() int64 { return s.clog.visibleLimit() }

// WrittenPos is the end of what is written to the segment files (the page
// cache): what ReadRawWritten may return. It is VisiblePos in async-flush
// mode; in sync-flush mode it runs ahead of the durable (and visible)
// position by the round being fsynced.
func (s *Store) WrittenPos() int64 { return s.clog.stage.written.Load() }

// OpenPos is where the commit log ended when Open had recovered it: every
// byte from it on was appended by this run of the store.
func (s *Store) OpenPos() int64 { return s.openEnd }

// MinPos is the base of the oldest segment.
func (s *Store) MinPos() int64 { return s.clog.minPos() }

// SegmentSize is the configured segment size (master and slaves must agree).
func (s *Store) SegmentSize() int64 { return s.cfg.SegmentSize }

// SetReplica makes the store refuse (on) or accept (off) local appends:
// Append, AppendAsync and AppendBatch fail with ErrReplica while on;
// AppendRaw is unaffected.
func (s *Store) SetReplica(on bool) {
	l := s.clog
	l.mu.Lock()
	l.replica = on
	l.mu.Unlock()
}

// SetReadLimit makes a replica serve only what lies below pos: records
// past it are neither dispatched (indexed, keyed) nor read, queried by id or
// counted in MaxOffset until the limit passes them. A slave sets it to the
// position its master has acknowledged (the master's high watermark, carried
// by the replication stream; docs/replication.md, "Reads from a slave"), so
// that a consumer reading from the slave never sees a round the master may
// still lose. pos < 0 removes the limit (a master) and the watermark file
// that kept it (watermark.go). The limit may be set below what is
// dispatched already; that stays readable.
func (s *Store) SetReadLimit(pos int64) {
	if pos < 0 {
		pos = math.MaxInt64
	}
	if s.clog.readLimit.Swap(pos) < pos {
		s.clog.onVisible()
	}
	if pos == math.MaxInt64 {
		// No more raw appends to index. Under dispMu, the rule of done: an
		// inline dispatch (RaiseReadLimitFrom) may be reading the pending
		// entries, and done compacts them in place.
		s.dispMu.Lock()
		s.clog.rawUnits.done(math.MaxInt64)
		s.dispMu.Unlock()
		if err := s.dropWatermark(); err != nil {
			s.log.Warn("replication: removing the high watermark file", "err", err)
		}
	}
}

// RaiseReadLimit moves the read limit up to pos (never down; nothing when
// there is none): the master acknowledged everything below pos.
func (s *Store) RaiseReadLimit(pos int64) {
	if s.raiseReadLimitSaved(pos) {
		s.clog.onVisible()
	}
}

// raiseReadLimit is RaiseReadLimit without the wake-ups: true when the
// limit rose.
func (l *commitLog) raiseReadLimit(pos int64) bool {
	for {
		cur := l.readLimit.Load()
		if pos <= cur || cur == math.MaxInt64 {
			return false
		}
		if l.readLimit.CompareAndSwap(cur, pos) {
			return true
		}
	}
}

// RawSpan is a copy of the commit log's bytes at Pos that a caller still
// holds in its own memory: a replica's receive buffer after AppendRaw(Pos,
// Buf). Buf must not change while it is handed to the store.
type RawSpan struct {
	Pos int64
	Buf []byte
}

// RaiseReadLimitFrom is RaiseReadLimit for a replica's receive loop that
// still holds what it appended (spans, in log order; RawSpan): what became
// readable is indexed on the calling goroutine, its records read from the
// spans — just received, checked and written by this goroutine, so still in
// its core's cache — instead of waking the dispatcher to read them back from
// the mapped log (a cache miss per record, and the mapping's page faults:
// the dispatcher was ~20% of a slave's CPU; docs/replication.md, "Cost of a
// slave"). Records the spans do not hold are read from the log as usual.
// When the dispatcher is busy or failing, or what became readable is more
// than one dispatch batch, it is woken as RaiseReadLimit does. The spans are
// not kept after it returns.
func (s *Store) RaiseReadLimitFrom(pos int64, spans []RawSpan) {
	l := s.clog
	if !s.raiseReadLimitSaved(pos) {
		return
	}
	if s.dispFailing.Load() || s.isClosed.Load() || !s.dispMu.TryLock() {
		l.onVisible()
		return
	}
	if err := s.dispatchUnlock(&rawSrc{spans: spans, units: l.rawUnits.pending()}); err != nil ||
		s.dispatched.Load() < l.visibleLimit() {
		s.wakeDispatcher() // a failed batch is retried there, with its backoff
	}
	s.visWait.Wake()
}

// ReadLimit is the read limit (-1: none).
func (s *Store) ReadLimit() int64 {
	if v := s.clog.readLimit.Load(); v != math.MaxInt64 {
		return v
	}
	return -1
}

// SyncFlush reports whether the store flushes every round before it
// acknowledges it (unflushThreshold=0).
func (s *Store) SyncFlush() bool { return s.clog.sync }

// AppendRaw appends b, whole records (or one BLANK header) read from the
// master's log at pos, at the same physical offset: pos must be the write
// position. The records keep the master's queue offsets, store times and
// msgIds; each partition's next offset follows them, and the dispatcher
// indexes them as usual once they are visible. A BLANK header closes the
// active segment (which must end where the master's did). Records are
// verified (layout and CRC) before anything is appended: on an error nothing
// of b is. Nothing is durable before SyncRaw.
//
// The records are checked first, then the whole run is staged with one copy
// and the positions are published once (a store of an atomic after each
// record's copy cost ~10% of a slave's CPU: the fence waits for the copy).
func (s *Store) AppendRaw(pos int64, b []byte) error {
	l := s.clog
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendErrLocked(); err != nil {
		return err
	}
	if pos != l.wpos {
		return fmt.Errorf("%w: append at %d, write position %d", ErrRawPosition, pos, l.wpos)
	}
	if len(b) == 0 {
		return nil
	}
	size, magic, ok := protocol.PeekRecord(b)
	if !ok {
		return fmt.Errorf("%w: %d stray bytes at %d", ErrRawBad, len(b), l.wpos)
	}
	if magic == protocol.BlankMagic {
		rem := l.active.end() - l.wpos
		if !protocol.BlankEnds(size, rem) || len(b) != protocol.BlankMinSize {
			return fmt.Errorf("%w: BLANK of %d bytes at %d, %d left in the segment (maxSegmentSize differs from the master's?)",
				ErrRawBad, size, l.wpos, rem)
		}
		// Roll: asking for one byte more than is left makes room in the
		// next segment exactly as a master's append does.
		end := l.active.end()
		if err := l.makeRoomLocked(rem + 1); err != nil {
			return err
		}
		if l.wpos != end {
			return fmt.Errorf("%w: roll at %d went to %d", ErrRawBad, end, l.wpos)
		}
		return nil
	}
	if l.wpos == l.active.end() {
		// The master filled the segment to its last byte (a record of
		// exactly the room left, so no BLANK came) and started the next
		// one: roll as its append did, before checking the records against
		// the active segment's room.
		if err := l.makeRoomLocked(1); err != nil {
			return err
		}
	}
	run, err := l.checkRawLocked(b)
	if err != nil {
		return err
	}
	n := int64(len(b))
	if err := l.makeRoomLocked(n); err != nil { // staging room only: it fits (checked)
		return err
	}
	if l.wpos != pos {
		return fmt.Errorf("%w: write position moved to %d under a raw append at %d", ErrRawPosition, l.wpos, pos)
	}
	st := &l.stage
	if l.replica && st.written.Load() == l.wpos && st.wmu.TryLock() {
		// Nothing staged and no write-out running: write b itself into the
		// segment (no copy into the staging buffer). Holding the writer
		// lock keeps every write-out off the range until it is in the
		// file; the positions are published first (the zero-filler keeps
		// its distance from the new write position), visibility after.
		l.publishRawLocked(pos, n, run)
		st.base = l.wpos
		l.mu.Unlock()
		err := l.writeRaw(pos, b)
		l.mu.Lock()
		if err != nil {
			l.stageFailedLocked(err)
		} else {
			st.written.Store(pos + n)
		}
		st.wmu.Unlock()
		if err == nil && !l.sync {
			l.mu.Unlock()
			l.onVisible() // async: written records are visible (stage.go)
			l.mu.Lock()
		}
		return err
	}
	copy(l.stagedLocked(n), b)
	l.publishRawLocked(pos, n, run)
	return nil
}

// writeRaw writes b at log position pos (one segment), padded with zeros to
// the end of its page as writeStaged pads (stage.go). The caller holds
// stage.wmu, not l.mu.
func (l *commitLog) writeRaw(pos int64, b []byte) error {
	g := l.acquireSegment(pos)
	if g == nil {
		return ioError("write", errMissingSegment)
	}
	defer g.release()
	st := &l.stage
	off := pos - g.base
	fend := off + int64(len(b))
	pad := min((fend+pageSize-1)/pageSize*pageSize, g.size) - fend
	st.iov = append(st.iov[:0], b)
	if pad > 0 {
		st.iov = append(st.iov, zeroPage[:pad])
	}
	err := l.hooks.logWrite(g.f, st.iov, off)
	clear(st.iov[:cap(st.iov)])
	if err != nil {
		return ioError("write "+g.path, err)
	}
	return nil
}

// publishRawLocked publishes a checked run of n bytes appended at pos: each
// partition's next queue offset, the write position, the counters.
func (l *commitLog) publishRawLocked(pos, n int64, run *rawRun) {
	for i := range run.parts {
		rp := &run.parts[i]
		rp.p.noteRaw(rp.first, rp.last)
		rp.p.topic.puts += rp.count
		rp.p = nil
	}
	l.rawUnits.add(run.units)
	l.wpos = pos + n
	l.lastRecord = run.lastRecord
	if run.lastStore > l.lastStore {
		l.lastStore = run.lastStore
	}
	l.written.Store(l.wpos)
	if l.pre.ahead && (pos^l.wpos)>>l.pre.shift != 0 {
		kick(l.pre.fillc)
	}
	l.puts += run.count
	l.putBytes += n
}

// noteRaw records that the queue offsets first..last of p are in the log:
// records copied from the master (AppendRaw), or found past a replica's read
// limit at Open (nextPastIndex). Their units are written by the dispatcher.
func (p *partition) noteRaw(first, last int64) {
	if p.next.Load() == 0 && first > 0 && p.min.Load() == 0 {
		// A partition whose first records were deleted by the master's
		// retention before this copy began (a reset replica): it starts
		// where the master's oldest segment does.
		p.min.Store(first)
		p.indexed.Store(first)
	}
	p.next.Store(last + 1)
}

// rawRun is what checkRawLocked found in a run of records: the partitions
// it appends to (first and last queue offset, count), the last record's
// position and the newest store time. Reused (l.mu).
type rawRun struct {
	parts      []rawPart
	units      []rawUnit          // one per record
	idx        map[*partition]int // index into parts once there are more than rawRunScan
	count      int64
	lastRecord int64
	lastStore  int64
}

// rawUnit is what the check of a replica's run found of one record: what
// its index unit needs, so that the receive loop's dispatch from its buffer
// (RaiseReadLimitFrom) does not decode the record a second time.
type rawUnit struct {
	pos   int64
	qoff  int64
	p     *partition
	size  int32  // the unit's size field: the record's size | unitSigFlag (recordTag)
	tag   uint32 // the unit's tag field
	props bool   // the record has properties: the key index reads them from it
}

// rawUnitQueue holds the rawUnits of the runs appended and not yet
// dispatched, in log order (AppendRaw adds, RaiseReadLimitFrom takes).
// Entries are matched to records by position: a missing one (the queue was
// full) or a stale one (the dispatcher goroutine indexed the record from
// the log) only means the record is decoded.
type rawUnitQueue struct {
	mu    sync.Mutex // leaf
	units []rawUnit
	head  int // units[head:] are pending
}

// rawUnitsMax bounds the queue (a slave whose read limit does not move,
// e.g. its master waits for other slaves, keeps appending).
const rawUnitsMax = 1 << 16

func (q *rawUnitQueue) add(us []rawUnit) {
	q.mu.Lock()
	if len(q.units)-q.head+len(us) <= rawUnitsMax {
		q.units = append(q.units, us...)
	}
	q.mu.Unlock()
}

// pending returns the pending entries. Only one caller at a time (dispMu):
// add only appends past them, so they stay valid until done.
func (q *rawUnitQueue) pending() []rawUnit {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.units[q.head:]
}

// done drops the pending entries below pos.
func (q *rawUnitQueue) done(pos int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < len(q.units) && q.units[q.head].pos < pos {
		q.units[q.head].p = nil
		q.head++
	}
	switch {
	case q.head == len(q.units):
		q.units, q.head = q.units[:0], 0
	case q.head >= len(q.units)/2:
		n := copy(q.units, q.units[q.head:])
		clear(q.units[n:])
		q.units, q.head = q.units[:n], 0
	}
}

type rawPart struct {
	p           *partition
	first, last int64
	count       int64
}

// rawRunScan: up to this many partitions a run looks them up by a scan,
// beyond it by a map (a run of a few records to each of many partitions).
const rawRunScan = 16

func (r *rawRun) slot(p *partition) int {
	if len(r.parts) > rawRunScan {
		if i, ok := r.idx[p]; ok {
			return i
		}
		return -1
	}
	for i := range r.parts {
		if r.parts[i].p == p {
			return i
		}
	}
	return -1
}

func (r *rawRun) add(p *partition, first int64) {
	r.parts = append(r.parts, rawPart{p: p, first: first})
	switch n := len(r.parts); {
	case n == rawRunScan+1:
		if r.idx == nil {
			r.idx = make(map[*partition]int)
		}
		clear(r.idx)
		for i := range r.parts {
			r.idx[r.parts[i].p] = i
		}
	case n > rawRunScan+1:
		r.idx[p] = n - 1
	}
}

// checkRawLocked verifies that b is a run of whole valid records starting
// at the write position, inside the active segment, and collects what
// appending it changes. It changes nothing itself (partition states may be
// created: they are empty until the append).
func (l *commitLog) checkRawLocked(b []byte) (*rawRun, error) {
	run := &l.rawRun
	run.parts, run.count, run.lastStore = run.parts[:0], 0, 0
	clear(run.units) // no partition references kept
	run.units = run.units[:0]
	at := l.wpos
	end := l.active.end()
	slot := -1
	be := binary.BigEndian
	for len(b) > 0 {
		// One pass over each record (protocol.SplitRecordTopic: header,
		// layout, CRC-32C); the few fixed fields needed are read at their
		// offsets.
		rec, tb, props, err := protocol.SplitRecordTopic(b)
		switch {
		case err == nil:
		case errors.Is(err, protocol.ErrBlank):
			return nil, fmt.Errorf("%w: BLANK inside a run of records at %d", ErrRawBad, at)
		case errors.Is(err, protocol.ErrShortRecord) && len(b) < protocol.BlankMinSize:
			return nil, fmt.Errorf("%w: %d stray bytes at %d", ErrRawBad, len(b), at)
		case errors.Is(err, protocol.ErrShortRecord):
			size, _, _ := protocol.PeekRecord(b)
			return nil, fmt.Errorf("%w: record of %d bytes at %d, %d given", ErrRawBad, size, at, len(b))
		default:
			return nil, fmt.Errorf("%w: at %d: %v", ErrRawBad, at, err)
		}
		size := len(rec)
		if phys := int64(be.Uint64(rec[protocol.OffPhysicalOffset:])); phys != at {
			return nil, fmt.Errorf("%w: record of %d says physical offset %d", ErrRawBad, at, phys)
		}
		part := int32(be.Uint32(rec[protocol.OffPartition:]))
		qoff := int64(be.Uint64(rec[protocol.OffQueueOffset:]))
		stime := int64(be.Uint64(rec[protocol.OffStoreTime:]))
		if rem := end - at; !(int64(size) == rem || int64(size)+protocol.BlankMinSize <= rem) {
			return nil, fmt.Errorf("%w: record of %d bytes at %d does not fit the %d left in the segment (maxSegmentSize differs from the master's?)",
				ErrRawBad, size, at, rem)
		}
		topic := unsafe.String(unsafe.SliceData(tb), len(tb))
		p := l.appendParts.get(topic, part)
		if p == nil {
			if p = l.appendPartitionLocked(string(tb), part); p == nil {
				return nil, fmt.Errorf("%w: bad topic at %d", ErrRawBad, at)
			}
		}
		if slot < 0 || run.parts[slot].p != p {
			slot = run.slot(p)
			if slot < 0 {
				run.add(p, qoff)
				slot = len(run.parts) - 1
			}
		}
		rp := &run.parts[slot]
		rp.last = qoff
		rp.count++
		tag, flag := recordTag(props)
		run.units = append(run.units, rawUnit{pos: at, qoff: qoff, p: p, size: int32(uint32(size) | flag), tag: tag, props: len(props) > 0})
		run.count++
		run.lastRecord = at
		run.lastStore = max(run.lastStore, stime)
		at += int64(size)
		b = b[size:]
	}
	return run, nil
}

// SyncRaw makes everything appended so far durable (one write-out and one
// fdatasync) and returns the durable position: a slave calls it once per
// batch received, then reports the position to its master.
func (s *Store) SyncRaw() (int64, error) {
	if s.isClosed.Load() {
		return 0, ErrClosed
	}
	if err := s.clog.flushOnce(); err != nil {
		return s.clog.flushedPos(), err
	}
	return s.clog.flushedPos(), nil
}

// ReplicationGate holds the group-commit rounds of a master until enough
// slaves have them durable (broker/ha). Hold is called by the flusher once
// per round, after the round is durable locally, with the commit-log
// position the round ends at; the gate calls release exactly once: nil when
// replicated, else an error wrapping ErrNotReplicated (the round's appends
// are answered 503). Hold must not block.
type ReplicationGate interface {
	Hold(end int64, release func(error))
}

// SetReplicationGate installs (nil: removes) the gate. Only sync-flush mode
// has rounds; in async-flush mode the gate is never called.
func (s *Store) SetReplicationGate(g ReplicationGate) {
	if g == nil {
		s.clog.gate.Store(nil)
		return
	}
	s.clog.gate.Store(&g)
}

// complete ends the round with err and wakes its appenders.
func (f *Flush) complete(err error) {
	f.err = err
	close(f.done)
}

// WaitVisible returns a channel closed once the visible limit passes pos
// (already closed if it has). Cheap when nobody waits: onVisible only takes
// the lock while a waiter is armed.
func (s *Store) WaitVisible(pos int64) <-chan struct{} {
	return s.visWait.Wait(pos, s.clog.visibleLimit)
}

// WaitWritten returns a channel closed once WrittenPos passes pos (already
// closed if it has): WaitVisible for ReadRawWritten. In async-flush mode the
// two are the same.
func (s *Store) WaitWritten(pos int64) <-chan struct{} {
	if !s.clog.sync {
		return s.WaitVisible(pos)
	}
	return s.wrWait.Wait(pos, s.WrittenPos)
}

// Dir is the store's data directory.
func (s *Store) Dir() string { return s.cfg.Dir }
