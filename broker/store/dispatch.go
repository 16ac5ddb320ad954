package store

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// The dispatcher is the one goroutine that builds the partition indexes and
// the key index from the commit log. It scans from s.dispatched up to the
// visible limit (flushed in sync mode, written in async mode), is woken by
// appends (sync mode: by the flusher) through a non-blocking signal, and
// sleeps otherwise. Units of one batch are accumulated per partition; at the
// end of the batch each partition's run is added to its index: whole 4 KiB
// blocks are pwritten (one call per partition per batch), a partial block is
// kept in the partition's in-memory tail until it fills (indextail.go), so
// 10,000 partitions fed round-robin cost one pwrite per 256 units, not one
// per partition per batch. After a partition's run is added its readable
// count is published and its long-poll waiters are woken; after the whole
// batch, s.dispatched. WaitFunc waiters (parked gets) are called after the
// batch, once dispMu is released.
type dispatcher struct {
	s      *Store
	parts  partCache    // private partition cache (partcache.go)
	hints  hintReader   // the appender's partition of each record (parthint.go)
	batch  []*partition // partitions with pending units
	warned int          // offset-mismatch warnings logged
	fired  *Waiter      // WaitFunc waiters made readable, to call after dispMu (wait.go)

	unmapped int64 // the log's mappings below this were dropped (unmapbehind.go)
}

// takeFired returns the waiters the batches so far made readable (dispMu
// held); the caller calls them with runFired once it released dispMu.
func (d *dispatcher) takeFired() *Waiter {
	w := d.fired
	d.fired = nil
	return w
}

// dispatchBatchBytes bounds one batch (readers see new units at least every
// this many commit-log bytes).
const dispatchBatchBytes = 16 << 20

func newDispatcher(s *Store) *dispatcher {
	return &dispatcher{s: s, parts: newPartCache(), hints: hintReader{h: s.clog.hints}}
}

