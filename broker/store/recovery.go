package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/metaqgo/metaq/protocol"
	"golang.org/x/sys/unix"
)

// Recovery (run by Open before any goroutine starts).
//
//  1. abort present (the last run did not Close) or checkpoint missing/bad →
//     crash recovery: scan the commit log from the checkpoint's flushed
//     position (from the oldest segment without a checkpoint), verifying
//     every record's magic, size, CRC and position; the first bad record or
//     the first zero header ends the log. The rest of that segment is zeroed
//     and later segments are deleted, so stale bytes can never come back as
//     records. What was cut is logged exactly (bytes, record headers, the bad
//     record's size; index units, and of those the messages lost: records
//     below the checkpoint's flushed position). A segment file shorter than
//     its place in the log, followed only by empty segments, is a torn tail
//     (loadSegments, repairTornTail), not a gap.
//     After a clean stop the checkpoint is trusted once a cheap check passes
//     (the last record's CRC, zeros right after the end); otherwise crash
//     recovery runs.
//  2. Index units pointing at or past min(checkpoint dispatched, log end) are
//     cut (zeroed); the commit log from there to the end is re-dispatched,
//     which rebuilds the missing units and key-index entries. Per-partition
//     max offsets come from the rebuilt indexes, min offsets from the oldest
//     segment.
//  3. The recovered tail is fsynced and a fresh checkpoint written.
func (s *Store) recover() error {
	_, err := os.Stat(s.abortPath())
	crashed := err == nil
	rkind, rpos, reset, err := s.takeReset() // raw_reset.go
	if err != nil {
		return err
	}
	ck, ckOK := s.readCheckpoint()
	wm, wmOK := s.openWatermark(reset)
	if !crashed {
		f, err := os.OpenFile(s.abortPath(), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("store: create abort marker: %w", err)
		}
		f.Close()
		if err := syncDir(s.cfg.Dir); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}

	segs, torn, err := s.clog.loadSegments()
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		base := int64(0)
		if ckOK {
			base = ck.flushed
		}
		if reset && rkind == ResetWipe {
			base = rpos
		}
		g, err := createSegment(s.logDir, base, s.cfg.SegmentSize, s.hooks)
		if err != nil {
			return err
		}
		segs = []*segment{g}
	}
	s.clog.setSegments(segs)
	logMin := segs[0].base
	// No record can lie past the last segment's place in the log (its file,
	// or a full segment when the file was torn short): an index unit
	// pointing beyond is damaged, not a unit of a record lost with the log's
	// tail.
	last := segs[len(segs)-1]
	extent := last.base + max(last.size, s.cfg.SegmentSize)
	// What the last run's indexes covered (its checkpoint), kept across a
	// truncation, which rebuilds every index: a replica's limit starts no
	// lower (below).
	served := int64(-1)
	if ckOK {
		served = ck.dispatched
	}
	if reset && rkind == ResetTruncate {
		if rpos < logMin {
			rpos = logMin
		}
		cut, err := s.clog.truncateLog(rpos)
		if err != nil {
			return err
		}
		s.log.Warn("replication: truncated the commit log at the divergence point from the master's history",
			"at", rpos, "bytesCut", cut.bytes, "messagesCut", cut.records, "segmentsDeleted", cut.segments)
		crashed, ckOK = true, false // rescan the log and rebuild every index
	}

	end, lastRec, scanned := int64(0), int64(-1), false
	if !crashed && ckOK && torn < 0 && s.clog.cleanTailOK(ck) {
		end, lastRec = ck.flushed, ck.lastRecord
	} else {
		if !crashed && ckOK && torn < 0 {
			s.log.Warn("recovery: checkpoint does not match the commit log tail; scanning")
		}
		end, lastRec, err = s.clog.recoverLog(ck, ckOK, torn)
		if err != nil {
			return err
		}
		scanned = true
	}
	lastStore := int64(0)
	if lastRec >= 0 {
		if t, ok := s.storeTimeAt(lastRec, 1); ok {
			lastStore = t
		}
	}
	s.clog.setTail(end, lastRec, lastStore)

	// Indexes: trust units below cut, rebuild the rest.
	cut := end
	if ckOK && ck.dispatched < cut {
		cut = ck.dispatched
	}
	if !ckOK {
		cut = logMin
	}
	cut = max(cut, logMin)
	durable := int64(-1) // commit-log bytes below this were claimed durable
	if ckOK {
		durable = ck.flushed
	}
	ix, err := s.recoverIndexes(recoveryBounds{cut: cut, end: end, extent: extent}, durable, crashed || !ckOK)
	if err != nil {
		return err
	}
	redo, rebuilt := ix.redo, ix.rebuilt
	s.reportIndexCut(ix, end, durable)
	if s.keys, err = openKeyIndex(s, cut); err != nil {
		return err
	}
	s.dispatched.Store(cut)
	limit := end
	if s.cfg.Replica {
		// A slave's read limit, before anything is indexed (watermark.go):
		// what the indexes of the last run covered (served already; after
		// a truncation, what of it is left: a former master cut at its
		// divergence point has no watermark file), or the stored
		// watermark if higher, never past the log.
		limit = max(cut, served)
		if wmOK {
			limit = max(limit, wm)
		}
		limit = min(limit, end)
		s.clog.readLimit.Store(limit)
	}
	s.dispMu.Lock() // uncontended: nothing else runs yet; disp's rule
	err = s.disp.run(limit)
	s.disp.takeFired() // nobody waits before Open returns
	s.dispMu.Unlock()
	if err != nil {
		return fmt.Errorf("store: recovery re-dispatch: %w", err)
	}
	for _, p := range s.allPartitions() {
		s.refreshMin(p)
		p.next.Store(p.indexed.Load())
	}
	if d := s.dispatched.Load(); d < end {
		if err := s.nextPastIndex(d, end); err != nil {
			return err
		}
	}
	if redo > 0 || rebuilt > 0 || end > cut || scanned && end > logMin {
		s.log.Info("recovery: done", "logEnd", end, "redispatchedFrom", cut, "indexUnitsRedone", redo, "indexUnitsRebuilt", rebuilt,
			"crashed", crashed, "readLimit", s.ReadLimit())
	}
	if err := s.checkpoint(); err != nil {
		return err
	}
	if reset {
		return s.doneReset()
	}
	return nil
}

