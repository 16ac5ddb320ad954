package pop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Config configures the service.
type Config struct {
	Store *store.Store
	// Topics reports whether this broker serves topic for subscription,
	// and with how many partitions.
	Topics func(topic string) (partitions int, ok bool)
	// DeadLetter moves message msgID to %DLQ%<group> (the retry feature's
	// dead-letter queue, broker/delay); the returned flush (sync-flush
	// mode) completes when it is durable. nil: dead letters are dropped
	// with a log line.
	DeadLetter func(group string, msgID int64, reason string) (*store.Flush, error)
	// MaxDeliveries: deliveries of a message before it goes to the
	// dead-letter queue (`maxDeliveries`, default 5).
	MaxDeliveries int
	// MaxInflight caps the window of one group on one partition: offsets
	// from the oldest unfinished one to the newest delivered one
	// (`popMaxInflight`, default 2,000,000).
	MaxInflight int
	// MaxGroups caps the groups with delivery state (`popMaxGroups`,
	// default 10,000): a Receive of a new group beyond it is refused with
	// ErrTooManyGroups. A group's state is kept for good, so without a cap
	// every group name a client sends would cost memory and checkpoint
	// space forever. Groups recovered at start are never refused.
	MaxGroups int
	// CheckpointInterval: how often the state is checkpointed into %POP%
	// while it changes (default 1s; once a minute when idle).
	CheckpointInterval time.Duration
	// SpillDir is the directory of the side file that older time slices
	// of the delivery windows move to (docs/push.md, "Memory and limits");
	// "" keeps everything in memory.
	SpillDir string
	// SpillAfter: a sealed time slice older than this moves to the side
	// file (popSpillAfterMs, default 5s).
	SpillAfter time.Duration
	// SpillMemory: while the windows' slices in memory take more bytes
	// than this, sealed slices move to the side file oldest first, however
	// young (popMemoryMb, default 32 MiB).
	SpillMemory int64
	// MaxRecordSize bounds the data of a %POP% record (maxMessageSize;
	// default 1 MiB): larger checkpoints are split into chunks.
	MaxRecordSize int
	Logger        *slog.Logger
	// OnEvent, when set, is told of every delivery, ack, release, reject,
	// expiry and dead letter (tracing hooks; called without locks held
	// but on the hot path: keep it cheap).
	OnEvent func(Event)
}

// Event is what Config.OnEvent receives.
type Event struct {
	Kind         string // "deliver", "ack", "release", "reject", "extend", "dead"
	Group, Topic string
	Partition    int32
	Offset       int64
	Attempt      int
	MsgID        int64  // deliver and dead: the message's id
	Record       []byte // deliver: the record (valid during the call only)
}

// Defaults.
const (
	DefaultMaxDeliveries = 5
	DefaultMaxInflight   = 2_000_000
	DefaultMaxGroups     = 10_000
	DefaultSpillAfter    = 5 * time.Second
	DefaultSpillMemory   = 32 << 20
)

// Pop implements Service.
type Pop struct {
	cfg Config
	st  *store.Store
	log *slog.Logger

	mu     sync.RWMutex // guards queues (the map, not the queues)
	queues map[string]map[string]*queue

	tm    *timer
	dead  chan deadItem
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	ckMu  sync.Mutex // serializes checkpoints
	ckID  uint64
	ckBuf []entry // checkpoint's scratch for a spilled slice
	stats Stats

	spill     *spill // nil: no side file
	qbuf      []*queue
	cbuf      []spillCand
	spillErrs atomic.Int64

	ops     atomic.Int64 // Poll, Finish and Snapshots running (Close waits for them)
	closing atomic.Bool
}

// Stats are the service's counters (`stats pop`).
type Stats struct {
	Delivered, Redelivered, Acked, Released, Rejected, Extended, Expired, DeadLettered atomic.Int64
	Checkpoints                                                                        atomic.Int64
	Spilled                                                                            atomic.Int64 // time slices moved to the side file
}

// queue is the state of one group on one topic. Lock rules: queue.mu
// guards everything below it and the parts; Pop.mu is taken before
// queue.mu, timer.mu after it; no lock is held across a store append that
// waits (only AppendAsync, which never blocks on I/O) or a flush wait.
type queue struct {
	group, topic string
	mu           sync.Mutex
	parts        []*part
	rr           int
	notify       chan struct{} // closed when a message becomes ready again
	dirty        bool
	spill        *spill
}

type deadItem struct {
	q      *queue
	p      *part
	off    int64
	reason string
}

