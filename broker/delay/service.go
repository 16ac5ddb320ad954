package delay

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// Partitions of %SCHEDULE%.
const (
	TimerPartition    int32 = 0                           // deliverAt messages, indexed by the timer
	ProgressPartition int32 = conf.SchedulePartitions - 1 // the service's progress records
	MaxDelay                = 366 * 24 * time.Hour        // how far ahead deliverAt may be
	scheduleTopic           = conf.ScheduleTopic
)

// Config configures a Service.
type Config struct {
	Store             *store.Store
	BrokerID          int             // high bits of message ids
	Dir               string          // the service's side files (dataPath/delay)
	Levels            []time.Duration // messageDelayLevel; nil = the default ladder
	MaxReconsumeTimes int             // 0 = 16
	Logger            *slog.Logger
	// OnTopic is called (from its own goroutine) the first time since start
	// the service writes to a retry or dead-letter topic, so that it is
	// registered in ZooKeeper like a topic a client wrote.
	OnTopic func(topic string, numPartitions int)
	// OnDelivered, when set, is called after a due record r was appended
	// to its real topic as m (res): the broker's trace events
	// (docs/trace.md). It must not block.
	OnDelivered func(r *protocol.Record, m *store.Message, res store.AppendResult)
	// Partitions, when set, tells how many partitions this broker serves
	// for a topic (known false when it cannot tell): a due record bound
	// for a partition beyond them is not delivered (deliver).
	Partitions func(topic string) (n int, known bool)
	// Lookahead is how early the timer loads a time bucket into memory
	// (default 500ms); ProgressEvery how often progress records are written
	// while anything moves (default 200ms).
	Lookahead     time.Duration
	ProgressEvery time.Duration
}

// Service runs the delay levels and the timer over a Store.
type Service struct {
	cfg    Config
	st     *store.Store
	log    *slog.Logger
	levels []time.Duration

	levelOff []atomic.Int64 // per level (index 0 = level 1): next %SCHEDULE% offset to deliver
	timer    *timer

	delivered atomic.Int64 // messages appended to their real topic
	retried   atomic.Int64
	deadLet   atomic.Int64
	rolled    atomic.Int64 // timer records re-appended ahead of retention
	lateMax   atomic.Int64 // worst lateness (ms) since the last Stats

	mu   sync.Mutex      // guards seen
	seen map[string]bool // retry/DLQ topics announced through OnTopic

	resendMu sync.Mutex                 // serialises Resend; guards resent
	resent   map[string]map[int64]int64 // group → dead letter id → copy id (resend.go)

	stop chan struct{}
	wg   sync.WaitGroup
	errs chan error
}

// Open recovers the service's progress from the log, rebuilds what the
// timer index lacks, and starts delivering.
func Open(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("delay: Config.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Levels) == 0 {
		cfg.Levels = conf.Delay{}.DelayLevels()
	}
	if len(cfg.Levels) > conf.MaxDelayLevels {
		return nil, fmt.Errorf("delay: %d levels, at most %d", len(cfg.Levels), conf.MaxDelayLevels)
	}
	if cfg.MaxReconsumeTimes <= 0 {
		cfg.MaxReconsumeTimes = conf.DefaultMaxReconsumeTimes
	}
	if cfg.Lookahead <= 0 {
		cfg.Lookahead = 500 * time.Millisecond
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 200 * time.Millisecond
	}
	s := &Service{
		cfg: cfg, st: cfg.Store, log: cfg.Logger.With("component", "delay"), levels: cfg.Levels,
		levelOff: make([]atomic.Int64, len(cfg.Levels)),
		seen:     map[string]bool{},
		stop:     make(chan struct{}),
	}
	pr, found := s.loadProgress()
	for i := range s.levelOff {
		p := int32(i + 1)
		// Not clamped to the max offset: right after a crash the store may
		// still be indexing the tail, and the records a progress record
		// counts precede it in the log (they survived if it did).
		off := s.st.MinOffset(scheduleTopic, p)
		if found && i < len(pr.levels) {
			off = max(off, pr.levels[i])
		}
		s.levelOff[i].Store(off)
	}
	if !found {
		pr.timerT, pr.timerQ, pr.timerP = 0, 0, 0
	}
	t, err := newTimer(s, filepath.Join(cfg.Dir, "timer"), pr)
	if err != nil {
		return nil, err
	}
	s.timer = t
	s.log.Info("delay service started", "levels", len(s.levels), "progressFound", found,
		"timerFrom", pr.timerQ, "timerDeliveredBefore", pr.timerT, "timerIndexFrom", t.pos)
	for i := range s.levels {
		s.wg.Add(1)
		go s.runLevel(int32(i + 1))
	}
	s.wg.Add(1)
	go t.run()
	return s, nil
}

