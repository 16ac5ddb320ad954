package broker

import (
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// Ordering on a connection (docs/protocol.md, "Ordering on a connection"):
// a get sees every put that precedes it on its connection. A put is
// acknowledged once durable (sync flush) or written out (async), but it
// becomes readable only when the store's dispatcher has indexed it, a little
// later; without this wait, `put` ×5 then `get` in one write was answered
// 200 ×5 and then 404 in sync flush.
//
// The reader remembers, per partition, the last queue offset its connection
// put (ownPuts) and the group commit of its last put. A get at or below
// that offset, when the offset is not readable yet, first writes out what is
// staged, hands the replies parsed so far to the writer (so the puts'
// acknowledgements are not held back) and then waits, on this connection's
// reader only and without any lock held, until the record is readable, the
// last put's flush failed (it was answered 500: nothing to wait for), the
// connection died, or ownPutsMaxWait passed (a safety valve for a stuck
// dispatcher). Gets on connections that never put cost one length test;
// gets after puts that are readable already, a short scan and two atomic
// loads.

// ownPutsMaxWait bounds how long a get waits for the records of its own
// connection's puts to become readable.
const ownPutsMaxWait = 10 * time.Second

// maxOwnPartitions is how many distinct partitions ownPuts tracks exactly;
// a connection that puts to more is from then on tracked coarsely for all
// of them (a get then waits for everything assigned on its partition when
// it was read), so a producer spreading over 10,000 partitions does not
// scan the list on every put.
const maxOwnPartitions = 32

type ownPut struct {
	ts        *topicState
	partition int32
	offset    int64 // queue offset of the connection's last put there
}

// ownPuts is the reader's memory of its connection's puts (reader only).
type ownPuts struct {
	last      []ownPut
	hint      int          // index of the entry used last
	overflow  bool         // puts to partitions beyond maxOwnPartitions were not tracked
	lastFlush *store.Flush // group commit of the last put (sync flush)
}

// note records a put (its reply is queued); f is its group commit (nil in
// async flush). No allocation once the connection's partitions are known.
func (o *ownPuts) note(ts *topicState, partition int32, offset int64, f *store.Flush) {
	o.lastFlush = f
	if o.overflow {
		return // every partition is tracked coarsely (target)
	}
	if h := o.hint; h < len(o.last) && o.last[h].ts == ts && o.last[h].partition == partition {
		o.last[h].offset = offset
		return
	}
	for i := range o.last {
		if o.last[i].ts == ts && o.last[i].partition == partition {
			o.last[i].offset = offset
			o.hint = i
			return
		}
	}
	if len(o.last) >= maxOwnPartitions {
		clear(o.last)
		o.last = o.last[:0]
		o.hint, o.overflow = 0, true
		return
	}
	o.last = append(o.last, ownPut{ts: ts, partition: partition, offset: offset})
	o.hint = len(o.last) - 1
}

// target returns the highest queue offset of ts/partition a get must see,
// or -1 when none.
func (o *ownPuts) target(ts *topicState, partition int32, st *store.Store) int64 {
	for i := range o.last {
		if o.last[i].ts == ts && o.last[i].partition == partition {
			return o.last[i].offset
		}
	}
	if o.overflow {
		return st.MaxOffset(ts.name, partition) - 1
	}
	return -1
}

// forget drops what is known: the puts failed, or their records did not
// become readable in time (later gets must not wait for them again).
func (o *ownPuts) forget() {
	clear(o.last)
	o.last = o.last[:0]
	o.hint, o.overflow, o.lastFlush = 0, false, nil
}

// awaitOwnPuts makes a get at ts/partition/offset observe the puts that
// preceded it on this connection (reader goroutine only).
func (c *conn) awaitOwnPuts(ts *topicState, partition int32, offset int64) {
	if len(c.own.last) == 0 && !c.own.overflow {
		return
	}
	st := c.srv.store
	target := c.own.target(ts, partition, st)
	if target < offset {
		return // no put of ours at or after the offset read
	}
	ch := st.Wait(ts.name, partition, target)
	if isClosed(ch) {
		return // readable already
	}
	// Slow path: our record is assigned but not readable yet.
	c.handOffReplies()
	var flushDone <-chan struct{}
	f := c.own.lastFlush
	if f != nil {
		flushDone = f.Done()
	}
	timer := time.NewTimer(ownPutsMaxWait)
	defer timer.Stop()
	for {
		select {
		case <-ch:
			if ch = st.Wait(ts.name, partition, target); isClosed(ch) {
				return
			}
		case <-flushDone:
			if f.Err() != nil {
				c.own.forget()
				return
			}
			flushDone = nil // durable: now wait for the dispatcher
		case <-c.dead:
			return
		case <-timer.C:
			c.own.forget()
			c.log.Warn("get: the connection's own puts did not become readable in time; answering with what is readable",
				"topic", ts.name, "partition", partition, "offset", offset, "waited", ownPutsMaxWait)
			return
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