// Open recovers the delivery state from %POP% and starts the service.
func Open(cfg Config) (*Pop, error) {
	if cfg.Store == nil || cfg.Topics == nil {
		return nil, errors.New("pop: Config.Store and Config.Topics are required")
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.MaxGroups <= 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SpillAfter <= 0 {
		cfg.SpillAfter = DefaultSpillAfter
	}
	if cfg.SpillMemory <= 0 {
		cfg.SpillMemory = DefaultSpillMemory
	}
	if cfg.MaxRecordSize <= 0 || cfg.MaxRecordSize > 1<<20 {
		cfg.MaxRecordSize = 1 << 20
	}
	cfg.MaxRecordSize = max(cfg.MaxRecordSize-1024, 4096)
	s := &Pop{
		cfg:    cfg,
		st:     cfg.Store,
		log:    cfg.Logger.With("component", "pop"),
		queues: make(map[string]map[string]*queue),
		tm:     newTimer(),
		dead:   make(chan deadItem, 4096),
		done:   make(chan struct{}),
		ckID:   uint64(time.Now().UnixNano()),
	}
	if cfg.SpillDir != "" {
		sp, err := openSpill(cfg.SpillDir)
		if err != nil {
			return nil, fmt.Errorf("pop: side file: %w", err)
		}
		s.spill = sp
	}
	if err := s.recover(); err != nil {
		if s.spill != nil {
			_ = s.spill.close()
		}
		return nil, err
	}
	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.tm.loop(s.done, s.expire) }()
	go func() { defer s.wg.Done(); s.deadLoop() }()
	go func() { defer s.wg.Done(); s.checkpointLoop() }()
	if s.spill != nil {
		s.spillPass(nowMs()) // a large recovered state goes to the side file at once
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.spillLoop() }()
	}
	return s, nil
}

// spillLoop runs spillPass four times a second.
func (s *Pop) spillLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.spillPass(nowMs())
		}
	}
}

// enter registers a call that touches the windows (Poll, Finish,
// Snapshots); false once Close began. Close unmaps the side file only
// after every such call has left.
func (s *Pop) enter() bool {
	s.ops.Add(1)
	if s.closing.Load() {
		s.ops.Add(-1)
		return false
	}
	return true
}

func (s *Pop) exit() { s.ops.Add(-1) }

// Close stops the service and writes a final checkpoint. Receives waiting
// return ErrClosed.
func (s *Pop) Close() error {
	var err error
	s.once.Do(func() {
		s.closing.Store(true)
		close(s.done)
		s.wg.Wait()
		for s.ops.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
		err = s.checkpoint(true)
		if errors.Is(err, store.ErrClosed) {
			err = nil
		}
		s.mu.RLock()
		for _, m := range s.queues {
			for _, q := range m {
				q.mu.Lock()
				for _, p := range q.parts {
					p.freeAll()
				}
				q.mu.Unlock()
			}
		}
		s.mu.RUnlock()
		if s.spill != nil {
			if cerr := s.spill.close(); err == nil {
				err = cerr
			}
		}
	})
	return err
}

func (s *Pop) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// lookup returns the queue of group/topic, or nil (no allocation).
func (s *Pop) lookup(group, topic []byte) *queue {
	s.mu.RLock()
	q := s.queues[string(group)][string(topic)]
	s.mu.RUnlock()
	return q
}

