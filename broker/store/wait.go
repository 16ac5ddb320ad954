package store

import (
	"sync/atomic"
	"time"
)

// Long-poll notification. Each partition has at most one notify channel,
// created only when someone waits and closed (then forgotten) by the
// dispatcher as soon as new units of that partition become readable: no
// goroutine per partition or per waiter, no polling, and nothing to do for a
// partition nobody waits on (one atomic load per written run).
//
// Ordering (no lost wake-up): Wait publishes p.waiting and then re-reads
// p.indexed; the dispatcher stores p.indexed and then reads p.waiting. Go's
// atomics are sequentially consistent, so at least one of them sees the
// other's store. WaitFunc is the same with a list of callbacks instead of
// the channel; when both sides see each other, the one that unlinks the
// waiter under p.waitMu owns the wake-up.

// closedChan is returned when the wait is already over.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Wait returns a channel that is closed as soon as a record at queue offset
// >= offset is readable on topic/partition (already closed if one is, or if
// the store is closed). The channel is shared by every waiter of the
// partition and closed on any progress, so a waiter for a later offset may
// wake early and should Read and Wait again. No goroutine, no polling; costs
// nothing while nobody waits.
func (s *Store) Wait(topic string, partition int32, offset int64) <-chan struct{} {
	if s.isClosed.Load() || !validTopic(topic) || partition < 0 {
		return closedChan
	}
	p := s.partition(topic, partition, true)
	if p.indexed.Load() > offset {
		return closedChan
	}
	p.waitMu.Lock()
	ch := p.waitCh
	if ch == nil {
		ch = make(chan struct{})
		p.waitCh = ch
	}
	s.markWaitingLocked(p)
	p.waitMu.Unlock()
	if p.indexed.Load() > offset || s.isClosed.Load() {
		return closedChan
	}
	return ch
}

// A Waiter is a long poll woken by a call instead of a channel (WaitFunc):
// a parked get answered by the goroutine that made its record readable, with
// no goroutine of its own and no hand-off (broker/longpoll.go).
type Waiter struct {
	// Fn is called once per arming, with no store lock held, by the
	// goroutine that made a record at or past the armed offset readable
	// (the dispatcher goroutine, or an inline dispatch: the broker's reader
	// in WriteOut, the flusher in sync mode), or by Close. It must not
	// block, and must read with ReadIndexed: Read may wait for the
	// dispatcher, which may be the caller.
	Fn func()

	p      atomic.Pointer[partition] // where it was last armed (nil while pending)
	offset int64                     // guarded by p.waitMu (s.partsMu while pending)
	prev   *Waiter                   // p.waiters list, or s.pending's; guarded as offset
	next   *Waiter
	armed  bool       // in p.waiters; guarded by p.waitMu
	key    pendingKey // while in s.pending (its partition does not exist): that partition, else zero; guarded by s.partsMu
	fire   *Waiter    // the notifier's list of waiters to call (notifier only)
}

// Waiters of partitions that do not exist yet. A long-polling get may name
// any partition of any topic the broker accepts, written or not; creating a
// partition for it (as WaitFunc once did) kept that partition in the store
// for good, so a client polling fresh topic names grew the broker with what
// it sent (docs/storage.md, "Long polling on partitions that do not
// exist"). Such a waiter waits in
// s.pending instead, keyed by topic and partition and dropped with its last
// waiter; the goroutine that creates the partition (the first append or
// dispatch of a record there, recovery) moves its waiters onto it under
// s.partsMu before anyone else can see it, so they are woken by the first
// record's indexing as any other waiter. What s.pending holds is bounded by
// what is parked at the moment (the broker bounds parked gets per
// connection).
type pendingKey struct {
	topic string
	part  int32
}

// adoptPendingLocked moves the waiters pending for topic/part onto p, which
// was just created and is not yet visible to anyone else (s.partsMu held).
func (s *Store) adoptPendingLocked(p *partition, topic string, part int32) {
	key := pendingKey{topic, part}
	head := s.pending[key]
	if head == nil {
		return
	}
	delete(s.pending, key)
	p.waitMu.Lock()
	for w := head; w != nil; {
		next := w.next
		w.key = pendingKey{}
		linkWaiterLocked(p, w)
		w.p.Store(p)
		w = next
	}
	s.markWaitingLocked(p)
	p.waitMu.Unlock()
}

