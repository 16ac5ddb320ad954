package store

import (
	"math/bits"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
)

// Message is one message to append.
type Message struct {
	Topic          string
	Partition      int32
	Flag           int32
	BornTime       int64 // unix ms, 0 = storeTime
	SysFlag        uint16
	ReconsumeTimes uint16
	Properties     []byte // URL query string (tag, keys, ...); copied
	Data           []byte // copied into the log before Append returns
}

// AppendResult describes an appended record.
type AppendResult struct {
	MsgID          int64
	QueueOffset    int64
	PhysicalOffset int64
	StoreTime      int64
	Size           int
}

// Append appends and, in sync-flush mode, returns only once the record is
// durable (a failed fsync returns ErrIO: the message must not be
// acknowledged); in async mode once it is written to the page cache.
func (s *Store) Append(m *Message) (AppendResult, error) {
	res, f, err := s.AppendAsync(m)
	if err != nil {
		return res, err
	}
	if f == nil {
		return res, s.WriteOut() // async: in the page cache (stage.go)
	}
	return res, f.Wait()
}

// AppendAsync appends and returns without waiting for the fsync. In
// sync-flush mode the returned *Flush completes when the record is durable
// (the caller must not acknowledge before); in async mode it is nil and the
// record is only staged in memory: call WriteOut (once for many appends)
// before acknowledging (stage.go). It does
// not allocate (one Flush is allocated per group-commit round, not per call).
func (s *Store) AppendAsync(m *Message) (AppendResult, *Flush, error) {
	if len(m.Topic) == 0 || len(m.Topic) > maxTopicLen {
		return AppendResult{}, nil, ErrBadTopic // the rest of validTopic: when first seen
	}
	if m.Partition < 0 {
		return AppendResult{}, nil, ErrBadPartition
	}
	if len(m.Data) > s.cfg.MaxMessageSize || len(m.Properties) > protocol.MaxPropertiesLen {
		return AppendResult{}, nil, ErrMessageTooLarge
	}
	size := int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
	if size > s.cfg.SegmentSize {
		return AppendResult{}, nil, ErrMessageTooLarge
	}
	now := s.now().UnixMilli()

	s.mu.Lock()
	if err := s.appendErrLocked(); err != nil {
		s.putErrors++
		s.mu.Unlock()
		return AppendResult{}, nil, err
	}
	p := s.appendParts.get(m.Topic, m.Partition)
	if p == nil {
		if p = s.appendPartitionLocked(m.Topic, m.Partition); p == nil {
			s.mu.Unlock()
			return AppendResult{}, nil, ErrBadTopic
		}
	}
	if err := s.makeRoomLocked(size); err != nil {
		s.putErrors++
		s.mu.Unlock()
		return AppendResult{}, nil, err
	}
	res, f, kickFlusher := s.appendLocked(p, m, size, now)
	s.mu.Unlock()

	if kickFlusher {
		kick(s.flushKick)
	}
	// Async mode: the record becomes visible when it is written out
	// (WriteOut, stage.go), which wakes the dispatcher.
	return res, f, nil
}

// appendLocked encodes m (size bytes, room made by makeRoomLocked) at the
// write position of partition p. It never releases s.mu, so AppendBatch can
// append a run of records with nothing in between.
func (s *Store) appendLocked(p *partition, m *Message, size, now int64) (AppendResult, *Flush, bool) {
	phys := s.wpos
	st := now
	if st < s.lastStore {
		st = s.lastStore
	}
	s.lastStore = st
	born := m.BornTime
	if born == 0 {
		born = st
	}
	q := p.next.Load()
	rec := protocol.Record{
		MsgID:          protocol.MakeMsgID(s.cfg.BrokerID, phys),
		Flag:           m.Flag,
		Partition:      m.Partition,
		QueueOffset:    q,
		PhysicalOffset: phys,
		StoreTime:      st,
		BornTime:       born,
		SysFlag:        m.SysFlag,
		ReconsumeTimes: m.ReconsumeTimes,
		Topic:          unsafe.Slice(unsafe.StringData(m.Topic), len(m.Topic)),
		Properties:     m.Properties,
		Data:           m.Data,
	}
	protocol.EncodeRecord(s.stagedLocked(size), &rec) // written out later (stage.go)
	p.next.Store(q + 1)
	s.wpos = phys + size
	s.lastRecord = phys
	s.written.Store(s.wpos)
	if s.pre.ahead && (phys^s.wpos)>>s.pre.shift != 0 {
		kick(s.pre.fillc) // crossed into the next MiB: zero-fill ahead
	}
	s.puts++
	s.putBytes += size
	p.topic.puts++
	var f *Flush
	kickFlusher := false
	if s.sync {
		if f = s.pending; f == nil {
			f = &Flush{done: make(chan struct{})}
			s.pending = f
			kickFlusher = true // the round's first member wakes the flusher
		}
		if f.n++; f.n == s.roundTarget {
			kick(s.roundFull) // the flusher waits for this many (flush.go)
		}
	} else if s.unflushed++; s.unflushed >= s.cfg.UnflushThreshold {
		s.unflushed = 0
		kickFlusher = true
	}
	return AppendResult{
		MsgID:          rec.MsgID,
		QueueOffset:    q,
		PhysicalOffset: phys,
		StoreTime:      st,
		Size:           int(size),
	}, f, kickFlusher
}