// queueFor returns the queue of group/topic, creating it. A new group
// beyond MaxGroups is refused (ErrTooManyGroups) when capped (Poll; not
// recovery, which restores what exists).
func (s *Pop) queueFor(group, topic string, capped bool) (*queue, error) {
	s.mu.RLock()
	q := s.queues[group][topic]
	s.mu.RUnlock()
	if q != nil {
		return q, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.queues[group]
	if m == nil {
		if capped && len(s.queues) >= s.cfg.MaxGroups {
			return nil, fmt.Errorf("%w (popMaxGroups=%d; the state of a group is kept for good)", ErrTooManyGroups, s.cfg.MaxGroups)
		}
		m = make(map[string]*queue)
		s.queues[group] = m
	}
	if q = m[topic]; q == nil {
		q = &queue{group: group, topic: topic, spill: s.spill}
		m[topic] = q
	}
	return q, nil
}

// partLocked returns partition id of q, creating its state.
func (q *queue) partLocked(id int32) *part {
	for int(id) >= len(q.parts) {
		q.parts = append(q.parts, &part{id: int32(len(q.parts)), spill: q.spill})
	}
	return q.parts[id]
}

func (q *queue) signalLocked() {
	if q.notify != nil {
		close(q.notify)
		q.notify = nil
	}
}

func (q *queue) waitChLocked() <-chan struct{} {
	if q.notify == nil {
		q.notify = make(chan struct{})
	}
	return q.notify
}

// Item is one delivery of a Batch: Record is a slice of the mapped commit
// log, valid until the batch is released.
type Item struct {
	Partition int32
	Offset    int64
	MsgID     int64
	Attempt   int
	Record    []byte
}

// Batch is what Poll fills: the deliveries, the store reads their records
// come from, and (when there is nothing) the channels to wait on. A Batch is
// reused: Release it after each Poll.
type Batch struct {
	Topic    string
	Items    []Item
	Waits    []<-chan struct{}
	Bytes    int // record bytes in Items
	MaxBytes int // Poll stops adding records once Bytes reaches it (0: no bound)
	reads    []*store.ReadResult
}

// full: no more deliveries fit.
func (b *Batch) full(limit int) bool {
	return len(b.Items) >= limit || (b.MaxBytes > 0 && b.Bytes >= b.MaxBytes)
}

// Release drops the batch's records (they point into the commit log).
func (b *Batch) Release() {
	for i, r := range b.reads {
		r.Release()
		b.reads[i] = nil
	}
	b.reads = b.reads[:0]
	clear(b.Items)
	b.Items = b.Items[:0]
	clear(b.Waits)
	b.Waits = b.Waits[:0]
	b.Bytes = 0
}

// Takes releases the reads into dst (the caller will release them later,
// e.g. after writing the records to a socket) and empties b.
func (b *Batch) Take(dst []*store.ReadResult) []*store.ReadResult {
	dst = append(dst, b.reads...)
	clear(b.reads)
	b.reads = b.reads[:0]
	return dst
}

func clampInvisible(d time.Duration) time.Duration {
	return min(max(d, MinInvisible), MaxInvisible)
}

// Poll delivers up to max messages of topic to group without waiting.
// With nothing to deliver, b.Waits holds the channels of which one closes
// when something may have become deliverable (the caller waits on them and
// polls again). max is clamped to [1, MaxReceive].
func (s *Pop) Poll(group, topic string, f Filter, limit int, invisible time.Duration, b *Batch) error {
	if !s.enter() {
		return ErrClosed
	}
	defer s.exit()
	if err := checkName(group); err != nil {
		return err
	}
	n, ok := s.cfg.Topics(topic)
	if !ok || n <= 0 {
		return ErrUnknownTopic
	}
	limit = min(max(limit, 1), MaxReceive)
	invisible = clampInvisible(invisible)
	b.Topic = topic
	q, err := s.queueFor(group, topic, true)
	if err != nil {
		return err
	}
	now := nowMs()
	deadline := now + invisible.Milliseconds()
	q.mu.Lock()
	start := q.rr
	q.rr++
	for i := 0; i < n && !b.full(limit); i++ {
		p := q.partLocked(int32((start + i) % n))
		if !p.inited {
			p.base = s.st.MinOffset(topic, p.id)
			p.cursor, p.inited = p.base, true
		}
		s.redeliverLocked(q, p, f, b, limit, deadline)
		s.freshLocked(q, p, f, b, limit, now, deadline)
	}
	if len(b.Items) == 0 {
		b.Waits = append(b.Waits, q.waitChLocked())
		for i := 0; i < n; i++ {
			p := q.parts[i]
			if p.inflight() < s.cfg.MaxInflight {
				b.Waits = append(b.Waits, s.st.Wait(topic, p.id, p.cursor))
			}
		}
	} else {
		q.dirty = true
	}
	q.mu.Unlock()
	for i := 0; s.cfg.OnEvent != nil && i < len(b.Items); i++ { // b is the caller's: stable without q.mu
		it := &b.Items[i]
		s.cfg.OnEvent(Event{Kind: "deliver", Group: group, Topic: topic, Partition: it.Partition, Offset: it.Offset, Attempt: it.Attempt, MsgID: it.MsgID, Record: it.Record})
	}
	return nil
}

// redeliverLocked delivers p's ready messages again. A run of consecutive
// ready offsets (a batch whose lock ended) is read with one store read and
// locked with one timer entry, as a fresh batch is: a burst of expiries is
// redelivered as fast as new messages are delivered.
//
// An entry of attempt 0 is one recovery could not place: an offset past
// the last checkpoint that no done record finishes, delivered before the
// crash or not, and perhaps one the group's filter skipped (skipped
// offsets are in no done record). It is read through f, and one the
// filter skips is done, as it is for a first delivery.
func (s *Pop) redeliverLocked(q *queue, p *part, f Filter, b *Batch, limit int, deadline int64) {
	runStart, runEnd := int64(-1), int64(-1) // delivered offsets not yet on the timer
	for !b.full(limit) {
		o, ok := p.peekReady()
		if !ok {
			break
		}
		var rf Filter
		if p.at(o).attempt == 0 {
			rf = f
		}
		size := 1 // a lone offset: one record
		if n := min(p.readyRun(), int64(limit-len(b.Items))); n > 1 {
			size = int(min(max(n*512, 16<<10), 1<<20))
		}
		from := o
		res, err := s.st.Read(q.topic, p.id, from, size, rf)
		if err == nil && rf != nil && res.Status == store.ReadFiltered {
			res.Release()
			s.filteredLocked(p, from, res.NextOffset) // none of [from, NextOffset) is for the group
			continue
		}
		if err != nil || res.Status != store.ReadFound {
			if res != nil {
				res.Release()
			}
			if err != nil && !errors.Is(err, store.ErrClosed) {
				s.log.Error("redelivery read failed; the message is dropped for the group", "group", q.group, "topic", q.topic, "partition", p.id, "offset", o, "err", err)
			}
			s.dropGoneLocked(p, o) // gone (retention) or unreadable: nothing left to deliver
			continue
		}
		used, moved, whole := false, false, true
	scan:
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				rec := firstRecord(buf)
				if rec == nil {
					whole = false
					break scan
				}
				buf = buf[len(rec):]
				ro := int64(be.Uint64(rec[protocol.OffQueueOffset:]))
				for ro > o && o >= from && rf != nil && p.at(o).attempt == 0 {
					// the filtered read passed over o: the filter skips it
					s.filteredOneLocked(p, o)
					moved = true
					if o, ok = p.peekReady(); !ok {
						whole = false
						break scan
					}
				}
				if ro < o {
					continue
				}
				if ro > o {
					whole = false
					break scan // o is not in this read (a gap, or the run ended)
				}
				p.dropReady()
				e := p.at(o)
				e.state, e.deadline, e.late = stInflight, deadline, false
				if e.attempt < 0xFFFE {
					e.attempt++
				}
				b.Items = append(b.Items, Item{Partition: p.id, Offset: o, MsgID: int64(be.Uint64(rec[protocol.OffMsgID:])), Attempt: int(e.attempt), Record: rec})
				b.Bytes += len(rec)
				s.stats.Redelivered.Add(1)
				used = true
				if o != runEnd {
					if runStart >= 0 {
						s.tm.schedule(tentry{at: deadline, q: q, p: p, off: runStart, n: int32(runEnd - runStart)})
					}
					runStart = o
				}
				runEnd = o + 1
				if b.full(limit) {
					whole = false
					break scan
				}
				if o, ok = p.peekReady(); !ok {
					whole = false
					break scan
				}
			}
		}
		if whole && rf != nil {
			// the read scanned up to NextOffset: what it passed over is skipped
			moved = s.filteredLocked(p, from, res.NextOffset) || moved
		}
		if used {
			b.reads = append(b.reads, res)
		} else {
			res.Release()
			if !moved {
				s.dropGoneLocked(p, o) // the read starts past o: o is gone
			}
		}
	}
	if runStart >= 0 {
		s.tm.schedule(tentry{at: deadline, q: q, p: p, off: runStart, n: int32(runEnd - runStart)})
	}
}

