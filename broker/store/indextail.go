package store

import (
	"sync"
	"sync/atomic"
)

// Index tails: the newest units of each partition are kept in memory until
// they fill a 4 KiB block of the partition's index stream.
//
// Without them the dispatcher pwrites every partition's run once per batch;
// with 10,000 partitions fed round-robin a batch holds only a few units per
// partition, so indexing cost one pwrite (and, every 256 units, an ext4 block
// allocation) per ~8 messages. With tails a partition's units are written
// when they complete a block (256 units, or the end of an index file when
// IndexFileSize is smaller), one aligned 4 KiB pwrite per 256 messages; a
// run that covers whole blocks (one busy partition) is still written with one
// pwrite per batch.
//
// Invariants (per partition, tail fields guarded by p.tailMu):
//
//   - the tail holds units [tail.start, tail.start+tail.n); p.filed mirrors
//     tail.start (an atomic readers load without the lock);
//   - units below p.filed are in the index file (pwritten, in the page
//     cache): tail.start only moves past units after their pwrite returned,
//     so a reader that loaded p.filed may pread everything below it;
//   - units below p.indexed are readable, in the file or in the tail.
//
// Readers (Read, OffsetForTime, retention, recovery) go through readUnits,
// which serves units at or past p.filed from the tail under p.tailMu (a copy
// of at most 4 KiB). So buffering does not delay visibility: a unit is
// readable as soon as the dispatcher published p.indexed, exactly as before.
//
// Durability: the checkpoint claims a dispatched position only after
// flushTails has written every tail (and the files were synced), so a crash
// loses only tail units the checkpoint never claimed, and recovery
// re-dispatches them from the commit log. The periodic checkpoint flushes
// tails whenever it syncs the indexes (every interval with few dirty files,
// every indexSyncEvery intervals with many); Flush and Close always do.
//
// Memory: one 4 KiB buffer per partition that received units recently, taken
// from a shared pool (huge-page backed where it can be: tailarena.go) and bounded by Config.IndexBufferSize (default 64 MiB =
// 16,384 partitions). A partition keeps its buffer while it is busy and
// returns it at the first tail flush (checkpoint) that finds it got no unit
// since the previous one. A partition that finds the budget exhausted writes
// its runs through (one pwrite per batch, as without tails) until buffers are
// returned.
const (
	tailUnits = 256 // units per tail block (4 KiB)
	tailBytes = tailUnits * unitSize
)

// DefaultIndexBufferSize bounds the memory holding buffered index units.
const DefaultIndexBufferSize = 64 << 20

type indexTail struct {
	// buf is nil when n == 0 and the buffer was returned, else tailBytes
	// long. A slice, not a *[tailBytes]byte: indexing through an array
	// pointer makes Go check it for nil by loading buf[0], one more cache
	// line (and TLB entry) per unit when 10,000 partitions take turns.
	buf   []byte
	start int64 // queue offset of buf[0:16]
	n     int   // units held
	used  bool  // units were added since the last flushTails
}

func (t *indexTail) end() int64 { return t.start + int64(t.n) }

// tailPool hands out tail buffers within a byte budget.
type tailPool struct {
	budget int64
	held   atomic.Int64 // bytes handed out
	free   sync.Pool

	mu      sync.Mutex
	pending map[*partition]struct{} // partitions holding buffered units
}

func newTailPool(budget int64) *tailPool {
	tp := &tailPool{budget: budget, pending: make(map[*partition]struct{})}
	tp.free.New = func() any { return new([tailBytes]byte) }
	return tp
}

// get returns a buffer, or nil when the budget is exhausted.
func (tp *tailPool) get() []byte {
	if tp.held.Add(tailBytes) > tp.budget {
		tp.held.Add(-tailBytes)
		return nil
	}
	if b := tailBufs.get(); b != nil {
		return b
	}
	return tp.free.Get().(*[tailBytes]byte)[:]
}

func (tp *tailPool) put(b []byte) {
	tp.held.Add(-tailBytes)
	if tailBufs.put(b) {
		return
	}
	tp.free.Put((*[tailBytes]byte)(b))
}

// nextBoundary returns the first block boundary after unit q: a multiple of
// tailUnits or the start of the next index file, whichever comes first.
func (s *Store) nextBoundary(q int64) int64 {
	fu := s.cfg.IndexFileSize / unitSize
	return min((q/tailUnits+1)*tailUnits, (q/fu+1)*fu)
}

// lastBoundary returns the last block boundary at or before unit q.
func (s *Store) lastBoundary(q int64) int64 {
	fu := s.cfg.IndexFileSize / unitSize
	return max(q/tailUnits*tailUnits, q/fu*fu)
}

// appendUnits adds a run of units starting at queue offset q to p's index
// (dispatcher): whole blocks are written to the index file, the rest is kept
// in p's tail. On error nothing below the failed write is lost; the caller
// redoes the batch and overlapping units are simply rewritten.
func (s *Store) appendUnits(p *partition, q int64, units []byte) error {
	p.tailMu.Lock()
	err := s.appendUnitsLocked(p, q, units)
	// Where the next unit will go, for the dispatcher's flush to prefetch
	// (the tail's fields may only be read under tailMu; tailNext is the
	// dispatcher's own).
	p.tailNext = nil
	if t := &p.tail; t.buf != nil && t.n < tailUnits {
		p.tailNext = &t.buf[t.n*unitSize]
	}
	p.tailMu.Unlock()
	return err
}