// appendErrLocked returns why appends are refused, if they are.
func (s *Store) appendErrLocked() error {
	switch {
	case s.closed:
		return ErrClosed
	case s.writeErr != nil:
		return s.writeErr
	case s.indexErr != nil:
		return s.indexErr
	case s.rollErr != nil:
		// A roll failed (disk full): refuse every append, even one that would
		// still fit, until a preallocation retry succeeds.
		if s.pre.failed() {
			return s.rollErr
		}
		s.rollErr = nil
	}
	return nil
}

// appendPartitionLocked fills the appender's private partition cache the
// first time a partition is appended to; it validates the topic name then
// (nil when invalid), so the hot path does not.
func (s *Store) appendPartitionLocked(topic string, part int32) *partition {
	if !validTopic(topic) {
		return nil
	}
	p := s.partition(topic, part, true)
	s.appendParts.put(p)
	return p
}

// makeRoomLocked makes sure a record of size bytes fits at the write
// position: it must fill the segment exactly or leave room for a BLANK,
// else the segment is closed and the preallocated next one becomes active.
// When that segment is not ready yet, it waits for the preallocator with the
// append lock RELEASED (and re-acquired), so flush rounds and other work are
// not held up; everything is re-checked afterwards.
func (s *Store) makeRoomLocked(size int64) error {
	for {
		if err := s.appendErrLocked(); err != nil {
			return err
		}
		g := s.active
		if rem := g.end() - s.wpos; size == rem || size+protocol.BlankMinSize <= rem {
			if s.wpos+size > s.fillFence {
				// The zero-filler is writing this range (prefill.go; only
				// when a record is larger than its distance from the writer).
				s.counters.fillWaits.Add(1)
				s.mu.Unlock()
				s.pre.waitFill()
				s.mu.Lock()
				continue
			}
			if !s.stageRoomLocked(size) {
				s.drainStagedLocked() // the staging buffer is full (stage.go)
				continue
			}
			return nil
		}
		if s.stage.written.Load() < s.wpos {
			s.drainStagedLocked() // a roll writes the old segment's records first (stage.go)
			continue
		}
		next, err := s.pre.poll(g.end())
		if err != nil {
			s.rollErr = err // sticky until a preallocation retry succeeds
			return err
		}
		if next != nil {
			s.rollLocked(next)
			continue
		}
		s.mu.Unlock()
		s.pre.wait(g.end())
		s.mu.Lock()
	}
}

// rollLocked closes the active segment with a BLANK filler and makes next
// (the preallocated segment) active.
func (s *Store) rollLocked(next *segment) {
	s.rollStagedLocked(s.active, next)
	s.segsMu.Lock()
	cur := s.segs.Load().segs
	segs := make([]*segment, len(cur), len(cur)+1)
	copy(segs, cur)
	s.setSegmentsLocked(append(segs, next))
	s.segsMu.Unlock()
	s.active = next
	s.wpos = next.base
	s.written.Store(s.wpos)
	s.rolls++
	s.pre.want(next.end())
	if !s.sync {
		kick(s.flushKick) // fsync the finished segment now
	}
}

// kick does a non-blocking send on a wake-up channel of capacity 1.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// visibleLimit is the commit-log position below which records may be served
// and dispatched: the flushed position in sync mode (nothing a crash could
// take away is ever shown), in async mode the position below which the
// staged records are written to the files (stage.go).
func (s *Store) visibleLimit() int64 {
	if s.sync {
		return s.flushed.Load()
	}
	return s.stage.written.Load()
}

// appendedLimit is what visibleLimit reaches once everything appended so far
// is written (async) or flushed (sync): the target of a read's catch-up.
func (s *Store) appendedLimit() int64 {
	if s.sync {
		return s.flushed.Load()
	}
	return s.written.Load()
}