// filteredLocked ends the oldest ready entries while they are of attempt 0
// and in [from, to) (a read through the group's filter passed over them);
// true if it ended any.
func (s *Pop) filteredLocked(p *part, from, to int64) bool {
	moved := false
	for {
		o, ok := p.peekReady()
		if !ok || o < from || o >= to || p.at(o).attempt != 0 {
			return moved
		}
		s.filteredOneLocked(p, o)
		moved = true
	}
}

// filteredOneLocked ends ready offset o (the oldest), which the group's
// filter skips.
func (s *Pop) filteredOneLocked(p *part, o int64) {
	p.dropReady()
	p.at(o).state = stDone
	p.advance()
}

// dropGoneLocked ends ready offset o, whose message cannot be read any more.
func (s *Pop) dropGoneLocked(p *part, o int64) {
	p.dropReady()
	if e := p.at(o); e != nil {
		e.state = stDone
	}
	p.advance()
}

func firstRecord(buf []byte) []byte {
	if len(buf) < protocol.RecordOverhead {
		return nil
	}
	n := int(be.Uint32(buf))
	if n < protocol.RecordOverhead || n > len(buf) {
		return nil
	}
	return buf[:n]
}

// freshLocked delivers messages of p never delivered before.
func (s *Pop) freshLocked(q *queue, p *part, f Filter, b *Batch, limit int, now, deadline int64) {
	first := int64(-1)
	for rounds := 0; rounds < 16 && !b.full(limit) && p.inflight() < s.cfg.MaxInflight; rounds++ {
		// Nothing indexed at the cursor yet: do not Read (it would wait for
		// the dispatcher while q.mu is held); the caller waits on Wait.
		select {
		case <-s.st.Wait(q.topic, p.id, p.cursor):
		default:
			rounds = 1 << 20
			continue
		}
		want := limit - len(b.Items)
		res, err := s.st.Read(q.topic, p.id, p.cursor, min(max(want*512, 16<<10), 1<<20), f)
		if err != nil {
			if !errors.Is(err, store.ErrClosed) {
				s.log.Error("read failed", "group", q.group, "topic", q.topic, "partition", p.id, "offset", p.cursor, "err", err)
			}
			break
		}
		switch res.Status {
		case store.ReadFound:
		case store.ReadFiltered:
			s.skipLocked(p, res.NextOffset, now)
			res.Release()
			continue
		case store.ReadOffsetTooSmall:
			s.skipLocked(p, res.MinOffset, now)
			res.Release()
			continue
		default:
			res.Release()
			rounds = 1 << 20
			continue
		}
		used, all := false, true
	scan:
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				rec := firstRecord(buf)
				if rec == nil {
					all = false
					break scan
				}
				buf = buf[len(rec):]
				o := int64(be.Uint64(rec[protocol.OffQueueOffset:]))
				if o < p.cursor {
					continue
				}
				if b.full(limit) || !s.skipLocked(p, o, now) || p.inflight() >= s.cfg.MaxInflight {
					all = false
					break scan
				}
				p.push(entry{state: stInflight, attempt: 1, deadline: deadline}, now)
				if first < 0 {
					first = o
				}
				b.Items = append(b.Items, Item{Partition: p.id, Offset: o, MsgID: int64(be.Uint64(rec[protocol.OffMsgID:])), Attempt: 1, Record: rec})
				b.Bytes += len(rec)
				used = true
				s.stats.Delivered.Add(1)
			}
		}
		if all && res.NextOffset > p.cursor {
			s.skipLocked(p, res.NextOffset, now)
		}
		if used {
			b.reads = append(b.reads, res)
		} else {
			res.Release()
		}
	}
	if first >= 0 {
		s.tm.schedule(tentry{at: deadline, q: q, p: p, off: first, n: int32(p.cursor - first)})
	}
	p.advance()
}

