package store

import (
	"log/slog"
	"math"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
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
	// StoreTime is the store time to stamp (unix ms); 0 = the store's
	// clock. The broker reads the clock once per batch of commands read
	// from a connection and passes it here (time.Now was ~6% of its CPU
	// per put).
	StoreTime int64
	// Ref, if not nil, is the store's handle on Topic (Store.TopicRef): the
	// appender finds the partition through it without a lookup by name.
	Ref *TopicRef
}

// AppendResult describes an appended record.
type AppendResult struct {
	MsgID          int64
	QueueOffset    int64
	PhysicalOffset int64
	StoreTime      int64
	Size           int
}

// commitLog is the commit log: one sequential run of records shared by
// every topic, cut into segment files. It owns the append lock and all it
// guards — the active segment and write position, the last record, the
// staged writes (stage.go), the group-commit round and flush positions
// (flush.go), the sticky write errors, the segment list (segment.go) and the
// preallocation and zero-fill ahead of the writer (prefill.go) — and its two
// goroutines (flusher, preallocator). Queue offsets are assigned inside its
// append, under the append lock, as RocketMQ's CommitLog does under its put
// lock: the partition's next offset is part of what an append decides.
//
// The Store (topics, partitions, dispatcher, reads, retention, checkpoint)
// talks to it through a few methods: append/appendBatch and writeOut,
// flushOnce, the published positions (writePos, visibleLimit,
// appendedLimit, durable, minPos), acquireSegment/segments for reading,
// dropBefore for retention, and, at recovery, its own load/scan/truncate
// (recovery.go) and setTail. Two functions plug the Store in: partitionFor
// (a partition's shared state, on its first append) and onVisible (records
// became visible: wake the dispatcher). docs/internal/store-api.md describes
// the seam and how replication hangs off it.
type commitLog struct {
	cfg   *Config
	log   *slog.Logger
	hooks *faultHooks
	sync  bool   // sync flush (group commit)
	dir   string // <dataPath>/commitlog
	ctr   *counters
	stop  <-chan struct{} // closed by Store.Close: goroutines exit
	wg    *sync.WaitGroup // the Store's goroutines

	partitionFor func(topic string, part int32) *partition // the Store's shared partition state
	onVisible    func()                                    // records became visible (wakes the dispatcher)
	onWritten    func() bool                               // sync mode: staged records reached the files (WaitWritten); true: it woke a waiter

	// The append lock and what it guards (see the lock rules in store.go).
	mu          sync.Mutex
	active      *segment
	wpos        int64 // next write position in the commit log
	lastRecord  int64 // position of the last record written (-1 none)
	lastStore   int64 // last storeTime stamped (non-decreasing)
	pending     *Flush
	roundTarget int // members the flusher waits for (flush.go), 0 = none
	roundGoal   int // members expected in the next round (flush.go)
	unflushed   int
	writeErr    error // sticky: commit-log write/fsync failure (until restart)
	refuseErr   error // sticky: set by the owner to refuse appends (the store's index write failure)
	rollErr     error // sticky: segment preallocation failed (cleared by a successful retry)
	stage       stage // records staged for writing out (stage.go)
	fillFence   int64 // appends stop below this while a zero-fill chunk is written, MaxInt64 none (prefill.go)
	closed      bool
	replica     bool         // a slave's copy: local appends refused (raw.go)
	appendParts partCache    // the appender's partition cache (partcache.go)
	hints       *partHints   // each append's partition, for the dispatcher (parthint.go)
	rawRun      rawRun       // AppendRaw's scratch (raw.go)
	rawUnits    rawUnitQueue // what AppendRaw's checks found, for RaiseReadLimitFrom (raw.go)
	puts        int64
	putBytes    int64
	putErrors   int64
	rolls       int64

	// Published positions.
	written atomic.Int64 // == wpos
	flushed atomic.Int64 // commit log durable below this
	// readLimit caps visibleLimit on a replica: the master's acknowledged
	// position (its high watermark, SetReadLimit in raw.go); MaxInt64 none.
	readLimit  atomic.Int64
	flushedRec atomic.Int64 // last record below flushed (checkpoint's clean-stop check)
	logMin     atomic.Int64 // base of the oldest segment

	flushMu   sync.Mutex                      // serialises flush rounds; held across fdatasync
	lastFsync atomic.Int64                    // duration of the last commit-log fsync (ns)
	flushObs  atomic.Pointer[FlushObserver]   // metrics (observe.go)
	gate      atomic.Pointer[ReplicationGate] // holds rounds until replicated (raw.go)

	segsMu sync.Mutex
	segs   atomic.Pointer[segList]

	pre       *preallocator
	ring      *fsyncRing // async mode: the flusher's fdatasync through io_uring (fsyncring.go); nil: plain
	ringOnce  sync.Once  // logs the ring's fallback once
	flushKick chan struct{}
	roundFull chan struct{}
	roundGrew chan struct{} // a gathering flusher has earlyWriteMin bytes staged to write out (flush.go)
}

