package delay

import (
	"cmp"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

const (
	indexBatchBytes = 256 << 10
	deliverBatch    = 4096
	// maxWindow bounds the in-memory window: no further bucket is loaded
	// while this many entries wait (a backlog after an outage drains in
	// due order, a bucket at a time).
	maxWindow    = 1 << 20
	expandAhead  = 10 * time.Minute // hour buckets roll into second buckets this early
	ckEvery      = time.Second
	idleProgress = time.Minute
)

// timer owns the deliverAt index; only its goroutine touches its fields
// except mu/snap.
type timer struct {
	s   *Service
	dir string

	pos      int64 // next %SCHEDULE% partition-0 offset to index
	rolledTo int64 // ms, hour boundary: entries due below it live in second buckets
	loadedTo int64 // second: every second bucket below it has been loaded

	posID int64 // every record below pos has an id below posID

	// rollAfter: a record whose due time is more than this after its store
	// time is re-appended (rolled forward) at storeTime+rollAfter, half the
	// %SCHEDULE% retention, so that retention never removes it (0 = never).
	rollAfter int64
	idleEvery time.Duration // idle progress interval (inside retention)
	// rolledSeen: the rolled-forward records delivered lately (origMsgId →
	// due), so that two copies of one roll (a crash between the re-append
	// and the progress record) deliver once.
	rolledSeen map[int64]int64

	// Recovery rules from the last progress record and checkpoint (id bounds).
	recP, recT, recPi int64

	fine, coarse *bucketSet
	heap         entryHeap
	writes       map[string][]byte // buffered appends per bucket file
	dirty        map[string]bool   // written since the last checkpoint
	newFiles     bool
	toDelete     map[int64]bool // loaded second buckets, removed once progress passes them
	onDisk       int64          // entries in files (approximate, for stats)

	lastQ, lastT  int64
	maxDone       int64 // the latest due time of an entry handled (delivered or rolled)
	ckPi          int64
	lastProgress  time.Time
	lastCk        time.Time
	ckQi, ckRoll  int64
	progressDirty bool
	buf, scratch  []byte

	wake chan struct{}

	mu   sync.Mutex // guards snap
	snap timerSnap
}

type timerSnap struct {
	pending, nextDue, indexBytes, indexed int64
}

func newTimer(s *Service, dir string, pr progress) (*timer, error) {
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	t := &timer{
		s: s, dir: dir, fine: newBucketSet(), coarse: newBucketSet(),
		writes: map[string][]byte{}, dirty: map[string]bool{}, toDelete: map[int64]bool{},
		wake: make(chan struct{}, 1), recT: pr.timerT, rolledSeen: map[int64]int64{},
		idleEvery: idleProgress,
	}
	if ret := s.st.RetentionOf(scheduleTopic); ret > 0 {
		t.rollAfter = max(ret.Milliseconds()/2, 1)
		t.idleEvery = min(idleProgress, max(ret/4, 10*time.Millisecond))
	}
	ck, err := readCheckpoint(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("timer index checkpoint unusable; rebuilding the index from %SCHEDULE%", "err", err)
		}
		ck = checkpoint{qi: 0, pi: 0, rolled: now - now%hourMs + hourMs}
		if err := t.removeBuckets(func(byte, int64) bool { return true }); err != nil {
			return nil, err
		}
	}
	t.rolledTo = ck.rolled
	t.ckQi, t.ckPi, t.ckRoll = ck.qi, ck.pi, ck.rolled
	tSec := pr.timerT / 1000
	if err := t.scanDir(tSec); err != nil {
		return nil, err
	}
	st := s.st
	lo := st.MinOffset(scheduleTopic, TimerPartition)
	t.pos = max(lo, min(ck.qi, pr.timerQ))
	// Bounds past the log's end (a log cut at recovery) would cover records
	// appended from now on: cap them at the log's end.
	end := protocol.MakeMsgID(s.cfg.BrokerID, st.Stats().CommitLogMax)
	t.recP, t.recPi = min(pr.timerP, end), min(ck.pi, end)
	t.posID = min(t.recP, t.recPi)
	t.loadedTo = min(tSec, now/1000)
	t.lastQ, t.lastT = pr.timerQ, pr.timerT
	t.lastProgress = time.Now()
	return t, nil
}