// Close stops delivering and writes a last progress record. The store
// must still be open.
func (s *Service) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
	}
	close(s.stop)
	s.wg.Wait() // the timer and every level: no delivery after this
	err := s.timer.finish()
	if werr := s.st.WriteOut(); err == nil {
		err = werr
	}
	return err
}

// Levels is the configured ladder.
func (s *Service) Levels() []time.Duration { return s.levels }

// MaxReconsumeTimes is the broker's bound before the dead-letter queue.
func (s *Service) MaxReconsumeTimes() int { return s.cfg.MaxReconsumeTimes }

// Plan is how a put with delay properties is stored.
type Plan struct {
	Partition int32 // %SCHEDULE% partition: 0 = timer, n = level n
	DeliverAt int64 // unix ms (timer only)
}

// ErrBadDelay is a delay property the broker cannot honour (400).
var ErrBadDelay = errors.New("bad delay")

// PlanFor reads the delay properties of a put (nowMs <= 0: the clock is
// read when a deliverAt needs it): ok is false when the
// message is not delayed (no property, delay=0). A level above the
// highest is clamped to it, as RocketMQ does.
func (s *Service) PlanFor(props []byte, nowMs int64) (p Plan, ok bool, err error) {
	if len(props) == 0 {
		return p, false, nil
	}
	if raw, has := protocol.PropertyRaw(props, PropDeliverAt); has {
		if nowMs <= 0 {
			nowMs = time.Now().UnixMilli() // read only when needed: most puts are not delayed
		}
		at, perr := strconv.ParseInt(string(raw), 10, 64)
		if perr != nil || at < 0 {
			return p, false, fmt.Errorf("%w: deliverAt=%.40q is not a unix time in milliseconds", ErrBadDelay, raw)
		}
		if at > nowMs+MaxDelay.Milliseconds() {
			return p, false, fmt.Errorf("%w: deliverAt=%d is more than %v ahead", ErrBadDelay, at, MaxDelay)
		}
		return Plan{Partition: TimerPartition, DeliverAt: at}, true, nil
	}
	if raw, has := protocol.PropertyRaw(props, PropDelay); has {
		lv, perr := strconv.ParseInt(string(raw), 10, 32)
		if perr != nil || lv < 0 {
			return p, false, fmt.Errorf("%w: delay=%.40q is not a delay level (0..%d)", ErrBadDelay, raw, len(s.levels))
		}
		if lv == 0 {
			return p, false, nil
		}
		return Plan{Partition: int32(min(int(lv), len(s.levels)))}, true, nil
	}
	return p, false, nil
}

// ScheduleProps builds the properties of the %SCHEDULE% record for a
// message bound to topic/partition: the client's properties without the
// routing keys the broker owns, plus realTopic and realPartition. dst is
// reused scratch space.
func ScheduleProps(dst, props []byte, topic string, partition int32) []byte {
	dst = appendWithout(dst[:0], props, isRouting)
	dst = appendStringPair(dst, PropRealTopic, topic)
	return appendIntPair(dst, PropRealPartition, int64(partition))
}

// ScheduleMessage turns m (bound for its topic/partition) into the
// %SCHEDULE% record of plan; scratch holds the new properties.
func ScheduleMessage(m *store.Message, p Plan, scratch []byte) (store.Message, []byte) {
	scratch = ScheduleProps(scratch, m.Properties, m.Topic, m.Partition)
	out := *m
	out.Topic = scheduleTopic
	out.Partition = p.Partition
	out.SysFlag |= protocol.SysFlagDelayed
	out.Properties = scratch
	if out.BornTime == 0 {
		out.BornTime = time.Now().UnixMilli()
	}
	return out, scratch
}

// announce registers a retry/DLQ topic the first time it is written.
func (s *Service) announce(topic string) {
	if s.cfg.OnTopic == nil || !protocol.IsSystemTopic(topic) {
		return
	}
	s.mu.Lock()
	if s.seen[topic] {
		s.mu.Unlock()
		return
	}
	s.seen[topic] = true
	s.mu.Unlock()
	go s.cfg.OnTopic(topic, 1)
}