// skipLocked marks the offsets from cursor up to to as done (filtered out
// or removed by retention); false when the window filled up first. Done
// entries count towards MaxInflight like any others: a long gap behind an
// unfinished message is crossed as the window moves (an empty window jumps
// it at once), never grows the window past its cap.
func (s *Pop) skipLocked(p *part, to, now int64) bool {
	if to <= p.cursor {
		return true
	}
	if p.inflight() == 0 {
		p.reset(to)
		return true
	}
	for p.cursor < to && p.inflight() < s.cfg.MaxInflight {
		p.push(entry{state: stDone}, now)
	}
	return p.cursor == to
}

// Receive implements Service.
func (s *Pop) Receive(ctx context.Context, group, topic string, f Filter, limit int, invisible time.Duration) ([]Delivery, error) {
	var b Batch
	defer b.Release()
	var cases []reflect.SelectCase
	for {
		if err := s.Poll(group, topic, f, limit, invisible, &b); err != nil {
			return nil, err
		}
		if len(b.Items) > 0 {
			out := make([]Delivery, len(b.Items))
			for i, it := range b.Items {
				out[i] = Delivery{
					Handle: FormatHandle(topic, it.Partition, it.Offset, it.Attempt),
					Topic:  topic, Partition: it.Partition, QueueOffset: it.Offset, MsgID: it.MsgID,
					Attempt: it.Attempt, Record: append([]byte(nil), it.Record...),
				}
			}
			return out, nil
		}
		cases = cases[:0]
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf((<-chan struct{})(s.done))})
		for _, w := range b.Waits {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		}
		b.Release()
		switch i, _, _ := reflect.Select(cases); i {
		case 0:
			return nil, ctx.Err()
		case 1:
			return nil, ErrClosed
		}
	}
}

// Handle is a parsed delivery handle.
type Handle struct {
	Topic     []byte
	Partition int32
	Offset    int64
	Attempt   int
	// Stale is set by Finish when the handle was not the current delivery
	// of its message (nothing was done for it).
	Stale bool
}

// FormatHandle renders a handle: `<topic>:<partition>:<offset>:<attempt>`.
func FormatHandle(topic string, partition int32, offset int64, attempt int) string {
	return string(AppendHandle(make([]byte, 0, len(topic)+32), topic, partition, offset, attempt))
}

// AppendHandle appends the handle text to b (topic as a string or, without
// a conversion, as the bytes of a parsed Handle).
func AppendHandle[T string | []byte](b []byte, topic T, partition int32, offset int64, attempt int) []byte {
	b = append(b, topic...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(attempt), 10)
}