// appendUnitsLocked is appendUnits with p.tailMu held.
func (s *Store) appendUnitsLocked(p *partition, q int64, units []byte) error {
	t := &p.tail
	t.used = true
	if t.n > 0 && q != t.end() {
		// Not contiguous with the tail (a batch redone after an error, or
		// damage): write the tail out and start over at q.
		if err := s.flushTailLocked(p); err != nil {
			return err
		}
	}
	if t.n > 0 {
		// Top the tail up to its block boundary; write the block when full.
		bnd := s.nextBoundary(t.start)
		take := min(int64(len(units)/unitSize), bnd-t.end())
		copy(t.buf[t.n*unitSize:], units[:take*unitSize])
		t.n += int(take)
		units = units[take*unitSize:]
		q += take
		if t.end() == bnd {
			if err := s.flushTailLocked(p); err != nil {
				return err
			}
		}
		if len(units) == 0 {
			return nil
		}
	}
	// The tail is empty: write whole blocks directly, keep the rest.
	s.setTailStartLocked(p, q)
	if b := s.lastBoundary(q + int64(len(units)/unitSize)); b > q {
		n := (b - q) * unitSize
		if err := s.writeUnits(p, q, units[:n]); err != nil {
			return err
		}
		s.counters.indexWrites.Add(1)
		units = units[n:]
		q = b
		s.setTailStartLocked(p, q)
	}
	if len(units) == 0 {
		return nil
	}
	// The tail restarts at q: create q's index file now, with its first
	// unit, rather than when the tail's first block fills. Creating a
	// partition's index directory and file costs ~1 ms of kernel CPU on
	// ext4 here; done lazily, a broker that was just given 1,000 topics
	// paid it for all of them ~256 messages later, in the middle of its
	// traffic (the topics-1000 row spent a third of its dispatcher CPU on
	// it). Now the first message pays it, as RocketMQ's consume queue does
	// (docs/storage.md, "Partition indexes"). Cheap when the file exists:
	// one lookup under p.ixMu per 256 units.
	if _, err := s.ixFileFor(p, q, true); err != nil {
		return err
	}
	if t.buf == nil {
		if t.buf = s.tails.get(); t.buf == nil {
			// Over budget: write through.
			if err := s.writeUnits(p, q, units); err != nil {
				return err
			}
			s.counters.indexWrites.Add(1)
			s.setTailStartLocked(p, q+int64(len(units)/unitSize))
			return nil
		}
		s.tails.mu.Lock()
		s.tails.pending[p] = struct{}{}
		s.tails.mu.Unlock()
	}
	t.n = copy(t.buf, units) / unitSize
	return nil
}

// setTailStartLocked moves the (empty) tail to unit q; p.tailMu held.
func (s *Store) setTailStartLocked(p *partition, q int64) {
	p.tail.start = q
	p.filed.Store(q)
}

// flushTailLocked writes p's buffered units to the index file and empties
// the tail (keeping its buffer); p.tailMu held.
func (s *Store) flushTailLocked(p *partition) error {
	t := &p.tail
	if t.n == 0 {
		return nil
	}
	if err := s.writeUnits(p, t.start, t.buf[:t.n*unitSize]); err != nil {
		return err
	}
	s.counters.indexWrites.Add(1)
	end := t.end()
	t.n = 0
	s.setTailStartLocked(p, end)
	return nil
}

// flushTails writes every partition's buffered units to its index file
// (checkpoint, Close). Units dispatched before the call are in the files
// when it returns without error. Partitions that got no unit since the
// previous call return their buffer to the pool; busy ones keep it.
func (s *Store) flushTails() error {
	ps := s.pendingTails()
	for _, p := range ps {
		p.tailMu.Lock()
		t := &p.tail
		err := s.flushTailLocked(p)
		if err == nil && t.buf != nil && !t.used {
			s.dropTailLocked(p)
		}
		t.used = false
		p.tailMu.Unlock()
		if err != nil {
			return err // the rest stay registered for the next attempt
		}
	}
	return nil
}

// releaseTails returns the buffers of empty tails to the pool (Close, after
// the final checkpoint wrote them out): arena buffers outlive the store
// (tailarena.go). A tail still holding units (its write failed) keeps its
// buffer.
func (s *Store) releaseTails() {
	ps := s.pendingTails()
	for _, p := range ps {
		p.tailMu.Lock()
		if t := &p.tail; t.n == 0 && t.buf != nil {
			s.dropTailLocked(p)
		}
		p.tailMu.Unlock()
	}
}

// readTail copies units from q out of p's tail into buf; it returns the
// bytes copied, 0 when q is not in the tail.
func (s *Store) readTail(p *partition, q int64, buf []byte) int {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	t := &p.tail
	if t.n > 0 && q >= t.start && q < t.end() {
		off := (q - t.start) * unitSize
		return copy(buf, t.buf[off:t.n*unitSize])
	}
	return 0
}

// pendingCount returns how many partitions hold buffered units.
func (tp *tailPool) pendingCount() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.pending)
}

// tailBytesHeld returns the memory held by index tails.
func (s *Store) tailBytesHeld() int64 { return s.tails.held.Load() }

// pendingTails is a snapshot of the partitions whose tails hold a buffer.
func (s *Store) pendingTails() []*partition {
	s.tails.mu.Lock()
	defer s.tails.mu.Unlock()
	ps := make([]*partition, 0, len(s.tails.pending))
	for p := range s.tails.pending {
		ps = append(ps, p)
	}
	return ps
}

// dropTailLocked returns p's empty tail buffer to the pool and unregisters
// the tail (the caller holds p.tailMu).
func (s *Store) dropTailLocked(p *partition) {
	t := &p.tail
	s.tails.put(t.buf)
	t.buf = nil
	s.tails.mu.Lock()
	delete(s.tails.pending, p)
	s.tails.mu.Unlock()
}