// loadSegments opens the commit-log segments, oldest first. Empty files
// (a crash while creating one) are removed. A segment that ends before the
// next one starts is a torn tail when every later segment is empty (the
// preallocated successor, never written): see repairTornTail; its old end is
// returned as torn (-1 when none) and recovery scans that segment. A gap
// followed by segments holding data is an error the operator must look at.
func (l *commitLog) loadSegments() (segs []*segment, torn int64, err error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, -1, fmt.Errorf("store: %w", err)
	}
	fail := func(err error) ([]*segment, int64, error) {
		for _, g := range segs {
			if g != nil {
				g.release()
			}
		}
		return nil, -1, err
	}
	for _, e := range ents {
		base, ok := parseSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		g, err := openSegment(filepath.Join(l.dir, e.Name()), base)
		if err != nil {
			return fail(err)
		}
		if g.size == 0 {
			os.Remove(g.path)
			continue
		}
		segs = append(segs, g)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	torn = -1
	for i := 1; i < len(segs); i++ {
		if segs[i].base == segs[i-1].end() {
			continue
		}
		if segs[i].base > segs[i-1].end() && allEmpty(segs[i:]) {
			torn = segs[i-1].end()
			if segs, err = l.repairTornTail(segs, i); err != nil {
				return fail(err)
			}
			break
		}
		what := "the next segment starts at"
		if segs[i].base > segs[i-1].end() {
			what = "the next segment, which holds data, starts at"
		}
		return fail(fmt.Errorf("store: commit log has a gap: %s ends at %d but %s %d (move the later segments away or restore the file)",
			segs[i-1].path, segs[i-1].end(), what, segs[i].base))
	}
	return segs, torn, nil
}

// allEmpty reports whether no segment of segs holds a record: records are
// written from a segment's first byte on, so an empty first 64 KiB means
// none was (the preallocated next segment, maybe zero-filled).
func allEmpty(segs []*segment) bool {
	for _, g := range segs {
		if nonZeroPrefix(g.data[:min(g.size, 64<<10)]) > 0 {
			return false
		}
	}
	return true
}