// ParseHandle parses a handle without allocating (Topic aliases h).
func ParseHandle(h []byte) (Handle, error) {
	var out Handle
	var nums [3]int64
	end := len(h)
	for i := 2; i >= 0; i-- {
		j := end - 1
		for j >= 0 && h[j] != ':' {
			j--
		}
		if j < 0 || j == end-1 || end-j-1 > 19 {
			return out, ErrBadHandle
		}
		var v int64
		for _, c := range h[j+1 : end] {
			if c < '0' || c > '9' {
				return out, ErrBadHandle
			}
			v = v*10 + int64(c-'0')
			if v < 0 {
				return out, ErrBadHandle
			}
		}
		nums[i] = v
		end = j
	}
	if end == 0 || end > protocol.MaxTopicLen || nums[0] > 1<<31-1 || nums[2] < 1 || nums[2] > 0xFFFF {
		return out, ErrBadHandle
	}
	for _, c := range h[:end] {
		if !validNameByte(c) {
			return out, ErrBadHandle
		}
	}
	out.Topic, out.Partition, out.Offset, out.Attempt = h[:end], int32(nums[0]), nums[1], int(nums[2])
	return out, nil
}

func validNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '%' || c == '-'
}

func checkName(g string) error {
	if len(g) == 0 || len(g) > 255 || g == "." || g == ".." {
		return fmt.Errorf("%w: bad group name", ErrBadRequest)
	}
	for i := 0; i < len(g); i++ {
		if !validNameByte(g[i]) {
			return fmt.Errorf("%w: bad group name", ErrBadRequest)
		}
	}
	return nil
}

var donePool = sync.Pool{New: func() any { s := make([]doneRef, 0, 64); return &s }}

// Op is what Finish does with a delivery.
type Op uint8

const (
	OpAck Op = iota + 1
	OpRelease
	OpReject
	OpExtend
)

// Finish applies op to the deliveries hs of group: ack, release (arg =
// delay), reject or extend (arg = invisibility from now). It returns how
// many were applied and how many were not current deliveries (each of
// those has Handle.Stale set; the others were applied), and the flush the caller waits for before answering (sync-flush mode; in async
// mode it must call store.WriteOut first, as for a put). scratch is reused
// for the %POP% record.
func (s *Pop) Finish(group []byte, hs []Handle, op Op, arg time.Duration, scratch []byte) (applied, stale int, flush *store.Flush, _ []byte, err error) {
	if !s.enter() {
		return 0, 0, nil, scratch, ErrClosed
	}
	defer s.exit()
	dp := donePool.Get().(*[]doneRef)
	done := (*dp)[:0]
	defer func() { clear(done); *dp = done[:0]; donePool.Put(dp) }()
	var dead []deadItem
	now := nowMs()
	for i := range hs {
		h := &hs[i]
		h.Stale = false
		q := s.lookup(group, h.Topic)
		if q == nil {
			h.Stale = true
			stale++
			continue
		}
		q.mu.Lock()
		var p *part
		if int(h.Partition) < len(q.parts) {
			p = q.parts[h.Partition]
		}
		var e *entry
		if p != nil {
			e = p.at(h.Offset)
		}
		if e == nil || e.state != stInflight || int(e.attempt) != h.Attempt {
			q.mu.Unlock()
			h.Stale = true
			stale++
			continue
		}
		q.dirty = true
		applied++
		switch op {
		case OpAck:
			e.state = stDone
			s.advanceLocked(q, p)
			done = append(done, doneRef{topic: q.topic, part: p.id, off: h.Offset})
			s.stats.Acked.Add(1)
		case OpRelease:
			if int(e.attempt) >= s.cfg.MaxDeliveries {
				e.state = stDead // no delivery left: the dead-letter queue
				dead = append(dead, deadItem{q: q, p: p, off: h.Offset, reason: "maxDeliveries"})
			} else if arg <= 0 {
				e.state = stReady
				p.addReady(h.Offset)
				q.signalLocked()
			} else {
				e.state = stWaiting
				s.moveDeadlineLocked(q, p, h.Offset, e, now+min(arg, MaxInvisible).Milliseconds())
			}
			s.stats.Released.Add(1)
		case OpExtend:
			s.moveDeadlineLocked(q, p, h.Offset, e, now+clampInvisible(arg).Milliseconds())
			s.stats.Extended.Add(1)
		case OpReject:
			e.state = stDead
			dead = append(dead, deadItem{q: q, p: p, off: h.Offset, reason: "rejected"})
			s.stats.Rejected.Add(1)
		}
		q.mu.Unlock()
		s.event(op, q, p.id, h.Offset, h.Attempt)
	}
	for _, d := range dead {
		if s.deadLetter(d) {
			done = append(done, doneRef{topic: d.q.topic, part: d.p.id, off: d.off})
		}
	}
	if len(done) > 0 {
		flush, scratch, err = s.appendDone(string(group), done, scratch)
	}
	return applied, stale, flush, scratch, err
}