// newCommitLog returns an empty commit log for dir (recovery fills it:
// recovery.go, then setTail and start).
func newCommitLog(cfg *Config, log *slog.Logger, dir string, ctr *counters, stop <-chan struct{}, wg *sync.WaitGroup) *commitLog {
	l := &commitLog{
		cfg: cfg, log: log, hooks: cfg.hooks, sync: cfg.UnflushThreshold <= 0, dir: dir, ctr: ctr,
		stop: stop, wg: wg,
		lastRecord:  -1,
		replica:     cfg.Replica,
		fillFence:   math.MaxInt64,
		appendParts: newPartCache(),
		hints:       new(partHints),
		flushKick:   make(chan struct{}, 1),
		roundFull:   make(chan struct{}, 1),
		roundGrew:   make(chan struct{}, 1),
	}
	l.segs.Store(&segList{})
	l.readLimit.Store(math.MaxInt64)
	return l
}

// setTail sets the write position recovered (recovery: end, the last record
// before it, the last store time) and publishes it as written and durable.
func (l *commitLog) setTail(end, lastRec, lastStore int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.segs.Load().segs
	l.active = segs[len(segs)-1]
	l.wpos, l.lastRecord, l.lastStore = end, lastRec, lastStore
	l.written.Store(end)
	l.flushed.Store(end)
	l.flushedRec.Store(lastRec)
}

// start sets up staging at the write position and starts the flusher and
// the preallocator (Open, after recovery).
func (l *commitLog) start() {
	l.initStage()
	if !l.sync && !ringOff.Load() {
		if r, err := newFsyncRing(); err == nil {
			l.ring = r
		} else {
			l.log.Info("io_uring unavailable: the async flusher uses fdatasync(2)", "err", err)
		}
	}
	l.pre = newPreallocator(l)
	l.wg.Add(2)
	go l.pre.run()
	go l.flushLoop()
	l.mu.Lock()
	l.pre.want(l.active.base + l.active.size)
	l.mu.Unlock()
	kick(l.pre.fillc) // start zero-filling ahead (prefill.go)
}

// close refuses further appends (Store.Close, before stopping goroutines).
func (l *commitLog) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	return true
}

// setRefusal records (err != nil) or clears the owner's sticky refusal;
// appends fail with it while it is set. It reports whether it changed.
func (l *commitLog) setRefusal(err error) (set, cleared bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && l.refuseErr == nil:
		l.refuseErr = err
		return true, false
	case err == nil && l.refuseErr != nil:
		l.refuseErr = nil
		return false, true
	}
	return false, false
}

// clean reports whether no sticky write or refusal error is set (Close:
// whether the abort marker may go).
func (l *commitLog) clean() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeErr == nil && l.refuseErr == nil
}

// Published positions (no lock).