// queuePendingLocked links w into s.pending (s.partsMu held).
func (s *Store) queuePendingLocked(w *Waiter, topic string, part int32, offset int64) {
	if s.pending == nil {
		s.pending = make(map[pendingKey]*Waiter)
	}
	w.key = pendingKey{topic, part}
	w.offset = offset
	w.prev, w.next = nil, s.pending[w.key]
	if w.next != nil {
		w.next.prev = w
	}
	s.pending[w.key] = w
}

// unqueuePendingLocked unlinks w from s.pending (s.partsMu held).
func (s *Store) unqueuePendingLocked(w *Waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else if w.next != nil {
		s.pending[w.key] = w.next
	} else {
		delete(s.pending, w.key)
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	w.key = pendingKey{}
}

// PendingWaits is the number of partitions that waiters wait for before
// they exist (tests).
func (s *Store) PendingWaits() int {
	s.partsMu.RLock()
	defer s.partsMu.RUnlock()
	return len(s.pending)
}

// WaitFunc arms w to have w.Fn called as soon as a record at queue offset >=
// offset is readable on topic/partition. It returns false, without arming,
// when one is readable already or the store is closed: the caller reads
// itself. An armed w must not be armed again before Fn was called or
// CancelWait disarmed it.
func (s *Store) WaitFunc(topic string, partition int32, offset int64, w *Waiter) bool {
	if s.isClosed.Load() || !validTopic(topic) || partition < 0 {
		return false
	}
	p := s.partition(topic, partition, false)
	if p == nil {
		s.partsMu.Lock()
		if p = s.partitionLocked(topic, partition); p == nil {
			w.p.Store(nil)
			s.queuePendingLocked(w, topic, partition, offset)
			s.partsMu.Unlock()
			if s.isClosed.Load() { // raced with Close's sweep of s.pending
				return !s.CancelWait(w)
			}
			return true
		}
		s.partsMu.Unlock()
	}
	if p.indexed.Load() > offset {
		return false
	}
	w.p.Store(p)
	p.waitMu.Lock()
	w.offset = offset
	linkWaiterLocked(p, w)
	s.markWaitingLocked(p)
	p.waitMu.Unlock()
	if p.indexed.Load() > offset || s.isClosed.Load() {
		// Raced with the notifier: whoever unlinks w owns the wake-up.
		return !s.CancelWait(w)
	}
	return true
}

// CancelWait disarms w; false when it was not armed (Fn was or is being
// called).
func (s *Store) CancelWait(w *Waiter) bool {
	p := w.p.Load()
	if p == nil {
		// Pending, or moved onto its partition since the load (w.p is
		// stored under s.partsMu), or not armed at all.
		s.partsMu.Lock()
		queued := w.key != pendingKey{} // a pending waiter's topic is never empty
		if queued {
			s.unqueuePendingLocked(w)
		}
		s.partsMu.Unlock()
		if queued {
			return true
		}
		if p = w.p.Load(); p == nil {
			return false
		}
	}
	p.waitMu.Lock()
	ok := w.armed
	if ok {
		unlinkWaiterLocked(p, w)
		s.idleCheckLocked(p)
	}
	p.waitMu.Unlock()
	return ok
}

// linkWaiterLocked arms w in p's list (p.waitMu held).
func linkWaiterLocked(p *partition, w *Waiter) {
	w.prev, w.next = nil, p.waiters
	if p.waiters != nil {
		p.waiters.prev = w
	}
	p.waiters = w
	w.armed = true
}

// markWaitingLocked marks p as waited on (p.waitMu held): dispatches run
// inline while someone waits (dispatch.go).
func (s *Store) markWaitingLocked(p *partition) {
	if !p.waiting.Load() {
		p.waiting.Store(true)
		s.waitParts.Add(1)
	}
}

func unlinkWaiterLocked(p *partition, w *Waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.waiters = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.armed = nil, nil, false
}

// idleCheckLocked clears p.waiting once nothing waits on p (p.waitMu held).
func (s *Store) idleCheckLocked(p *partition) {
	if p.waitCh == nil && p.waiters == nil && p.waiting.Load() {
		p.waiting.Store(false)
		s.waitParts.Add(-1)
	}
}

// notify wakes p's waiters (dispatcher, after publishing p.indexed): the
// channel is closed at once; WaitFunc waiters whose offset is now readable
// are added to *fire, for the notifier to call once it holds no lock
// (runFired).
func (s *Store) notify(p *partition, fire **Waiter) {
	if p.waiting.Load() {
		s.wakeWaiters(p, p.indexed.Load(), fire)
	}
}

// wakeWaiters closes p's wait channel, if any, and moves the WaitFunc
// waiters below readable (all: readable < 0) to *fire.
func (s *Store) wakeWaiters(p *partition, readable int64, fire **Waiter) {
	p.waitMu.Lock()
	if p.waitCh != nil {
		close(p.waitCh)
		p.waitCh = nil
	}
	for w := p.waiters; w != nil; {
		next := w.next
		if readable < 0 || w.offset < readable {
			unlinkWaiterLocked(p, w)
			w.fire = *fire
			*fire = w
		}
		w = next
	}
	s.idleCheckLocked(p)
	p.waitMu.Unlock()
}

// runFired calls the Fn of every waiter on the list (no lock held).
func runFired(w *Waiter) {
	for w != nil {
		next := w.fire
		w.fire = nil
		w.Fn()
		w = next
	}
}

// closeAllWaiters wakes every waiter (Close): their next Read fails with
// ErrClosed.
func (s *Store) closeAllWaiters() {
	var fire *Waiter
	for _, p := range s.allPartitions() {
		s.wakeWaiters(p, -1, &fire)
	}
	s.partsMu.Lock()
	for _, head := range s.pending {
		for w := head; w != nil; {
			next := w.next
			w.prev, w.next = nil, nil
			w.key = pendingKey{}
			w.fire = fire
			fire = w
			w = next
		}
	}
	clear(s.pending)
	s.partsMu.Unlock()
	runFired(fire)
}

// Read-your-writes (docs/storage.md, "Flushing and visibility" and "Partition
// indexes"): a record is readable as soon as it is appended
// (async mode) or durable (sync mode). Records become readable through
// their index unit, which the dispatcher writes a little later; so a read
// of an offset that is already assigned but not yet indexed first writes out
// what is still staged (async) and lets the dispatcher catch up with
// everything appended (async) or durable (sync) at the time of the call
// (bounded, in case the dispatcher is stuck on an I/O error: catchUpTimeout
// while it reports one or the target is not visible, catchUpMax otherwise — a healthy dispatcher indexes
// what is there within a millisecond, but on a loaded machine it may not be
// scheduled for tens of milliseconds, and giving up then answers "no
// message" for a message whose put was acknowledged). The dispatcher wakes
// s.progWait (poswait) after every batch; Wake is one atomic load while
// nobody waits.

const (
	catchUpTimeout = 50 * time.Millisecond
	catchUpMax     = 2 * time.Second
)

// catchUp waits until the dispatcher has indexed everything below target.
func (s *Store) catchUp(target int64) {
	if s.dispatched.Load() >= target {
		return
	}
	_ = s.clog.writeOut() // async: records still staged become visible (stage.go)
	s.wakeDispatcher()
	timer := time.NewTimer(catchUpTimeout)
	defer timer.Stop()
	waited := time.Duration(0)
	for s.dispatched.Load() < target {
		ch := s.progWait.Wait(target-1, s.dispatched.Load) // closed once dispatched >= target
		select {
		case <-ch:
		case <-timer.C:
			// Give up when the dispatcher cannot get there: it is failing, or
			// the target is not visible (a commit-log write error).
			if waited += catchUpTimeout; s.dispFailing.Load() || s.clog.visibleLimit() < target || waited >= catchUpMax {
				return
			}
			timer.Reset(catchUpTimeout) // healthy, just not scheduled yet: keep waiting
		case <-s.stop:
			return
		}
	}
}