// moveDeadlineLocked sets the deadline of e (offset off, locked: a timer
// entry at or before its deadline is pending) to d. A later deadline adds
// no timer entry (timer.go): the pending one reschedules it.
func (s *Pop) moveDeadlineLocked(q *queue, p *part, off int64, e *entry, d int64) {
	if d == e.deadline {
		return
	}
	if d > e.deadline {
		e.deadline, e.late = d, true
		return
	}
	e.deadline, e.late = d, false
	s.tm.schedule(tentry{at: d, q: q, p: p, off: off, n: 1})
}

// advanceLocked moves p's base over its done prefix. A full window that
// this makes room in wakes the receivers waiting for q: they do not wait on
// the store for a full partition (Poll), so nothing else would.
func (s *Pop) advanceLocked(q *queue, p *part) {
	full := p.inflight() >= s.cfg.MaxInflight
	p.advance()
	if full && p.inflight() < s.cfg.MaxInflight {
		q.signalLocked()
	}
}

func (s *Pop) event(op Op, q *queue, p int32, off int64, attempt int) {
	if s.cfg.OnEvent == nil {
		return
	}
	kind := [...]string{OpAck: "ack", OpRelease: "release", OpReject: "reject", OpExtend: "extend"}[op]
	s.cfg.OnEvent(Event{Kind: kind, Group: q.group, Topic: q.topic, Partition: p, Offset: off, Attempt: attempt})
}

// appendDone writes done records for refs (one per topic, at most 8
// topics per record; callers pass one or a few).
func (s *Pop) appendDone(group string, refs []doneRef, scratch []byte) (*store.Flush, []byte, error) {
	var last *store.Flush
	for len(refs) > 0 {
		n := min(len(refs), s.cfg.MaxRecordSize/13-300)
		scratch = appendDone(scratch[:0], group, refs[:n])
		m := store.Message{Topic: popTopic, Partition: partDone, Data: scratch}
		_, f, err := s.st.AppendAsync(&m)
		if err != nil {
			return nil, scratch, err
		}
		if f != nil {
			last = f
		}
		refs = refs[n:]
	}
	return last, scratch, nil
}

// durable waits until what was appended is durable against a broker crash.
func (s *Pop) durable(f *store.Flush) error {
	if f != nil {
		return f.Wait()
	}
	return s.st.WriteOut()
}

func (s *Pop) finishOne(group, handle string, op Op, arg time.Duration) error {
	h, err := ParseHandle([]byte(handle))
	if err != nil {
		return err
	}
	if err := checkName(group); err != nil {
		return err
	}
	hs := [1]Handle{h}
	_, stale, f, _, err := s.Finish([]byte(group), hs[:], op, arg, nil)
	if err != nil {
		return err
	}
	if stale > 0 {
		return ErrStale
	}
	return s.durable(f)
}

// Ack implements Service.
func (s *Pop) Ack(group, handle string) error { return s.finishOne(group, handle, OpAck, 0) }

// Release implements Service.
func (s *Pop) Release(group, handle string, delay time.Duration) error {
	return s.finishOne(group, handle, OpRelease, delay)
}

// Reject implements Service.
func (s *Pop) Reject(group, handle string) error { return s.finishOne(group, handle, OpReject, 0) }

// Extend implements Service.
func (s *Pop) Extend(group, handle string, invisible time.Duration) error {
	return s.finishOne(group, handle, OpExtend, invisible)
}

// expire ends the invisibility times that are due (timer goroutine).
func (s *Pop) expire(due []tentry, now int64) {
	for i := range due {
		t := &due[i]
		q, p := t.q, t.p
		q.mu.Lock()
		ready := false
		var later tentry // a run of offsets whose deadline moved later, to reschedule
		for o := t.off; o < t.off+int64(t.n); o++ {
			e := p.at(o)
			if e == nil || (e.state != stInflight && e.state != stWaiting) {
				continue
			}
			if e.deadline != t.at {
				if e.late && e.deadline > t.at {
					e.late = false
					if later.n > 0 && (later.at != e.deadline || later.off+int64(later.n) != o || later.n == 1<<31-1) {
						s.tm.schedule(later)
						later.n = 0
					}
					if later.n == 0 {
						later = tentry{at: e.deadline, q: q, p: p, off: o}
					}
					later.n++
				}
				continue
			}
			q.dirty = true
			s.stats.Expired.Add(1)
			if int(e.attempt) >= s.cfg.MaxDeliveries {
				e.state = stDead
				select {
				case s.dead <- deadItem{q: q, p: p, off: o, reason: "maxDeliveries"}:
				default:
					// the dead-letter worker is behind: try again in a second
					e.state, e.deadline, e.late = stWaiting, now+1000, false
					s.tm.schedule(tentry{at: e.deadline, q: q, p: p, off: o, n: 1})
				}
				continue
			}
			e.state = stReady
			p.addReady(o)
			ready = true
		}
		if later.n > 0 {
			s.tm.schedule(later)
		}
		if ready {
			q.signalLocked()
		}
		q.mu.Unlock()
	}
}