// writePos is the write position: every record appended lies below it.
func (l *commitLog) writePos() int64 { return l.written.Load() }

// flushedPos is the durable position: every record below it survived an
// fsync (in sync mode also the visible limit). It only grows while the
// store is open.
func (l *commitLog) flushedPos() int64 { return l.flushed.Load() }

// discardPrepared removes an unused preallocated segment (Close).
func (l *commitLog) discardPrepared() { l.pre.discard() }

// minPos is the base of the oldest segment.
func (l *commitLog) minPos() int64 { return l.logMin.Load() }

// durable returns the flushed position and the last record below it, as one
// consistent pair (checkpoint).
func (l *commitLog) durable() (flushed, lastRecord int64) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	return l.flushed.Load(), l.flushedRec.Load()
}

// segments returns the current segment list (an immutable snapshot).
func (l *commitLog) segments() []*segment { return l.segs.Load().segs }

// logStats is the commit log's part of Stats.
type logStats struct {
	puts, putBytes, putErrors, rolls, wpos int64
	err                                    error
}

// stats snapshots the counters kept under the append lock; locked, if not
// nil, runs under it too (Stats reads the topics' put counters, which
// appendLocked updates).
func (l *commitLog) stats(locked func()) logStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := logStats{puts: l.puts, putBytes: l.putBytes, putErrors: l.putErrors, rolls: l.rolls, wpos: l.wpos,
		err: l.appendErrLocked()}
	if locked != nil {
		locked()
	}
	return st
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
		return res, s.clog.writeOut() // async: in the page cache (stage.go)
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
	now := m.StoreTime
	if now == 0 {
		now = s.now().UnixMilli()
	}
	return s.clog.append(m, size, now)
}

// append appends one validated message of size bytes under the append lock:
// it assigns the partition's queue offset, stamps the store time and stages
// the record (appendLocked), and registers it on the group-commit round.
func (l *commitLog) append(m *Message, size, now int64) (AppendResult, *Flush, error) {
	l.mu.Lock()
	if err := l.localAppendErrLocked(); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return AppendResult{}, nil, err
	}
	p := l.appendPartLocked(m)
	if p == nil {
		l.mu.Unlock()
		return AppendResult{}, nil, ErrBadTopic
	}
	if err := l.makeRoomLocked(size); err != nil {
		l.putErrors++
		l.mu.Unlock()
		return AppendResult{}, nil, err
	}
	res, f, kickFlusher := l.appendLocked(p, m, size, now)
	l.mu.Unlock()

	if kickFlusher {
		kick(l.flushKick)
	}
	// Async mode: the record becomes visible when it is written out
	// (writeOut, stage.go), which wakes the dispatcher.
	return res, f, nil
}

// appendLocked encodes m (size bytes, room made by makeRoomLocked) at the
// write position of partition p. It never releases l.mu, so AppendBatch can
// append a run of records with nothing in between.
func (l *commitLog) appendLocked(p *partition, m *Message, size, now int64) (AppendResult, *Flush, bool) {
	phys := l.wpos
	st := l.storeTimeLocked(now)
	q := p.next.Load()
	id := l.encodeLocked(m, unsafe.Slice(unsafe.StringData(m.Topic), len(m.Topic)), phys, q, st, size)
	l.wpos = phys + size
	f, kickFlusher := l.appendedLocked(p, phys, phys, q+1, 1)
	return AppendResult{
		MsgID:          id,
		QueueOffset:    q,
		PhysicalOffset: phys,
		StoreTime:      st,
		Size:           int(size),
	}, f, kickFlusher
}

// storeTimeLocked is the store time of the records appended now: never
// before the previous append's.
func (l *commitLog) storeTimeLocked(now int64) int64 {
	st := max(now, l.lastStore)
	l.lastStore = st
	return st
}