// dispatchLoop is the dispatcher goroutine.
func (s *Store) dispatchLoop() {
	defer s.wg.Done()
	backoff := time.Duration(0)
	for {
		limit := s.clog.visibleLimit()
		if s.dispatched.Load() < limit {
			s.dispMu.Lock()
			err := s.disp.batchTo(s.clog.visibleLimit(), nil)
			fired := s.disp.takeFired()
			s.dispMu.Unlock()
			runFired(fired)
			if err != nil {
				s.setIndexErr(err)
				backoff = min(max(2*backoff, 20*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-s.stop:
					return
				}
				continue
			}
			if backoff != 0 {
				backoff = 0
				s.setIndexErr(nil)
			}
			continue
		}
		s.dispSleep.Store(true)
		if s.clog.visibleLimit() > s.dispatched.Load() {
			s.dispSleep.Store(false)
			continue
		}
		select {
		case <-s.dispKick:
		case <-s.stop:
			return
		}
		s.dispSleep.Store(false)
	}
}

// Inline dispatch. Waking the sleeping dispatcher costs a goroutine hand-off:
// a futex wake of another OS thread, which then runs the dispatcher, which
// wakes the long-polling get. On the end-to-end path (put → parked get) that
// is one hop and tens of µs on this machine (perf trace of the e2e workload:
// ~3 thread wake-ups between reading a put and writing the delivery). So
// when the records that just became visible are few and the dispatcher is
// asleep, the goroutine that made them visible (the broker's reader after a
// batch of puts, the flusher in sync mode) indexes them itself, under
// dispMu, and the waiters are woken from there:
//
//   - only while a long poll waits (waitParts > 0), or for a single small
//     run (inlineDispatchAlways: one put in flight, whose reply is not
//     delayed by a 1 µs dispatch but would be by the futex wake);
//   - only up to inlineDispatchMax bytes: a busy producer's batches still go
//     to the dispatcher goroutine, in parallel on the other core;
//   - only when dispMu is free: otherwise the dispatcher (or another inline
//     dispatch) is at it and is woken as before.
//
// No visibility advance is lost: each one calls onVisible, which either
// dispatches up to the visible limit it reads under dispMu or wakes the
// dispatcher. A failed inline batch is dropped (d.reset) and the dispatcher
// is woken to retry it with its backoff and sticky-error handling.
const (
	inlineDispatchMax    = 64 << 10
	inlineDispatchAlways = 1 << 10
)

// dispatchInline runs a dispatch batch on the caller's goroutine when that
// is cheaper than waking the dispatcher (see above); false: wake it.
func (s *Store) dispatchInline() bool {
	if !s.dispSleep.Load() || s.dispFailing.Load() || s.isClosed.Load() {
		return false
	}
	n := s.clog.visibleLimit() - s.dispatched.Load()
	if n <= 0 {
		return true
	}
	if n > inlineDispatchMax || n > inlineDispatchAlways && s.waitParts.Load() == 0 {
		return false
	}
	if !s.dispMu.TryLock() {
		return false
	}
	return s.dispatchUnlock(nil) == nil
}

// dispatchUnlock runs one dispatch batch up to the visible limit on the
// caller's goroutine (src as for batchTo), releases dispMu, which the
// caller took, and calls the waiters the batch made readable.
func (s *Store) dispatchUnlock(src *rawSrc) error {
	err := error(nil)
	if limit := s.clog.visibleLimit(); s.dispatched.Load() < limit {
		err = s.disp.batchTo(limit, src)
	}
	if src != nil && src.units != nil {
		s.clog.rawUnits.done(s.dispatched.Load()) // under dispMu: one taker at a time
	}
	fired := s.disp.takeFired()
	s.dispMu.Unlock()
	runFired(fired)
	if err == nil {
		s.counters.inlineDispatches.Add(1)
	}
	return err
}

// wakeDispatcher wakes the dispatcher if it sleeps (cheap when it does not).
func (s *Store) wakeDispatcher() {
	if s.dispSleep.Load() && s.dispSleep.CompareAndSwap(true, false) {
		kick(s.dispKick)
	}
}

// setIndexErr records (err != nil) or clears a sticky index write error;
// appends are refused while it is set.
func (s *Store) setIndexErr(err error) {
	s.dispFailing.Store(err != nil)
	switch set, cleared := s.clog.setRefusal(err); {
	case set:
		s.log.Error("index write failed; appends are refused until the dispatcher's retry succeeds", "err", err)
	case cleared:
		s.log.Info("index writes succeed again; appends accepted")
	}
}

// run dispatches everything below limit (recovery and Close, with the
// dispatcher goroutine not running; dispMu held).
func (d *dispatcher) run(limit int64) error {
	for d.s.dispatched.Load() < limit {
		if err := d.batchTo(limit, nil); err != nil {
			return err
		}
	}
	return nil
}

// rawSrc is what a replica's receive loop hands the dispatcher
// (RaiseReadLimitFrom): copies of log bytes it still holds, and what its
// checks found of their records (rawUnit).
type rawSrc struct {
	spans []RawSpan
	units []rawUnit
}

// unit returns the check's entry for the record at pos, if there is one,
// dropping the entries before pos (positions only grow within a batch). An
// entry is the record at its position: a replica's log only grows while the
// store is open (truncations and resets are done at Open), so the record's
// bytes need not be read to match it.
func (r *rawSrc) unit(pos int64) *rawUnit {
	us := r.units
	for len(us) > 0 && us[0].pos < pos {
		us = us[1:]
	}
	r.units = us
	if len(us) == 0 || us[0].pos != pos {
		return nil
	}
	return &us[0]
}

// batchTo dispatches one batch of records from s.dispatched towards limit.
// src (may be nil) holds copies of log bytes the caller still has in memory
// and what the checks found of their records (RaiseReadLimitFrom): a record
// inside them is read there, and not decoded at all when its entry is there
// and no key index needs its properties.
func (d *dispatcher) batchTo(limit int64, src *rawSrc) error {
	s := d.s
	pos := s.dispatched.Load()
	stop := min(limit, pos+dispatchBatchBytes)
	var g *segment
	d.hints.begin()
	defer func() {
		d.hints.end()
		if g != nil {
			g.release()
		}
	}()
	n := 0
	for pos < stop {
		// A record the check found (src: a replica's receive loop) is
		// indexed from its entry, without reading it, unless a key index
		// needs its properties; a record the caller still holds (its
		// receive buffer) is read there; anything else, from the mapped
		// log.
		var b []byte
		if src != nil {
			if u := src.unit(pos); u != nil && (s.keys == nil || !u.props) {
				d.addUnitTag(u.p, u.qoff, pos, u.size, u.tag)
				pos += int64(uint32(u.size) &^ unitSigFlag)
				n++
				continue
			}
			b = spanRecord(&src.spans, pos)
		}
		if b == nil {
			if g == nil || pos >= g.end() {
				if g != nil {
					g.release()
				}
				if g = s.clog.acquireSegment(pos); g == nil {
					d.reset()
					return fmt.Errorf("%w: dispatch at %d", errMissingSegment, pos)
				}
			}
			b = g.data[pos-g.base:]
		}
		size, magic, ok := protocol.PeekRecord(b)
		if ok && magic == protocol.BlankMagic {
			pos = g.end()
			continue
		}
		if !ok || size > len(b) {
			d.reset()
			return fmt.Errorf("%w: bad record header at %d", ErrCorrupt, pos)
		}
		rec, err := indexFields(b[:size])
		if err != nil {
			d.reset()
			return fmt.Errorf("%w: record at %d: %v", ErrCorrupt, pos, err)
		}
		p := d.hints.partition(pos, rec.topic, rec.partition)
		if p == nil {
			p = d.partition(rec.topic, rec.partition)
		}
		d.addUnit(p, rec.queueOffset, pos, int32(size), rec.props)
		if s.keys != nil && len(rec.props) > 0 {
			s.keys.add(rec.topic, rec.props, pos, rec.storeTime)
		}
		pos += int64(size)
		n++
	}
	if err := d.flush(); err != nil {
		d.reset()
		return err
	}
	if s.keys != nil {
		if err := s.keys.flush(); err != nil {
			return err
		}
	}
	s.counters.dispatchedRecords.Add(int64(n))
	s.dispatched.Store(pos)
	s.progWait.Wake() // catchUp (wait.go)
	d.unmapBehind(pos)
	return nil
}

// spanRecord returns the bytes from pos to the end of the span of *src
// holding pos when that span starts a whole record there (nil otherwise:
// the record is read from the log), dropping the spans that end at or
// before pos (positions only grow within a batch). A BLANK is never taken
// from a span: skipping it needs its segment.
func spanRecord(src *[]RawSpan, pos int64) []byte {
	sp := *src
	for len(sp) > 0 && pos >= sp[0].Pos+int64(len(sp[0].Buf)) {
		sp = sp[1:]
	}
	*src = sp
	if len(sp) == 0 || pos < sp[0].Pos {
		return nil
	}
	b := sp[0].Buf[pos-sp[0].Pos:]
	size, magic, ok := protocol.PeekRecord(b)
	if !ok || magic != protocol.RecordMagic || size > len(b) {
		return nil
	}
	return b
}

// dispatchRecord is what the dispatcher needs of a record.
type dispatchRecord struct {
	topic, props []byte
	partition    int32
	queueOffset  int64
	storeTime    int64
}

// indexFields decodes the fields the dispatcher needs from a whole record
// (rec is exactly its size), with the checks of protocol.DecodeRecordNoCRC
// (magic, size, and protocol.RecordLayout's topic, properties and data
// lengths) but without building a protocol.Record: the dispatcher runs it
// once per record of the log.
func indexFields(rec []byte) (dispatchRecord, error) {
	be := binary.BigEndian
	if len(rec) < protocol.RecordOverhead+1 {
		return dispatchRecord{}, protocol.ErrBadSize
	}
	if be.Uint32(rec[protocol.OffMagic:]) != protocol.RecordMagic {
		return dispatchRecord{}, protocol.ErrBadMagic
	}
	topic, props, _, err := protocol.RecordLayout(rec)
	if err != nil {
		return dispatchRecord{}, err
	}
	return dispatchRecord{
		topic:       topic,
		props:       props,
		partition:   int32(be.Uint32(rec[protocol.OffPartition:])),
		queueOffset: int64(be.Uint64(rec[protocol.OffQueueOffset:])),
		storeTime:   int64(be.Uint64(rec[protocol.OffStoreTime:])),
	}, nil
}

// partition looks a record's partition up in the private cache (no
// allocation on a hit).
func (d *dispatcher) partition(topic []byte, part int32) *partition {
	if p := d.parts.getBytes(topic, part); p != nil {
		return p
	}
	p := d.s.partitionBytes(topic, part)
	d.parts.put(p)
	return p
}

func (d *dispatcher) addUnit(p *partition, q, phys int64, size int32, props []byte) {
	tag, flag := recordTag(props)
	d.addUnitTag(p, q, phys, int32(uint32(size)|flag), tag)
}

// addUnitTag is addUnit with the unit's size field (size and flag) and
// tag already computed (recordTag).
func (d *dispatcher) addUnitTag(p *partition, q, phys int64, sizeField int32, tag uint32) {
	if p.inBatch && q != p.pendStart+int64(len(p.pend)/unitSize) {
		// Not contiguous (only after damage): flush the run, start another.
		d.warnOffset(p, p.pendStart+int64(len(p.pend)/unitSize), q)
		_ = d.writeRun(p)
		p.pendStart = q
		p.resetPend()
	}
	if !p.inBatch {
		if exp := p.indexed.Load(); q != exp && q >= p.min.Load() {
			d.warnOffset(p, exp, q)
		}
		p.inBatch = true
		p.pendStart = q
		p.resetPend()
		d.batch = append(d.batch, p)
	}
	if len(p.pend) == cap(p.pend) && cap(p.pend) == unitSize {
		p.pend = append(p.spill[:0], p.pend...) // the run outgrows first: move it to spill
	}
	// The unit is written in place (no temporary and no append's copy: this
	// runs once per record of the log).
	n := len(p.pend)
	p.pend = slices.Grow(p.pend, unitSize)[:n+unitSize]
	putUnit(p.pend[n:], phys, sizeField, tag)
}

// resetPend empties p's pending run, its next unit going to p.first (the
// partition's own cache lines) and any further ones to p.spill, which keeps
// the largest buffer a run needed.
func (p *partition) resetPend() {
	if cap(p.pend) > unitSize {
		p.spill = p.pend[:0]
	}
	p.pend = p.first[:0:unitSize]
}

func (d *dispatcher) warnOffset(p *partition, want, got int64) {
	if d.warned < 20 {
		d.warned++
		d.s.log.Warn("dispatch: queue offset not contiguous with the index", "topic", p.topic.name,
			"partition", p.id, "expected", want, "record", got)
	}
}

// writeRun adds p's pending run to its index (indextail.go: whole blocks
// to the file, the rest to the tail) and publishes its readable count.
func (d *dispatcher) writeRun(p *partition) error {
	if len(p.pend) == 0 {
		return nil
	}
	if err := d.s.appendUnits(p, p.pendStart, p.pend); err != nil {
		return err
	}
	if end := p.pendStart + int64(len(p.pend)/unitSize); end > p.indexed.Load() {
		p.indexed.Store(end)
	}
	return nil
}

// flush writes every pending run, publishes the partitions' readable counts
// and wakes their waiters.
func (d *dispatcher) flush() error {
	var err error
	for i, p := range d.batch {
		if i+prefetchAhead < len(d.batch) && d.batch[i+prefetchAhead].tailNext != nil {
			// The tail line a later partition's run goes to: with 1,000
			// partitions taking turns it is cold, and the copy into it and
			// the tail's unlock (which waits for that store) stalled on it
			// one partition after the other.
			prefetchLine(d.batch[i+prefetchAhead].tailNext)
		}
		if err == nil {
			if err = d.writeRun(p); err == nil {
				d.s.notify(p, &d.fired)
			}
		}
		p.inBatch = false
		p.resetPend()
	}
	clear(d.batch)
	d.batch = d.batch[:0]
	return err
}

// reset drops the pending units of an abandoned batch (it is redone from
// s.dispatched). Key-index entries already added stay; the redo adds them
// again and queries skip duplicates.
func (d *dispatcher) reset() {
	for _, p := range d.batch {
		p.inBatch = false
		p.resetPend()
	}
	clear(d.batch)
	d.batch = d.batch[:0]
}

// prefetchAhead is how many partitions ahead flush prefetches tail lines.
const prefetchAhead = 4