// deadLoop moves messages past MaxDeliveries to the dead-letter queue.
func (s *Pop) deadLoop() {
	var scratch []byte
	for {
		select {
		case <-s.done:
			return
		case d := <-s.dead:
			if !s.deadLetter(d) {
				continue
			}
			f, buf, err := s.appendDone(d.q.group, []doneRef{{topic: d.q.topic, part: d.p.id, off: d.off}}, scratch)
			scratch = buf
			if err == nil {
				err = s.durable(f)
			}
			if err != nil && !errors.Is(err, store.ErrClosed) {
				s.log.Error("recording a dead letter failed", "group", d.q.group, "err", err)
			}
		}
	}
}

// deadLetter writes d's message to the dead-letter queue and marks it done
// in memory; false when it could not (it is delivered again later).
func (s *Pop) deadLetter(d deadItem) bool {
	q, p := d.q, d.p
	var msgID int64 = -1
	res, err := s.st.Read(q.topic, p.id, d.off, 1, nil)
	if err == nil && res.Status == store.ReadFound {
		if rec := firstRecord(res.Bufs[0]); rec != nil && int64(be.Uint64(rec[protocol.OffQueueOffset:])) == d.off {
			msgID = int64(be.Uint64(rec[protocol.OffMsgID:]))
		}
	}
	if res != nil {
		res.Release()
	}
	if msgID >= 0 && s.cfg.DeadLetter != nil {
		f, err := s.cfg.DeadLetter(q.group, msgID, d.reason)
		if err == nil {
			err = s.durable(f)
		}
		if err != nil {
			q.mu.Lock()
			if e := p.at(d.off); e != nil && e.state == stDead {
				e.state, e.deadline, e.late = stWaiting, nowMs()+5000, false
				s.tm.schedule(tentry{at: e.deadline, q: q, p: p, off: d.off, n: 1})
			}
			q.mu.Unlock()
			if !errors.Is(err, store.ErrClosed) {
				s.log.Error("dead-lettering failed; retrying in 5s", "group", q.group, "topic", q.topic, "msgId", msgID, "err", err)
			}
			return false
		}
	} else if msgID >= 0 {
		s.log.Warn("message past maxDeliveries dropped (no dead-letter queue)", "group", q.group, "topic", q.topic, "msgId", msgID)
	}
	q.mu.Lock()
	if e := p.at(d.off); e != nil && e.state == stDead {
		e.state = stDone
		s.advanceLocked(q, p)
		q.dirty = true
	}
	q.mu.Unlock()
	s.stats.DeadLettered.Add(1)
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(Event{Kind: "dead", Group: q.group, Topic: q.topic, Partition: p.id, Offset: d.off, MsgID: msgID})
	}
	return true
}

// Snapshot is the state of one group on one topic (`stats pop`).
type Snapshot struct {
	Group, Topic string
	Inflight     int // offsets in windows not done
	Ready        int // waiting for redelivery
	Window       int // sum of window lengths
}

// Snapshots lists every queue's state.
func (s *Pop) Snapshots() []Snapshot {
	if !s.enter() {
		return nil
	}
	defer s.exit()
	s.mu.RLock()
	var qs []*queue
	for _, m := range s.queues {
		for _, q := range m {
			qs = append(qs, q)
		}
	}
	s.mu.RUnlock()
	out := make([]Snapshot, 0, len(qs))
	var buf []entry
	for _, q := range qs {
		sn := Snapshot{Group: q.group, Topic: q.topic}
		q.mu.Lock()
		for _, p := range q.parts {
			sn.Window += p.inflight()
			sn.Ready += p.readyLen()
			p.scan(&buf, func(_ int64, ents []entry) {
				for i := range ents {
					if ents[i].state != stDone {
						sn.Inflight++
					}
				}
			})
		}
		q.mu.Unlock()
		out = append(out, sn)
	}
	return out
}

// SpillStats reports the side file: slices in it and the files' size.
func (s *Pop) SpillStats() (slices int, bytes int64) {
	if s.spill == nil {
		return 0, 0
	}
	return s.spill.slots()
}

// Counters returns the service's counters.
func (s *Pop) Counters() *Stats { return &s.stats }

// TimerLen is the number of pending timer entries.
func (s *Pop) TimerLen() int { return s.tm.len() }