// deliver appends the due %SCHEDULE% record r to its real topic: a new
// record (new queue offset, storeTime = now) whose properties lose the
// routing keys and delay, keep deliverAt (set to when it fell due) and
// gain origMsgId. A record without a valid destination is not delivered
// (logged; it stays in %SCHEDULE% until retention, `query id` shows it).
func (s *Service) deliver(r *protocol.Record, dueMs int64, scratch []byte) ([]byte, error) {
	topic, part, why := s.destination(r.Properties)
	if why != "" {
		// A constant message: the broker's log limiter (internal/logx)
		// summarises repeats.
		s.log.Error("dropping a delayed record without a valid destination", "msgId", r.MsgID, "why", why,
			"properties", string(r.Properties[:min(len(r.Properties), 512)]))
		return scratch, nil
	}
	_, hasOrig := protocol.PropertyRaw(r.Properties, PropOrigMsgID)
	scratch = appendWithout(scratch[:0], r.Properties, func(k []byte) bool {
		return isRouting(k) || string(k) == PropDelay || string(k) == PropDeliverAt
	})
	scratch = appendIntPair(scratch, PropDeliverAt, dueMs)
	if !hasOrig {
		scratch = appendIntPair(scratch, PropOrigMsgID, r.MsgID)
	}
	m := store.Message{
		Topic: topic, Partition: part, Flag: r.Flag, BornTime: r.BornTime,
		SysFlag: r.SysFlag &^ protocol.SysFlagDelayed, ReconsumeTimes: r.ReconsumeTimes,
		Properties: scratch, Data: r.Data,
	}
	ar, _, err := s.st.AppendAsync(&m)
	if err != nil {
		return scratch, err
	}
	if s.cfg.OnDelivered != nil {
		s.cfg.OnDelivered(r, &m, ar)
	}
	s.delivered.Add(1)
	if late := time.Now().UnixMilli() - dueMs; late > s.lateMax.Load() {
		s.lateMax.Store(late)
	}
	s.announce(topic)
	return scratch, nil
}

// destination reads where a %SCHEDULE% record goes; why is not empty when
// it must not go there. The broker appends its routing keys after every
// property it copies (ScheduleProps, Retry), so the last realTopic and
// realPartition are its own: one a retry reason added before them (a
// broker before reasons were checked) is not followed. Besides the
// consumers' own topics, only the retry and dead-letter topics (partition
// 0) are destinations: a record naming another system topic (the
// transaction log, %SCHEDULE% itself) is refused, as is a partition that
// Config.Partitions says the topic does not have.
func (s *Service) destination(props []byte) (topic string, part int32, why string) {
	topicRaw, _ := lastPropertyRaw(props, PropRealTopic)
	topic = protocol.Unescape(topicRaw)
	p, ok := int64(0), false
	if raw, has := lastPropertyRaw(props, PropRealPartition); has {
		v, err := strconv.ParseInt(string(raw), 10, 64)
		p, ok = v, err == nil
	}
	switch {
	case !ok || !protocol.ValidName(topic) || p < 0 || p > math.MaxInt32:
		return topic, 0, "no valid realTopic and realPartition"
	case protocol.IsSystemTopic(topic) && !isRetryOrDLQ(topic):
		return topic, 0, "realTopic is a system topic"
	case protocol.IsSystemTopic(topic) && p != 0:
		return topic, 0, "retry and dead-letter topics have partition 0 only"
	}
	if s.cfg.Partitions != nil && !protocol.IsSystemTopic(topic) {
		if n, known := s.cfg.Partitions(topic); known && p >= int64(n) {
			return topic, 0, "realPartition does not exist"
		}
	}
	return topic, int32(p), ""
}

// lastPropertyRaw is protocol.PropertyRaw taking the last pair of key.
func lastPropertyRaw(props []byte, key string) (v []byte, found bool) {
	for len(props) > 0 {
		var k, val []byte
		k, val, props = protocol.NextProperty(props)
		if string(k) == key {
			v, found = val, true
		}
	}
	return v, found
}

