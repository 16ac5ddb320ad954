package client

import (
	"sync"
	"sync/atomic"
)

// Async send states go back to their producer in batches.
//
// An async send's state is released on the connection's reader goroutine,
// which completes it when its reply arrives, and taken again by the
// sending goroutine. Through a sync.Pool that was a Put on the reader's P
// and a Get stealing it back on the sender's, one of each per message: the
// pool's per-P ring bounced between the two CPUs, and its pushHead alone
// was 12% of the client's CPU in async publish (CPU profile of `metaq bench
// produce --window 1000`). Now the reader keeps the states its replies
// released (retire) and hands them, and the count of sends that ended, to
// the producer once per batch of replies (readBatch: one read brings
// hundreds); senders take them back one at a time under a lock whose cache
// line stays with them between batches. Other releases (Send, failures,
// timeouts) still go through the pool, which newSend falls back to when the
// list is empty.

// sendFreeMax bounds a producer's free list (more states go to the pool,
// which the GC may empty): a few windows' worth.
const sendFreeMax = 4096

// sendFree is a producer's free list of async send states.
type sendFree struct {
	n  atomic.Int32 // 0 when s is empty, else at least 1 (len(s) after putAll): read without mu
	mu sync.Mutex
	s  []*sendState
}

// get takes a state off the list; nil when it is empty.
func (f *sendFree) get() *sendState {
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	var s *sendState
	if k := len(f.s); k > 0 {
		s = f.s[k-1]
		f.s[k-1] = nil
		f.s = f.s[:k-1]
	}
	if len(f.s) == 0 {
		f.n.Store(0) // n is only a hint between the two: no store per get
	}
	f.mu.Unlock()
	return s
}

// putAll adds states (reset already) to the list, the ones beyond
// sendFreeMax to the pool.
func (f *sendFree) putAll(states []*sendState) {
	f.mu.Lock()
	k := min(len(states), max(sendFreeMax-len(f.s), 0))
	f.s = append(f.s, states[:k]...)
	f.n.Store(int32(len(f.s)))
	f.mu.Unlock()
	for _, s := range states[k:] {
		sendPool.Put(s)
	}
}

// sendsDone takes back the states of async sends a connection's reader
// completed (connConfig.sendsDone): their callbacks have returned.
func (p *Producer) sendsDone(states []*sendState) {
	p.free.putAll(states)
	if p.inflight.Add(-int64(len(states))) == 0 && p.closed.Load() {
		p.signalIdle()
	}
}

// retire keeps s, an async send that ended on c's reader goroutine (reset
// already, its callback about to run), for the producer (flushRetired); false
// when c's producer does not take states back.
func (c *brokerConn) retire(s *sendState) bool {
	if c.cfg.sendsDone == nil {
		return false
	}
	c.retired = append(c.retired, s)
	return true
}

// flushRetired hands the retired states to the producer (the reader
// goroutine, after a batch of replies).
func (c *brokerConn) flushRetired() {
	if len(c.retired) == 0 {
		return
	}
	c.cfg.sendsDone(c.retired)
	clear(c.retired)
	c.retired = c.retired[:0]
}
