package store

import "sync/atomic"

// partHints carries the partition the appender resolved for each record to
// the dispatcher, so that the dispatcher does not look the record's topic up
// again by name. With puts going round-robin over 1,000 topics the
// dispatcher's one-entry "last topic" cache (partcache.go) always missed and
// its map lookup — hashing the topic, probing a 1,000-entry map, comparing
// the key — was the largest part of what a put to one of 1,000 topics costs
// more than a put to one topic (bench/README.md, "seventh round").
//
// It is a single-producer, single-consumer ring: the appender (commitLog.mu
// held) adds an entry when an append (a single one or a run of one
// partition, appendedLocked) goes to another partition than the last entry's,
// the dispatcher (dispMu held) reads them in log order. An entry stands for
// its record and the records after it up to the next entry. It is a hint,
// nothing more: the dispatcher uses the partition of the last entry at or
// before a record only when its topic and partition id are the record's (a
// partition is never replaced while the store is open, so a (topic, id)
// names one *partition). Records without an entry — appended
// while the ring was full (the dispatcher more than len(ents) appends
// behind), replicated ones (AppendRaw), the rest of a run, a batch redone
// after a failed write — and entries left by records that were never
// dispatched fall back to the lookup by name. So a hint can only save work,
// never send a unit to another partition.
type partHints struct {
	// head counts entries added (written by the appender after the entry,
	// read by the dispatcher at the start of a batch); tail counts entries
	// the dispatcher is done with (it stores it after each batch, the
	// appender reads it only when its cached copy says the ring is full).
	head atomic.Int64
	_    [56]byte // head is stored per append, tail per batch: separate lines
	tail atomic.Int64
	_    [56]byte

	// The appender's (commitLog.mu).
	added    int64      // == head
	tailSeen int64      // a value of tail, at most its current one
	last     *partition // the partition of the last entry added

	ents [hintRing]partHint
}

// hintRing is the ring's size in entries (40 bytes each): the dispatcher
// may fall this many appends behind before appends go without a hint.
const hintRing = 4096

type partHint struct {
	pos  int64 // the record's position in the commit log
	p    *partition
	name string // p's topic (p.topic.name: the dispatcher does not touch p's appender line)
	id   int32  // p's id
}

// addLocked records that the record at pos was appended to p (commitLog.mu
// held). When the dispatcher has not yet taken the entries of a whole ring,
// the record goes without one.
func (h *partHints) addLocked(pos int64, p *partition) {
	if p == h.last {
		return // the last entry stands for this record too
	}
	n := h.added
	if n-h.tailSeen >= hintRing {
		if h.tailSeen = h.tail.Load(); n-h.tailSeen >= hintRing {
			return
		}
	}
	h.ents[n%hintRing] = partHint{pos: pos, p: p, name: p.topic.name, id: p.id}
	h.added = n + 1
	h.last = p
	h.head.Store(n + 1)
}

// hintReader is the dispatcher's side of a partHints ring (dispMu held).
type hintReader struct {
	h    *partHints
	next int64    // the next entry to look at
	head int64    // entries below this may be read (h.head at the batch's start)
	hits int64    // records whose partition came from an entry (tests)
	cur  partHint // the last entry read (its p nil: none yet)
}

// begin starts a batch: the entries the appender added so far may be read.
// Called after the batch's limit is read, so every record below the limit
// that has an entry has it below head.
func (r *hintReader) begin() { r.head = r.h.head.Load() }

// end gives the entries read so far back to the appender.
func (r *hintReader) end() { r.h.tail.Store(r.next) }

// partition returns the appender's partition for the record at pos with
// topic and id, or nil when the last entry at or before pos is not for
// that topic and id. Records come in log order; entries before pos stand
// for records before it (dispatched or not: the appender's records can only
// be skipped, never reordered), an entry after pos for later records.
func (r *hintReader) partition(pos int64, topic []byte, id int32) *partition {
	for r.next < r.head {
		e := &r.h.ents[r.next%hintRing]
		if e.pos > pos {
			break
		}
		r.cur = *e
		r.next++
	}
	if c := &r.cur; c.p != nil && c.id == id && c.name == string(topic) {
		r.hits++
		return c.p
	}
	return nil
}