// repairTornTail handles a torn tail: segs[i-1], the segment being written,
// lost its end (a truncated file: a torn write, a copy cut short, an
// operator's surgery) and segs[i:] are empty preallocated successors. The
// short segment is extended back to its place in the log (its successor's
// base) with fallocate, so the empty successors stay usable; the scan that
// follows cuts the partial record at the old end. When it cannot be
// extended (disk full), the empty successors are deleted instead and the
// short segment stays last (the log rolls at its end). Either way it is
// logged with the sizes involved.
func (l *commitLog) repairTornTail(segs []*segment, i int) ([]*segment, error) {
	g := segs[i-1]
	want := segs[i].base - g.base
	oldSize, path, base := g.size, g.path, g.base
	g.release()
	segs[i-1] = nil
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		if err = l.hooks.fallocate(f, want); err == nil {
			err = l.hooks.fdatasync(f)
		}
		f.Close()
	}
	if err == nil {
		if g, err = openSegment(path, base); err != nil {
			return segs[:i-1], err
		}
		segs[i-1] = g
		l.log.Warn("recovery: commit-log segment shorter than its place in the log (torn tail); extended it back, the partial record at its old end is cut by the scan",
			"segment", path, "size", oldSize, "extendedTo", want, "tornAt", base+oldSize)
		return segs, nil
	}
	l.log.Warn("recovery: commit-log segment shorter than its place in the log (torn tail) and it cannot be extended; deleting the empty segments after it",
		"segment", path, "size", oldSize, "tornAt", base+oldSize, "err", err)
	if g, err = openSegment(path, base); err != nil {
		return segs[:i-1], err
	}
	segs[i-1] = g
	for _, h := range segs[i:] {
		os.Remove(h.path)
		h.release()
	}
	if err := syncDir(l.dir); err != nil {
		return segs[:i], ioError("fsync dir", err)
	}
	return segs[:i], nil
}

// cleanTailOK checks, after a clean stop, that the commit log ends where the
// checkpoint says: the last record verifies, nothing follows it. When it
// does, empty segments after the end (none after a clean Close) are removed.
func (l *commitLog) cleanTailOK(ck checkpointData) bool {
	sl := l.segs.Load()
	last := sl.segs[len(sl.segs)-1]
	if ck.flushed < sl.segs[0].base || ck.flushed > last.end() {
		return false
	}
	if g := sl.find(ck.flushed); g != nil {
		if size, magic, ok := protocol.PeekRecord(g.data[ck.flushed-g.base:]); ok && (size != 0 || magic != 0) {
			return false
		}
		for _, h := range sl.segs {
			if h.base > g.base {
				if size, magic, _ := protocol.PeekRecord(h.data); size != 0 || magic != 0 {
					return false
				}
			}
		}
	}
	if ck.lastRecord >= 0 {
		g := sl.find(ck.lastRecord)
		if g == nil {
			return false
		}
		rec, n, err := protocol.DecodeRecord(g.data[ck.lastRecord-g.base:], 0)
		if err != nil || rec.PhysicalOffset != ck.lastRecord {
			return false
		}
		if e := ck.lastRecord + int64(n); e != ck.flushed && !(ck.flushed == g.end() && blankTo(g, e)) {
			return false
		}
	}
	return l.dropSegmentsAfter(ck.flushed) == nil
}

// blankTo reports whether a BLANK covering [pos, end of g) starts at pos.
func blankTo(g *segment, pos int64) bool {
	if pos == g.end() {
		return true
	}
	size, magic, ok := protocol.PeekRecord(g.data[pos-g.base:])
	return ok && magic == protocol.BlankMagic && protocol.BlankEnds(size, g.end()-pos)
}