// rollForward re-appends the timer record r as a new %SCHEDULE% partition-0
// record before retention can remove r: same data, flag, born time and
// deliverAt, origMsgId = the id the producer was given, rolls counted. The
// indexer files the copy like any new record (it may roll again).
func (s *Service) rollForward(r *protocol.Record, scratch []byte) ([]byte, error) {
	_, hasOrig := protocol.PropertyRaw(r.Properties, PropOrigMsgID)
	n, _ := propInt(r.Properties, PropRolls)
	scratch = appendWithout(scratch[:0], r.Properties, func(k []byte) bool { return string(k) == PropRolls })
	if !hasOrig {
		scratch = appendIntPair(scratch, PropOrigMsgID, r.MsgID)
	}
	scratch = appendIntPair(scratch, PropRolls, n+1)
	m := store.Message{
		Topic: scheduleTopic, Partition: TimerPartition, Flag: r.Flag, BornTime: r.BornTime,
		SysFlag: r.SysFlag, ReconsumeTimes: r.ReconsumeTimes, Properties: scratch, Data: r.Data,
	}
	if _, _, err := s.st.AppendAsync(&m); err != nil {
		return scratch, err
	}
	s.rolled.Add(1)
	return scratch, nil
}

// errBackoff sleeps after a store error (sticky I/O errors, disk full);
// false when the service is stopping.
func (s *Service) errBackoff(what string, err error) bool {
	if errors.Is(err, store.ErrClosed) {
		return false
	}
	s.log.Error("delay: "+what+" failed; retrying in 1s", "err", err)
	select {
	case <-s.stop:
		return false
	case <-time.After(time.Second):
		return true
	}
}

// Stats are the delay service's figures for `stats` and `metaq delayed stats`.
type Stats struct {
	LevelPending []int64 // per level: stored, not yet delivered
	TimerPending int64   // deliverAt messages waiting
	NextDueMs    int64   // unix ms of the earliest known due time (0 = none)
	TimerLagMs   int64   // how far behind the timer is right now (0 when on time)
	LateMaxMs    int64   // worst delivery lateness since the previous Stats
	Delivered    int64
	Retried      int64
	DeadLetters  int64
	Rolled       int64 // far-future records re-appended ahead of retention
	IndexBytes   int64 // timer index files on disk
	TimerIndexed int64 // %SCHEDULE% partition-0 queue offset the timer has indexed up to (exclusive)
}

// Pending is every delayed message not yet delivered.
func (st Stats) Pending() int64 {
	n := st.TimerPending
	for _, v := range st.LevelPending {
		n += v
	}
	return n
}

// Stats returns a snapshot.
func (s *Service) Stats() Stats {
	st := Stats{Delivered: s.delivered.Load(), Retried: s.retried.Load(), DeadLetters: s.deadLet.Load(),
		Rolled: s.rolled.Load(), LateMaxMs: s.lateMax.Swap(0)}
	now := time.Now().UnixMilli()
	for i := range s.levelOff {
		p := int32(i + 1)
		off := s.levelOff[i].Load()
		hi := s.st.MaxOffset(scheduleTopic, p)
		st.LevelPending = append(st.LevelPending, max(0, hi-off))
		if hi > off {
			if due, ok := s.levelHeadDue(p, off); ok && (st.NextDueMs == 0 || due < st.NextDueMs) {
				st.NextDueMs = due
			}
		}
	}
	ts := s.timer.snapshot()
	st.TimerPending, st.IndexBytes, st.TimerIndexed = ts.pending, ts.indexBytes, ts.indexed
	if ts.nextDue > 0 && (st.NextDueMs == 0 || ts.nextDue < st.NextDueMs) {
		st.NextDueMs = ts.nextDue
	}
	if st.NextDueMs > 0 && now > st.NextDueMs {
		st.TimerLagMs = now - st.NextDueMs
	}
	return st
}

func (s *Service) levelHeadDue(p int32, off int64) (int64, bool) {
	res, err := s.st.Read(scheduleTopic, p, off, 1, nil)
	if err != nil {
		return 0, false
	}
	defer res.Release()
	if res.Status != store.ReadFound {
		return 0, false
	}
	r, _, err := protocol.DecodeRecord(res.Bufs[0], 0)
	if err != nil {
		return 0, false
	}
	return r.StoreTime + s.levels[p-1].Milliseconds(), true
}

// hasScheduled reports whether %SCHEDULE% ever held a delayed message.
func (s *Service) hasScheduled() bool {
	for p := int32(0); p <= int32(len(s.levels)); p++ {
		if s.st.MaxOffset(scheduleTopic, p) > 0 {
			return true
		}
	}
	return false
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