// scanDir lists the bucket files: second buckets below tSec were delivered
// (removed), hour buckets below rolledTo were rolled (removed), torn tails
// are cut.
func (t *timer) scanDir(tSec int64) error {
	des, err := os.ReadDir(t.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		kind, key, ok := parseBucketName(de.Name())
		if !ok {
			continue
		}
		path := filepath.Join(t.dir, de.Name())
		if (kind == 's' && key < tSec) || (kind == 'h' && key < t.rolledTo) {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		n := fi.Size() / entrySize
		if fi.Size()%entrySize != 0 {
			t.s.log.Warn("timer index: cutting a torn tail", "file", de.Name(), "bytes", fi.Size()%entrySize)
			if err := os.Truncate(path, n*entrySize); err != nil {
				return err
			}
		}
		if kind == 's' {
			t.fine.add(key, n)
		} else {
			t.coarse.add(key, n)
		}
		t.onDisk += n
	}
	return nil
}

func (t *timer) removeBuckets(match func(kind byte, key int64) bool) error {
	des, err := os.ReadDir(t.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if kind, key, ok := parseBucketName(de.Name()); ok && match(kind, key) {
			if err := os.Remove(filepath.Join(t.dir, de.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *timer) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// dueOf is when a partition-0 record falls due: its deliverAt, or its
// store time when that is later (a past deliverAt delivers at once).
func dueOf(r *protocol.Record) int64 {
	at, ok := propInt(r.Properties, PropDeliverAt)
	if !ok || at < r.StoreTime {
		return r.StoreTime
	}
	return at
}

// entryFor is the index entry of a partition-0 record: due at dueOf, or,
// when that lies beyond what retention keeps, a roll-forward entry at
// storeTime+rollAfter.
func (t *timer) entryFor(r *protocol.Record) entry {
	due := dueOf(r)
	if t.rollAfter > 0 && due-r.StoreTime > t.rollAfter {
		return entry{due: r.StoreTime + t.rollAfter, id: r.MsgID, roll: true}
	}
	return entry{due: due, id: r.MsgID}
}

func (t *timer) run() {
	s := t.s
	defer s.wg.Done()
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	for {
		busy, err := t.step()
		if err != nil {
			if !s.errBackoff("timer", err) {
				break
			}
			continue
		}
		if busy {
			select {
			case <-s.stop:
			default:
				continue
			}
			break
		}
		sleep.Reset(t.nextWake())
		select {
		case <-s.stop:
		case <-sleep.C:
			continue
		case <-t.wake:
			t.progressDirty = true
			continue
		case <-s.st.Wait(scheduleTopic, TimerPartition, t.pos):
			continue
		}
		break
	}
	// The final progress record is written by Close (finish), once every
	// level goroutine has stopped too: written here, it could precede the
	// last deliveries of a level still finishing its batch.
}

// step runs one round: index new records, roll hour buckets, load due
// second buckets, deliver what is due, write progress and checkpoint.
// busy means there is more to do at once.
func (t *timer) step() (busy bool, err error) {
	more, err := t.index()
	if err != nil {
		return false, err
	}
	now := time.Now()
	nowMs := now.UnixMilli()
	if err := t.roll(nowMs); err != nil {
		return false, err
	}
	if err := t.load(nowMs); err != nil {
		return false, err
	}
	n, err := t.deliverDue()
	if err != nil {
		return false, err
	}
	if n > 0 {
		t.progressDirty = true
	}
	if err := t.maybeProgress(now, false); err != nil {
		return false, err
	}
	if now.Sub(t.lastCk) >= ckEvery && (t.pos != t.ckQi || t.posID != t.ckPi || t.rolledTo != t.ckRoll) {
		if err := t.checkpoint(); err != nil {
			return false, err
		}
	}
	t.publish()
	return more || n == deliverBatch || (len(t.heap) > 0 && t.heap[0].due <= time.Now().UnixMilli()), nil
}

func (t *timer) nextWake() time.Duration {
	now := time.Now().UnixMilli()
	next := now + t.idleEvery.Milliseconds()
	if len(t.heap) > 0 {
		next = min(next, t.heap[0].due)
	}
	if k, ok := t.fine.min(); ok {
		next = min(next, k*1000-t.s.cfg.Lookahead.Milliseconds())
	}
	next = min(next, t.rolledTo-expandAhead.Milliseconds())
	if t.progressDirty || t.pos != t.lastQ {
		next = min(next, t.lastProgress.Add(t.s.cfg.ProgressEvery).UnixMilli())
	}
	if t.pos != t.ckQi || t.rolledTo != t.ckRoll {
		next = min(next, t.lastCk.Add(ckEvery).UnixMilli())
	}
	return max(time.Duration(next-now)*time.Millisecond, 0)
}

// index reads new partition-0 records and files their entries.
func (t *timer) index() (more bool, err error) {
	st := t.s.st
	for i := 0; i < 8; i++ {
		res, err := st.Read(scheduleTopic, TimerPartition, t.pos, indexBatchBytes, nil)
		if err != nil {
			return false, err
		}
		switch res.Status {
		case store.ReadNoMessage, store.ReadOffsetTooLarge: // too large: the store is still indexing after a restart
			res.Release()
			return false, t.flushWrites()
		case store.ReadOffsetTooSmall:
			t.s.log.Warn("deliverAt messages expired by retention before they were indexed", "from", t.pos, "to", res.MinOffset)
			t.pos = res.MinOffset
			res.Release()
			continue
		case store.ReadFiltered:
			t.pos = max(t.pos, res.NextOffset)
			res.Release()
			continue
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				r, size, derr := protocol.DecodeRecordNoCRC(buf) // verified again before delivery
				if derr != nil {
					res.Release()
					return false, derr
				}
				buf = buf[size:]
				t.file(t.entryFor(&r))
				t.pos = r.QueueOffset + 1
				t.posID = r.MsgID + 1
			}
		}
		res.Release()
	}
	return true, t.flushWrites()
}

// file adds an entry read from the log, applying the recovery rules.
func (t *timer) file(e entry) {
	if e.id < t.recP && e.due < t.recT {
		return // delivered before the restart
	}
	if e.id < t.recPi && e.due >= t.recT {
		return // its entry is durable in a bucket that is still there
	}
	t.add(e)
}

func (t *timer) add(e entry) {
	sec := e.due / 1000
	var name string
	switch {
	case sec < t.loadedTo:
		t.heap.push(e)
		name = fineName(sec)
		t.toDelete[sec] = true
	case e.due < t.rolledTo:
		t.fine.add(sec, 1)
		name = fineName(sec)
	default:
		hour := e.due - e.due%hourMs
		t.coarse.add(hour, 1)
		name = coarseName(hour)
	}
	b := t.writes[name]
	var eb [entrySize]byte
	putEntry(eb[:], e)
	t.writes[name] = append(b, eb[:]...)
	t.onDisk++
}

// flushWrites appends the buffered entries to their files.
func (t *timer) flushWrites() error {
	for name, b := range t.writes {
		path := filepath.Join(t.dir, name)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
			t.newFiles = true
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		t.dirty[name] = true
		delete(t.writes, name)
	}
	return nil
}

// checkpoint makes the bucket files durable, then records how far.
func (t *timer) checkpoint() error {
	if err := t.flushWrites(); err != nil {
		return err
	}
	for name := range t.dirty {
		f, err := os.OpenFile(filepath.Join(t.dir, name), os.O_WRONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			delete(t.dirty, name)
			continue
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		delete(t.dirty, name)
	}
	if t.newFiles {
		if err := syncDir(t.dir); err != nil {
			return err
		}
		t.newFiles = false
	}
	ck := checkpoint{qi: t.pos, pi: t.posID, rolled: t.rolledTo}
	if err := writeCheckpoint(t.dir, ck); err != nil {
		return err
	}
	t.ckQi, t.ckPi, t.ckRoll, t.lastCk = ck.qi, ck.pi, ck.rolled, time.Now()
	return nil
}

// readBucket returns the valid entries of a bucket file covering [lo, hi).
func (t *timer) readBucket(name string, lo, hi int64) ([]entry, error) {
	b, err := os.ReadFile(filepath.Join(t.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(b)/entrySize)
	bad := 0
	for len(b) >= entrySize {
		e := getEntry(b)
		b = b[entrySize:]
		if e.due < lo || e.due >= hi || e.id < 0 {
			bad++
			continue
		}
		if e.id < t.recP && e.due < t.recT {
			continue
		}
		out = append(out, e)
	}
	if bad > 0 {
		t.s.log.Warn("timer index: skipped entries outside their bucket", "file", name, "entries", bad)
	}
	// An entry filed twice (re-indexed after a crash, a roll repeated)
	// is delivered once.
	slices.SortFunc(out, func(a, b entry) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.due, b.due)) })
	out = slices.CompactFunc(out, func(a, b entry) bool { return a.id == b.id && a.roll == b.roll })
	return out, nil
}

// roll streams the hour buckets starting within expandAhead into second
// buckets.
func (t *timer) roll(nowMs int64) error {
	for nowMs+expandAhead.Milliseconds() >= t.rolledTo {
		hour := t.rolledTo
		t.rolledTo += hourMs
		if !t.coarse.has(hour) {
			continue
		}
		if err := t.flushWrites(); err != nil {
			return err
		}
		name := coarseName(hour)
		es, err := t.readBucket(name, hour, hour+hourMs)
		if err != nil {
			return err
		}
		t.onDisk -= int64(len(es))
		for _, e := range es {
			t.add(e)
		}
		// Durable second buckets and checkpoint first, then the hour file goes.
		if err := t.checkpoint(); err != nil {
			return err
		}
		t.coarse.remove(hour)
		if err := os.Remove(filepath.Join(t.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// load moves the second buckets due within Lookahead into memory.
func (t *timer) load(nowMs int64) error {
	horizon := nowMs + t.s.cfg.Lookahead.Milliseconds()
	for len(t.heap) < maxWindow {
		sec, ok := t.fine.min()
		if !ok || sec*1000 > horizon {
			t.loadedTo = max(t.loadedTo, horizon/1000+1)
			return nil
		}
		name := fineName(sec)
		if _, pending := t.writes[name]; pending {
			if err := t.flushWrites(); err != nil {
				return err
			}
		}
		es, err := t.readBucket(name, sec*1000, sec*1000+1000)
		if err != nil {
			return err
		}
		t.fine.remove(sec)
		t.toDelete[sec] = true
		t.loadedTo = max(t.loadedTo, sec+1)
		for _, e := range es {
			t.heap.push(e)
		}
	}
	return nil
}

// deliverDue delivers the entries whose time has come, oldest first.
func (t *timer) deliverDue() (int, error) {
	return t.deliverUpTo(time.Now().UnixMilli(), deliverBatch)
}

// deliverUpTo delivers up to maxN entries due at or before limit.
func (t *timer) deliverUpTo(limit int64, maxN int) (int, error) {
	s := t.s
	n := 0
	now := time.Now().UnixMilli()
	for n < maxN && len(t.heap) > 0 && t.heap[0].due <= limit {
		e := t.heap.pop()
		t.onDisk--
		// By id: the id holds the physical offset, no index lookup.
		res, err := s.st.ReadByID(e.id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && res.Count == 0) {
			if res != nil {
				res.Release()
			}
			s.log.Error("a deliverAt message is gone (retention?) or its index entry is bad; skipped", "msgId", e.id, "due", e.due)
			continue
		}
		if err != nil {
			t.heap.push(e)
			return n, err
		}
		r, _, derr := protocol.DecodeRecord(res.Bufs[0], 0)
		// A roll entry's time depends on the retention in force when it was
		// filed: only its plausibility is checked.
		match := (e.roll && e.due >= r.StoreTime) || (!e.roll && dueOf(&r) == e.due)
		if derr != nil || string(r.Topic) != scheduleTopic || r.Partition != TimerPartition || !match {
			res.Release()
			s.log.Warn("timer index entry does not match its record; skipped", "msgId", e.id, "err", derr)
			continue
		}
		switch {
		case e.roll && dueOf(&r) > now:
			t.scratch, err = s.rollForward(&r, t.scratch)
		case t.seenRolled(&r, e.due, e.roll): // (a roll entry past due delivers)
			s.log.Info("a rolled-forward deliverAt message has two copies (a crash during its roll); delivered once", "msgId", r.MsgID)
		default:
			t.scratch, err = s.deliver(&r, e.due, t.scratch)
		}
		res.Release()
		if err != nil {
			t.heap.push(e)
			return n, err
		}
		t.maxDone = max(t.maxDone, e.due)
		n++
	}
	if n > 0 {
		return n, s.st.WriteOut()
	}
	return n, nil
}

// watermark is the progress record's tt: below it, every entry of an
// offset below pos has been delivered.
func (t *timer) watermark() int64 {
	w := int64(math.MaxInt64)
	if len(t.heap) > 0 {
		w = t.heap[0].due
	}
	if k, ok := t.fine.min(); ok {
		w = min(w, k*1000)
	}
	if k, ok := t.coarse.min(); ok {
		w = min(w, k)
	}
	if w == math.MaxInt64 {
		w = t.loadedTo * 1000 // nothing pending: any bound is true
	}
	return w
}

func (t *timer) maybeProgress(now time.Time, force bool) error {
	w := t.watermark()
	changed := t.progressDirty || w != t.lastT || t.pos != t.lastQ
	due := changed && now.Sub(t.lastProgress) >= t.s.cfg.ProgressEvery
	// Idle: one record a minute keeps the newest progress inside the
	// retention window (only once anything was ever scheduled).
	idle := now.Sub(t.lastProgress) >= t.idleEvery && t.s.hasScheduled()
	if !force && !due && !idle {
		return nil
	}
	var err error
	t.buf, err = t.s.writeProgress(t.pos, t.posID, w, t.buf)
	if err != nil {
		return err
	}
	t.lastQ, t.lastT, t.lastProgress, t.progressDirty = t.pos, w, now, false
	for id, due := range t.rolledSeen {
		if due+10*time.Minute.Milliseconds() < w {
			delete(t.rolledSeen, id)
		}
	}
	for sec := range t.toDelete {
		if (sec+1)*1000 <= w {
			if err := os.Remove(filepath.Join(t.dir, fineName(sec))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			delete(t.toDelete, sec)
		}
	}
	return nil
}

// seenRolled reports whether a copy of r was delivered already, when r is a
// rolled-forward record (or delivered from a roll entry); it remembers r
// otherwise. Copies share their origMsgId (the first record's id).
func (t *timer) seenRolled(r *protocol.Record, due int64, fromRoll bool) bool {
	if _, rolled := protocol.PropertyRaw(r.Properties, PropRolls); !rolled && !fromRoll {
		return false
	}
	orig, ok := propInt(r.Properties, PropOrigMsgID)
	if !ok {
		orig = r.MsgID
	}
	if _, seen := t.rolledSeen[orig]; seen {
		return true
	}
	t.rolledSeen[orig] = due
	return false
}

func (t *timer) publish() {
	var next int64
	if len(t.heap) > 0 {
		next = t.heap[0].due
	} else if k, ok := t.fine.min(); ok {
		next = k * 1000
	} else if k, ok := t.coarse.min(); ok {
		next = k
	}
	t.mu.Lock()
	t.snap = timerSnap{pending: int64(len(t.heap)) + t.fine.total + t.coarse.total, nextDue: next,
		indexBytes: max(t.onDisk, 0) * entrySize, indexed: t.pos}
	t.mu.Unlock()
}

func (t *timer) snapshot() timerSnap {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.snap
}

// finish writes the last progress record and checkpoint on stop; Close
// calls it after the timer and level goroutines have all returned, so the
// record covers every delivery.
//
// An entry filed late (its record indexed after later entries were
// delivered: a record stored just before an earlier step's deliveries)
// can sit in the window below entries already delivered; the watermark
// would then be below those, and a restart would deliver them again from
// their bucket. So finish first delivers what is due up to the latest due
// time already handled: the watermark is then above every delivery.
func (t *timer) finish() error {
	if err := t.flushWrites(); err != nil {
		return err
	}
	for len(t.heap) > 0 && t.heap[0].due <= t.maxDone {
		if _, err := t.deliverUpTo(t.maxDone, deliverBatch); err != nil {
			return err
		}
	}
	if err := t.maybeProgress(time.Now(), true); err != nil {
		return err
	}
	return t.checkpoint()
}