// recoverLog scans from the checkpoint and truncates at the first bad record.
// torn (>= 0) is where a torn tail was found (loadSegments): the scan then
// starts no later than that segment's base, since the checkpoint may claim
// bytes the file no longer has.
func (l *commitLog) recoverLog(ck checkpointData, ckOK bool, torn int64) (end, lastRec int64, err error) {
	sl := l.segs.Load()
	first, last := sl.segs[0], sl.segs[len(sl.segs)-1]
	start := first.base
	lastRec = -1
	if ckOK && ck.flushed >= first.base && ck.flushed <= last.end() {
		start, lastRec = ck.flushed, ck.lastRecord
	} else if ckOK {
		l.log.Warn("recovery: checkpoint position outside the commit log; scanning from the oldest segment",
			"checkpoint", ck.flushed, "logStart", first.base, "logEnd", last.end())
	}
	if torn >= 0 {
		if g := sl.find(torn - 1); g != nil && g.base < start {
			start = g.base
			if lastRec >= start {
				lastRec = -1 // unknown until the scan finds one
			}
		}
	}
	pos := start
	reason := "end of log"
	records := 0
	for {
		g := sl.find(pos)
		if g == nil {
			break // exactly at the end of the last segment
		}
		n, why := validRecordAt(g, pos, l.cfg.BrokerID)
		if why == "blank" {
			pos = g.end()
			continue
		}
		if n == 0 {
			reason = why
			break
		}
		lastRec = pos
		pos += int64(n)
		records++
	}
	end = pos
	cut, err := l.truncateLog(end)
	if err != nil {
		return 0, 0, err
	}
	if cut.bytes > 0 || cut.segments > 0 {
		attrs := []any{"at", end, "reason", reason, "bytesCut", cut.bytes, "recordsCut", cut.records,
			"segmentsDeleted", cut.segments, "scannedFrom", start, "recordsVerified", records}
		if cut.firstSize > 0 {
			attrs = append(attrs, "cutRecordSize", cut.firstSize, "cutRecordBytesPresent", min(cut.firstSize, cut.firstPresent))
		}
		l.log.Warn("recovery: truncated the commit log at the first bad record", attrs...)
	} else if records > 0 {
		l.log.Info("recovery: commit log verified", "from", start, "end", end, "records", records)
	}
	// What was recovered past the checkpoint may only be in the page cache.
	if err := l.syncRange(start, end); err != nil {
		return 0, 0, err
	}
	return end, lastRec, nil
}

// validRecordAt verifies the record at pos. It returns its size, or 0 and
// why not; why is "blank" for a BLANK that correctly ends the segment.
func validRecordAt(g *segment, pos int64, brokerID int) (int, string) {
	off := pos - g.base
	b := g.data[off:]
	if size, magic, ok := protocol.PeekRecord(b); ok && magic == protocol.BlankMagic {
		if protocol.BlankEnds(size, g.size-off) {
			return 0, "blank"
		}
		return 0, "blank filler does not end the segment"
	}
	rec, n, err := protocol.DecodeRecord(b, 0)
	switch {
	case err == protocol.ErrShortRecord && len(b) >= protocol.BlankMinSize:
		return 0, "record runs past the segment end (torn)"
	case err == protocol.ErrShortRecord:
		return 0, "fewer than 8 bytes left in the segment"
	case err == protocol.ErrBadMagic && binary.BigEndian.Uint64(b) == 0:
		return 0, "end of data (zeros)"
	case err != nil:
		return 0, err.Error()
	case rec.PhysicalOffset != pos || rec.MsgID&(1<<48-1) != pos:
		return 0, "record does not belong at this position (stale)"
	case off+int64(n) != g.size && g.size-off-int64(n) < protocol.BlankMinSize:
		return 0, "record leaves less than a blank filler"
	}
	return n, ""
}

// logCut describes what truncateLog removed.
type logCut struct {
	bytes        int64 // written (non-zero) bytes cut: up to the last non-zero byte in each cut region
	records      int   // record headers found in the cut bytes (the bad record first)
	segments     int   // later segments deleted that held data
	firstSize    int64 // the bad record's declared size (0 when its header is unreadable)
	firstPresent int64 // bytes of it present before the data ends
}

// truncateLog zeroes the commit log from end to the end of its segment and
// deletes later segments, reporting exactly what was cut.
func (l *commitLog) truncateLog(end int64) (cut logCut, err error) {
	sl := l.segs.Load()
	if g := sl.find(end); g != nil {
		b := g.data[end-g.base:]
		cut.bytes = writtenLen(b)
		cut.records, cut.firstSize = countHeaders(b[:cut.bytes])
		cut.firstPresent = cut.bytes
		if err := zeroTail(g, end); err != nil {
			return logCut{}, err
		}
	}
	for _, h := range sl.segs {
		if h.base > end {
			// Empty segments (the preallocated next one) are not "cut".
			if n := writtenLen(h.data); n > 0 {
				r, _ := countHeaders(h.data[:n])
				cut.bytes += n
				cut.records += r
				cut.segments++
			}
		}
	}
	return cut, l.dropSegmentsAfter(end)
}