// preallocator creates the next segment ahead of time (fallocate + fdatasync
// + mmap in the background) so a roll only swaps a pointer. After a failure
// (ENOSPC) it retries on its own every preallocRetry and when an append needs
// the segment; the error stays visible to appends until a retry succeeds.
//
// When zero-fill is on (prefill.go) it also writes zeros ahead of the writer,
// kicked whenever the write position enters a new 1 MiB chunk. (It used to
// prefault the mapping ahead of the writer in async mode; appends no longer
// store through the mapping, see stage.go.)
type preallocator struct {
	s    *Store
	mu   sync.Mutex
	cond sync.Cond

	// guarded by mu
	wantBase int64 // base of the segment to prepare, -1 none
	ready    *segment
	err      error
	busy     bool
	lastTry  time.Time
	stopped  bool
	failures int64

	filling bool // a zero-fill chunk is being written (prefill.go); guarded by mu

	kickc chan struct{}
	fillc chan struct{} // the writer entered a new MiB: zero-fill ahead
	ahead bool          // fillc is used (zero-fill on); immutable
	shift uint          // appends kick fillc when entering a new 1<<shift block; immutable
	fl    *filler       // zero-fill state (prefill.go); worker only
}

const fillShift = 20 // zero-fill ahead when the writer enters a new 1 MiB chunk

const (
	preallocRetry    = 500 * time.Millisecond
	preallocMinRetry = 50 * time.Millisecond
)

func newPreallocator(s *Store) *preallocator {
	p := &preallocator{s: s, wantBase: -1, kickc: make(chan struct{}, 1), fillc: make(chan struct{}, 1)}
	p.cond.L = &p.mu
	p.fl = s.newFiller()
	p.ahead = p.fl.on
	p.shift = fillShift
	if c := s.cfg.prefillChunk; c > 0 {
		p.shift = uint(bits.Len64(uint64(c)) - 1) // tests: kick per chunk
	}
	return p
}

// want asks for the segment at base to be prepared.
func (p *preallocator) want(base int64) {
	p.mu.Lock()
	p.setWantLocked(base)
	p.mu.Unlock()
	kick(p.kickc)
}

func (p *preallocator) setWantLocked(base int64) {
	if p.wantBase == base {
		return
	}
	p.wantBase = base
	p.err = nil
	if p.ready != nil && p.ready.base != base {
		discardSegment(p.ready)
		p.ready = nil
	}
}

// poll returns the prepared segment at base if it is ready (nil if not yet,
// asking for it), or the last preparation error (asking for a retry).
func (p *preallocator) poll(base int64) (*segment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setWantLocked(base)
	if g := p.ready; g != nil && g.base == base {
		p.ready = nil
		p.wantBase = -1
		return g, nil
	}
	if p.stopped {
		return nil, ErrClosed
	}
	if !p.busy {
		kick(p.kickc)
	}
	if p.err != nil && !p.busy {
		return nil, p.err
	}
	return nil, nil
}

// wait blocks until the segment at base is ready, preparation failed, or
// the preallocator stopped.
func (p *preallocator) wait(base int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.stopped && !(p.ready != nil && p.ready.base == base) && (p.err == nil || p.busy) && p.wantBase == base {
		p.cond.Wait()
	}
}

func (p *preallocator) run() {
	s := p.s
	defer s.wg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-p.kickc:
		case <-retry.C:
		case <-p.fillc:
			if p.fill() {
				kick(p.fillc) // one chunk per turn: stay responsive to the other work
			}
			continue
		case <-s.stop:
			p.mu.Lock()
			p.stopped = true
			p.cond.Broadcast()
			p.mu.Unlock()
			p.fl.close()
			return
		}
		p.mu.Lock()
		if p.ready != nil || p.wantBase < 0 || p.busy {
			p.mu.Unlock()
			continue
		}
		if p.err != nil {
			if wait := preallocMinRetry - time.Since(p.lastTry); wait > 0 {
				retry.Reset(wait)
				p.mu.Unlock()
				continue
			}
		}
		base := p.wantBase
		p.busy = true
		p.lastTry = time.Now()
		hadErr := p.err != nil
		p.mu.Unlock()

		g, err := createSegment(s.logDir, base, s.cfg.SegmentSize, s.hooks)

		p.mu.Lock()
		p.busy = false
		switch {
		case err != nil:
			if !hadErr {
				s.log.Error("segment preallocation failed; appends that need a new segment fail until a retry succeeds",
					"base", base, "err", err)
			}
			p.err = err
			p.failures++
			retry.Reset(preallocRetry)
		case p.wantBase != base:
			discardSegment(g)
		default:
			if hadErr {
				s.log.Info("segment preallocation succeeded again", "base", base)
			}
			p.ready = g
			p.err = nil
			kick(p.fillc) // zero-fill it when the writer gets close
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// failed reports whether the last preparation failed and no retry has
// succeeded yet (it asks for a retry).
func (p *preallocator) failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready != nil || p.err == nil {
		return false
	}
	if !p.busy {
		kick(p.kickc)
	}
	return true
}

// discard removes an unused prepared segment (Close).
func (p *preallocator) discard() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready != nil {
		discardSegment(p.ready)
		p.ready = nil
	}
}

func discardSegment(g *segment) {
	os.Remove(g.path)
	g.release()
}