// appendedLocked does what every append does once, after its n records
// (the first at start, the last at last) are encoded up to l.wpos for
// partition p, whose next queue offset is now next: the published write
// position, the zero-fill kick, the counters and the group-commit
// membership (appendLocked for one record, appendRunLocked for a run). It
// returns the round (sync mode) and whether to kick the flusher.
func (l *commitLog) appendedLocked(p *partition, start, last, next int64, n int) (*Flush, bool) {
	p.next.Store(next)
	l.hints.addLocked(start, p)
	l.lastRecord = last
	l.written.Store(l.wpos)
	if l.pre.ahead && (start^l.wpos)>>l.pre.shift != 0 {
		kick(l.pre.fillc) // crossed into the next MiB: zero-fill ahead
	}
	l.puts += int64(n)
	l.putBytes += l.wpos - start
	p.topic.puts += int64(n)
	var f *Flush
	kickFlusher := false
	if l.sync {
		if f = l.pending; f == nil {
			f = &Flush{done: make(chan struct{}), gate: l.gate.Load()}
			l.pending = f
			kickFlusher = true // the round's first member wakes the flusher
		}
		// Every message is a member (the flusher's goal counts messages).
		before := f.n
		f.n += n
		switch {
		case before < l.roundTarget && f.n >= l.roundTarget:
			kick(l.roundFull) // the flusher waits for this many (flush.go)
		case f.n < l.roundTarget && l.wpos-l.stage.written.Load() >= earlyWriteMin:
			kick(l.roundGrew) // the waiting flusher writes out what is staged
		}
	} else if l.unflushed += n; l.unflushed >= l.cfg.UnflushThreshold {
		l.unflushed = 0
		kickFlusher = true
	}
	return f, kickFlusher
}

// encodeLocked encodes m as the record at physical offset phys (size bytes,
// room made by makeRoomLocked) with queue offset q and store time st, into
// the staging buffer (written out later, stage.go), and returns its message
// id. topic is m.Topic's bytes (a batch run shares one). Both the single
// append (appendLocked) and the batch run (appendRunLocked) build their
// records here, so the two cannot drift apart.
func (l *commitLog) encodeLocked(m *Message, topic []byte, phys, q, st, size int64) int64 {
	born := m.BornTime
	if born == 0 {
		born = st
	}
	rec := protocol.Record{
		MsgID:          protocol.MakeMsgID(l.cfg.BrokerID, phys),
		Flag:           m.Flag,
		Partition:      m.Partition,
		QueueOffset:    q,
		PhysicalOffset: phys,
		StoreTime:      st,
		BornTime:       born,
		SysFlag:        m.SysFlag,
		ReconsumeTimes: m.ReconsumeTimes,
		Topic:          topic,
		Properties:     m.Properties,
		Data:           m.Data,
	}
	protocol.EncodeRecord(l.stagedLocked(size), &rec)
	return rec.MsgID
}

// localAppendErrLocked is appendErrLocked for a local append (not a
// replicated one, raw.go): a replica refuses them.
func (l *commitLog) localAppendErrLocked() error {
	if l.replica && !l.closed {
		return ErrReplica
	}
	return l.appendErrLocked()
}

// appendErrLocked returns why appends are refused, if they are.
func (l *commitLog) appendErrLocked() error {
	switch {
	case l.closed:
		return ErrClosed
	case l.writeErr != nil:
		return l.writeErr
	case l.refuseErr != nil:
		return l.refuseErr
	case l.rollErr != nil:
		// A roll failed (disk full): refuse every append, even one that would
		// still fit, until a preallocation retry succeeds.
		if l.pre.failed() {
			return l.rollErr
		}
		l.rollErr = nil
	}
	return nil
}

// appendPartitionLocked fills the appender's private partition cache the
// first time a partition is appended to; it validates the topic name then
// (nil when invalid), so the hot path does not.
func (l *commitLog) appendPartitionLocked(topic string, part int32) *partition {
	if !validTopic(topic) {
		return nil
	}
	p := l.partitionFor(topic, part)
	l.appendParts.put(p)
	return p
}