// writtenLen returns how many bytes at the start of b were written: up to
// the last non-zero byte before the first 64 KiB chunk that is all zeros.
func writtenLen(b []byte) int64 {
	n := nonZeroPrefix(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return n
}

// countHeaders counts the record headers that follow one another from the
// start of b (a cut region), stopping at the first implausible one; it
// also returns the first one's declared size (0 when unreadable).
func countHeaders(b []byte) (n int, firstSize int64) {
	for len(b) > 0 {
		size, magic, ok := protocol.PeekRecord(b)
		if !ok || magic != protocol.RecordMagic || size < protocol.RecordOverhead {
			if n == 0 && len(b) > 0 {
				n = 1 // bytes that are not a readable header: one torn record
			}
			return n, firstSize
		}
		if n == 0 {
			firstSize = int64(size)
		}
		n++
		if size > len(b) {
			return n, firstSize
		}
		b = b[size:]
	}
	return n, firstSize
}

// dropSegmentsAfter deletes every segment that starts after pos (the
// segment containing pos, or ending exactly at pos, stays).
func (l *commitLog) dropSegmentsAfter(pos int64) error {
	l.segsMu.Lock()
	defer l.segsMu.Unlock()
	segs := l.segs.Load().segs
	keep := len(segs)
	for i, g := range segs {
		if g.base > pos {
			keep = i
			break
		}
	}
	if keep == len(segs) {
		return nil
	}
	if keep == 0 { // cannot happen (pos >= the oldest base); keep one anyway
		keep = 1
	}
	for _, g := range segs[keep:] {
		os.Remove(g.path)
		g.release()
	}
	l.setSegmentsLocked(append([]*segment(nil), segs[:keep]...))
	return ioError("fsync dir", syncDir(l.dir))
}

// nonZeroPrefix estimates how many bytes at the start of b were written: up
// to the first 64 KiB chunk that is all zeros.
func nonZeroPrefix(b []byte) int64 {
	const chunk = 64 << 10
	var n int64
	for len(b) > 0 {
		c := b[:min(chunk, len(b))]
		if allZero(c) {
			break
		}
		n += int64(len(c))
		b = b[len(c):]
	}
	return n
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// zeroTail zeroes g from pos to its end, keeping the blocks allocated
// (FALLOC_FL_ZERO_RANGE; else punch + re-allocate; else write zeros), and
// syncs it.
func zeroTail(g *segment, pos int64) error {
	off := pos - g.base
	n := g.size - off
	if n <= 0 {
		return nil
	}
	fd := int(g.f.Fd())
	if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, off, n); err != nil {
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err == nil {
			if err := unix.Fallocate(fd, 0, off, n); err != nil {
				return ioError("re-allocate segment tail", err)
			}
		} else {
			clear(g.data[off:])
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return ioError("fdatasync "+g.path, err)
	}
	return nil
}

// indexCut counts the index units recovery cut.
type indexCut struct {
	redo    int64 // pointed below the log end: rebuilt by the re-dispatch
	pastEnd int64 // pointed at or past the log end: their records are gone
	// Of pastEnd, those whose records lay below the position the checkpoint
	// claimed durable: acknowledged messages lost (sync flush), not merely
	// records that never reached the disk.
	durable int64
	parts   int // partitions with pastEnd units
	// damaged: units past the kept ones that failed verification (not a
	// unit of a record of their partition), cut; the re-dispatch rebuilds
	// those whose records lie at or past the cut. Not in redo or pastEnd.
	damaged int64
	// rebuilt: damaged units below the cut rebuilt from the commit log
	// (they would otherwise have ended the kept units).
	rebuilt int64
}

// reportIndexCut logs what recovery cut from the indexes, saying what it
// means: units past the recovered end whose records were never claimed
// durable are not acknowledged messages in sync mode (the async-flush
// window otherwise); those below the checkpoint's flushed position are
// messages lost.
func (s *Store) reportIndexCut(ix indexCut, end, durable int64) {
	if ix.pastEnd == 0 {
		return
	}
	if ix.durable > 0 {
		s.log.Error("recovery: cut index units whose records, once flushed, are no longer in the commit log (messages lost)",
			"messages", ix.durable, "unitsCut", ix.pastEnd, "partitions", ix.parts, "logEnd", end, "checkpointFlushed", durable)
		return
	}
	what := "the records were never flushed (not acknowledged in sync-flush mode; in async mode within the unflushed window)"
	if durable < 0 {
		what = "no valid checkpoint says whether they were flushed"
	}
	s.log.Warn("recovery: cut index units pointing past the recovered end of the commit log; "+what,
		"unitsCut", ix.pastEnd, "partitions", ix.parts, "logEnd", end, "checkpointFlushed", durable)
}

// recoveryBounds are the log positions recovery judges index units by.
type recoveryBounds struct {
	cut    int64 // units whose records lie below it are kept, the rest cut
	end    int64 // the recovered end of the log
	extent int64 // the end of the segment files found: no record lies past it
}

// recoverIndexes loads every partition's index files, keeps the units below
// b.cut and cuts the rest, counting them (indexCut): pointing below b.end
// (to be re-dispatched) or at or past it, and of those below durable; or
// damaged.
func (s *Store) recoverIndexes(b recoveryBounds, durable int64, cutAlways bool) (ix indexCut, err error) {
	topics, err := os.ReadDir(s.indexDir)
	if err != nil {
		return ix, fmt.Errorf("store: %w", err)
	}
	for _, te := range topics {
		if !te.IsDir() || !validTopic(te.Name()) {
			continue
		}
		parts, err := os.ReadDir(filepath.Join(s.indexDir, te.Name()))
		if err != nil {
			return ix, fmt.Errorf("store: %w", err)
		}
		for _, pe := range parts {
			id, err := strconv.ParseInt(pe.Name(), 10, 32)
			if !pe.IsDir() || err != nil || id < 0 || strconv.Itoa(int(id)) != pe.Name() {
				continue
			}
			p := s.partition(te.Name(), int32(id), true)
			if err := s.loadIndexFiles(p); err != nil {
				return ix, err
			}
			pc, err := s.recoverPartition(p, b, durable, cutAlways)
			if err != nil {
				return ix, fmt.Errorf("store: recover index %s: %w", p.dir, err)
			}
			ix.redo += pc.redo
			ix.pastEnd += pc.pastEnd
			ix.durable += pc.durable
			ix.damaged += pc.damaged
			ix.rebuilt += pc.rebuilt
			if pc.pastEnd > 0 {
				ix.parts++
			}
		}
	}
	if err := s.files.syncDirty(s.indexDir); err != nil {
		return ix, err
	}
	return ix, nil
}

func (s *Store) recoverPartition(p *partition, b recoveryBounds, durable int64, cutAlways bool) (ix indexCut, err error) {
	cut, end := b.cut, b.end
	first, stop := p.unitSpan(s.cfg.IndexFileSize)
	if first == stop {
		return ix, nil
	}
	start, err := s.firstUsedUnit(p, first, stop)
	if err != nil {
		return ix, err
	}
	if start == stop {
		// No unit was ever written (a crash between creating an index file
		// and writing into it): the stream starts at its first file and the
		// re-dispatch below rebuilds it — not at stop, which would hide the
		// rebuilt offsets below it as "too small".
		start = first
	}
	count, err := s.recoveryCount(p, start, stop, b, &ix)
	if err != nil {
		return ix, err
	}
	// Count (for the report) the used units being cut.
	var buf [readUnitBatch * unitSize]byte
	for q := count; q < stop; {
		n, err := s.readUnits(p, q, buf[:min(stop-q, readUnitBatch)*unitSize])
		if err != nil || n == 0 {
			break
		}
		done := false
		for i := 0; i < n; i += unitSize {
			phys, size, _ := getUnit(buf[i:])
			if size <= 0 && phys == 0 {
				done = true
				break
			}
			switch {
			case !s.plausibleUnit(phys, size, 0, b.extent):
				ix.damaged++
			case phys < end:
				ix.redo++
			case phys < durable:
				ix.pastEnd++
				ix.durable++
			default:
				ix.pastEnd++
			}
		}
		if done {
			break
		}
		q += int64(n / unitSize)
	}
	if ix.damaged > 0 {
		s.log.Warn("recovery: cut index units that failed verification after the kept ones; the re-dispatch rebuilds those whose records lie past the cut",
			"topic", p.topic.name, "partition", p.id, "from", count, "unitsDamaged", ix.damaged, "redispatchedFrom", cut)
	}
	if cutAlways || ix.pastEnd+ix.redo+ix.damaged > 0 {
		if err := s.cutUnits(p, count); err != nil {
			return ix, err
		}
	}
	p.indexed.Store(count)
	p.tailMu.Lock()
	s.setTailStartLocked(p, count)
	p.tailMu.Unlock()
	p.min.Store(start)
	return ix, nil
}

// Recovery's verdict on one index unit (recoverPartition).
type unitVerdict uint8

const (
	unitKept    unitVerdict = iota // its record lies below the cut
	unitCut                        // empty, or its record lies at or past the cut (or past the log end)
	unitDamaged                    // not the unit of a record of this partition
)

// recoveryUnit judges unit q. Every unit must be plausible (plausibleUnit
// against b.extent: a unit pointing past the recovered end but within the
// segment files found is a unit of a record lost with the log's tail); with
// full, a unit pointing into the log must also match its record's header
// (topic, partition, queue offset, size: one read of the log). An all-zero
// unit is empty (unitCut).
func (s *Store) recoveryUnit(p *partition, q int64, b recoveryBounds, full bool) (v unitVerdict, phys int64, size int32, err error) {
	phys, size, _, err = s.readUnit(p, q)
	switch {
	case err != nil:
		return unitKept, 0, 0, err // as searchUnits: a missing file counts as below the cut
	case size == 0 && phys == 0:
		return unitCut, 0, 0, nil
	case !s.plausibleUnit(phys, size, 0, b.extent):
		return unitDamaged, phys, size, nil
	case full && phys >= s.clog.minPos() && phys+int64(size) <= b.end && !s.unitMatchesRecord(p, q, phys, size):
		return unitDamaged, phys, size, nil
	case phys < b.cut:
		return unitKept, phys, size, nil
	}
	return unitCut, phys, size, nil
}

// unitMatchesRecord reports whether the record at phys is p's record q of
// size bytes (its header; not its CRC: a record failing its CRC is still
// the one its unit names).
func (s *Store) unitMatchesRecord(p *partition, q, phys int64, size int32) bool {
	g := s.clog.acquireSegment(phys)
	if g == nil {
		return false
	}
	defer g.release()
	off := phys - g.base
	return off+int64(size) <= g.size && headerMatches(g.data[off:off+int64(size)], p, q)
}

// recoverySearch returns the first unit in [lo, hi) at or past the cut: a
// binary search in which a damaged unit takes the verdict of the next
// undamaged one (within repairWindow units; none: cut). A partition's units
// follow the log's order, so when that one is kept the damaged one lies
// below the cut too. Damaged units it met are added to seen.
func (s *Store) recoverySearch(p *partition, lo, hi int64, b recoveryBounds, full bool, seen map[int64]struct{}) (int64, error) {
	var firstErr error
	for lo < hi {
		mid := lo + (hi-lo)/2
		v, err := unitCut, error(nil)
		for j := mid; j < min(hi, mid+repairWindow); j++ {
			if v, _, _, err = s.recoveryUnit(p, j, b, full); err != nil || v != unitDamaged {
				break
			}
			seen[j] = struct{}{}
		}
		if v == unitDamaged {
			v = unitCut
		}
		if err != nil && err != errGone && firstErr == nil {
			firstErr = err
		}
		if v == unitCut {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, firstErr
}

// recoveryCount returns how many of p's units (from start) recovery keeps:
// those whose records lie below the cut. The binary search trusts a unit
// that is plausible; the two units at the result are then checked against
// their records, and if either fails the search is redone checking every
// unit it probes (one log read each). Damaged units below the cut that end
// the kept ones are rebuilt from the commit log (rebuildUnits), so one bad
// unit never cuts the good ones after it: their records lie below the cut
// and are not re-dispatched. Damaged units met among the kept ones are left
// to the read path (repair.go) and logged.
func (s *Store) recoveryCount(p *partition, start, stop int64, b recoveryBounds, ix *indexCut) (int64, error) {
	seen := make(map[int64]struct{})
	count, err := s.recoverySearch(p, start, stop, b, false, seen)
	if err != nil {
		return 0, err
	}
	ok := true
	if count > start {
		v, _, _, err := s.recoveryUnit(p, count-1, b, true)
		ok = err != nil || v == unitKept
	}
	if ok && count < stop {
		v, _, _, err := s.recoveryUnit(p, count, b, true)
		ok = err != nil || v == unitCut
	}
	if !ok {
		if count, err = s.recoverySearch(p, start, stop, b, true, seen); err != nil {
			return 0, err
		}
	}
	for count < stop {
		v, _, _, err := s.recoveryUnit(p, count, b, true)
		if err != nil || v != unitDamaged {
			break
		}
		n, whole, err := s.rebuildUnits(p, start, count, stop, b)
		if err != nil {
			return 0, err
		}
		ix.rebuilt += n
		count += n
		if !whole {
			break
		}
	}
	var left []int64
	for q := range seen {
		if q < count {
			if v, _, _, err := s.recoveryUnit(p, q, b, true); err == nil && v == unitDamaged {
				left = append(left, q)
			}
		}
	}
	if len(left) > 0 {
		sort.Slice(left, func(i, j int) bool { return left[i] < left[j] })
		s.log.Warn("recovery: index units failed verification among the kept ones; kept the units around them (reads rebuild them from the commit log)",
			"topic", p.topic.name, "partition", p.id, "offsets", left)
	}
	return count, nil
}

// rebuildUnits rebuilds the run of damaged units from q (q-1 is kept, or q
// is the first unit) from the commit log: it scans the log from the end of
// unit q-1's record (the oldest segment without one) up to the record of the
// next undamaged unit or the cut, and writes the units found for queue
// offsets q, q+1, ... . It returns how many it wrote from q on without a
// gap (the rest of the run lies at or past the cut: the re-dispatch
// rebuilds it) and whether that was the whole run.
func (s *Store) rebuildUnits(p *partition, start, q, stop int64, b recoveryBounds) (n int64, whole bool, err error) {
	physLo, physHi := s.clog.minPos(), b.cut
	if q > start {
		if phys, size, _, err := s.readUnit(p, q-1); err == nil {
			physLo = max(physLo, phys+int64(size))
		}
	}
	j := q + 1
	for lim := min(stop, q+repairWindow); j < lim; j++ {
		v, phys, _, err := s.recoveryUnit(p, j, b, true)
		if err != nil {
			break
		}
		if v == unitDamaged {
			continue
		}
		if v == unitCut && phys > 0 {
			physHi = min(physHi, phys)
		}
		break
	}
	if physLo >= physHi {
		return 0, false, nil
	}
	units := make([]byte, (j-q)*unitSize)
	found := make([]bool, j-q)
	scanned, _, err := s.scanPartition(p, physLo, physHi, q, j, units, found)
	for n < int64(len(found)) && found[n] {
		n++
	}
	if n > 0 {
		if werr := s.writeUnits(p, q, units[:n*unitSize]); werr != nil {
			return 0, false, werr
		}
	}
	s.counters.indexRepairs.Add(1)
	attrs := []any{"topic", p.topic.name, "partition", p.id, "from", q, "to", q + n, "unitsRebuilt", n,
		"damagedRun", j - q, "logBytesScanned", scanned}
	if err != nil {
		s.log.Error("recovery: index units failed verification; the commit log scan to rebuild them stopped at a bad record",
			append(attrs, "err", err)...)
		return n, false, nil
	}
	s.log.Warn("recovery: index units failed verification; rebuilt them from the commit log", attrs...)
	return n, n == j-q, nil
}

// firstUsedUnit returns the first non-empty unit in [first, stop) (or stop).
func (s *Store) firstUsedUnit(p *partition, first, stop int64) (int64, error) {
	var buf [readUnitBatch * unitSize]byte
	for q := first; q < stop; {
		n, err := s.readUnits(p, q, buf[:min(stop-q, readUnitBatch)*unitSize])
		if errors.Is(err, errGone) {
			// Missing file in the middle: continue with the next file.
			q = (s.fileBase(q) + s.cfg.IndexFileSize) / unitSize
			continue
		}
		if err != nil {
			return 0, err
		}
		for i := 0; i < n; i += unitSize {
			if _, size, _ := getUnit(buf[i:]); size > 0 {
				return q + int64(i/unitSize), nil
			}
		}
		q += int64(n / unitSize)
	}
	return stop, nil
}

// refreshMin recomputes p's min offset: its first unit pointing into the
// oldest segment (or its readable count when every unit is older).
func (s *Store) refreshMin(p *partition) int64 {
	logMin := s.clog.minPos()
	readable := p.indexed.Load()
	lo := p.min.Load()
	first, stop := p.unitSpan(s.cfg.IndexFileSize)
	if first == stop {
		return lo
	}
	if lo < first {
		lo = first
	}
	if lo >= readable {
		return p.min.Load()
	}
	// Skip leading empty units (a rebuilt stream may start mid-file).
	if _, size, _, err := s.readUnit(p, lo); err != nil || size <= 0 {
		if lo, err = s.firstUsedUnit(p, lo, readable); err != nil {
			return p.min.Load()
		}
	}
	m, err := s.searchUnits(p, lo, readable, func(phys int64, size int32) bool {
		return size > 0 && phys >= logMin
	})
	if err != nil {
		return p.min.Load()
	}
	for {
		cur := p.min.Load()
		if m <= cur || p.min.CompareAndSwap(cur, m) {
			return max(m, cur)
		}
	}
}
