package store

import "time"

// Long-poll notification. Each partition has at most one notify channel,
// created only when someone waits and closed (then forgotten) by the
// dispatcher as soon as new units of that partition become readable: no
// goroutine per partition or per waiter, no polling, and nothing to do for a
// partition nobody waits on (one atomic load per written run).
//
// Ordering (no lost wake-up): Wait publishes p.waiting and then re-reads
// p.indexed; the dispatcher stores p.indexed and then reads p.waiting. Go's
// atomics are sequentially consistent, so at least one of them sees the
// other's store.

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
	if !p.waiting.Load() {
		p.waiting.Store(true)
		s.waitParts.Add(1) // inline dispatch while someone waits (dispatch.go)
	}
	p.waitMu.Unlock()
	if p.indexed.Load() > offset || s.isClosed.Load() {
		return closedChan
	}
	return ch
}

// notify wakes p's waiters (dispatcher, after publishing p.indexed).
func (s *Store) notify(p *partition) {
	if p.waiting.Load() {
		s.wakeWaiters(p)
	}
}

// wakeWaiters closes p's wait channel, if any.
func (s *Store) wakeWaiters(p *partition) {
	p.waitMu.Lock()
	if p.waitCh != nil {
		close(p.waitCh)
		p.waitCh = nil
	}
	if p.waiting.Load() {
		p.waiting.Store(false)
		s.waitParts.Add(-1)
	}
	p.waitMu.Unlock()
}

// closeAllWaiters wakes every waiter (Close): their next Read fails with
// ErrClosed.
func (s *Store) closeAllWaiters() {
	for _, p := range s.allPartitions() {
		s.wakeWaiters(p)
	}
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
// message" for a message whose put was acknowledged). The dispatcher closes
// s.progCh after every batch when someone waits (s.progWaiting), the same
// way as partition waiters.

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
		s.progMu.Lock()
		if s.progCh == nil {
			s.progCh = make(chan struct{})
		}
		ch := s.progCh
		s.progWaiting.Store(true)
		s.progMu.Unlock()
		if s.dispatched.Load() >= target {
			return
		}
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

// notifyProgress wakes catchUp waiters (dispatcher, after publishing
// s.dispatched).
func (s *Store) notifyProgress() {
	if !s.progWaiting.Load() {
		return
	}
	s.progMu.Lock()
	if s.progCh != nil {
		close(s.progCh)
		s.progCh = nil
	}
	s.progWaiting.Store(false)
	s.progMu.Unlock()
}