// makeRoomLocked makes sure a record of size bytes fits at the write
// position: it must fill the segment exactly or leave room for a BLANK,
// else the segment is closed and the preallocated next one becomes active.
// When that segment is not ready yet, it waits for the preallocator with the
// append lock RELEASED (and re-acquired), so flush rounds and other work are
// not held up; everything is re-checked afterwards.
func (l *commitLog) makeRoomLocked(size int64) error {
	for {
		if err := l.appendErrLocked(); err != nil {
			return err
		}
		g := l.active
		if rem := g.end() - l.wpos; size == rem || size+protocol.BlankMinSize <= rem {
			if l.wpos+size > l.fillFence {
				// The zero-filler is writing this range (prefill.go; only
				// when a record is larger than its distance from the writer).
				l.ctr.fillWaits.Add(1)
				l.mu.Unlock()
				l.pre.waitFill()
				l.mu.Lock()
				continue
			}
			if !l.stageRoomLocked(size) {
				l.drainStagedLocked() // the staging buffer is full (stage.go)
				continue
			}
			return nil
		}
		if l.stage.written.Load() < l.wpos {
			l.drainStagedLocked() // a roll writes the old segment's records first (stage.go)
			continue
		}
		next, err := l.pre.poll(g.end())
		if err != nil {
			l.rollErr = err // sticky until a preallocation retry succeeds
			return err
		}
		if next != nil {
			l.rollLocked(next)
			continue
		}
		l.mu.Unlock()
		l.pre.wait(g.end())
		l.mu.Lock()
	}
}

// rollLocked closes the active segment with a BLANK filler and makes next
// (the preallocated segment) active.
func (l *commitLog) rollLocked(next *segment) {
	l.rollStagedLocked(l.active, next)
	l.segsMu.Lock()
	cur := l.segs.Load().segs
	segs := make([]*segment, len(cur), len(cur)+1)
	copy(segs, cur)
	l.setSegmentsLocked(append(segs, next))
	l.segsMu.Unlock()
	l.active = next
	l.wpos = next.base
	l.written.Store(l.wpos)
	l.rolls++
	l.pre.want(next.end())
	if !l.sync {
		kick(l.flushKick) // fsync the finished segment now
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
// staged records are written to the files (stage.go); on a replica never
// past the master's acknowledged position (readLimit).
func (l *commitLog) visibleLimit() int64 {
	v := l.stage.written.Load()
	if l.sync {
		v = l.flushed.Load()
	}
	return min(v, l.readLimit.Load())
}

// appendedLimit is what visibleLimit reaches once everything appended so far
// is written (async) or flushed (sync): the target of a read's catch-up.
func (l *commitLog) appendedLimit() int64 {
	v := l.written.Load()
	if l.sync {
		v = l.flushed.Load()
	}
	return min(v, l.readLimit.Load())
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
	l    *commitLog
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

func newPreallocator(l *commitLog) *preallocator {
	p := &preallocator{l: l, wantBase: -1, kickc: make(chan struct{}, 1), fillc: make(chan struct{}, 1)}
	p.cond.L = &p.mu
	p.fl = l.newFiller()
	p.ahead = p.fl.on
	p.shift = fillShift
	if c := l.cfg.prefillChunk; c > 0 {
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
	l := p.l
	defer l.wg.Done()
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
		case <-l.stop:
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

		g, err := createSegment(l.dir, base, l.cfg.SegmentSize, l.hooks)

		p.mu.Lock()
		p.busy = false
		switch {
		case err != nil:
			if !hadErr {
				l.log.Error("segment preallocation failed; appends that need a new segment fail until a retry succeeds",
					"base", base, "err", err)
			}
			p.err = err
			p.failures++
			retry.Reset(preallocRetry)
		case p.wantBase != base:
			discardSegment(g)
		default:
			if hadErr {
				l.log.Info("segment preallocation succeeded again", "base", base)
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
