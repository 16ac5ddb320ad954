// Package store is metaq's storage engine (docs/storage.md): one sequential
// commit log shared by every topic, per-partition index files of fixed
// 16-byte units built asynchronously by a dispatcher, group-commit flushing,
// crash recovery, retention, a key index and time lookup.
//
// Files (one concern each): segment.go (one mapped commit-log file),
// commitlog.go (append, roll, preallocation), flush.go (group commit),
// stage.go (the write path: records staged, then pwritten in batches),
// index.go (partition index files), filecache.go (open index file LRU),
// dispatch.go (builds indexes), read.go (reads, lookups), repair.go (index
// verification and repair on reads), wait.go (long-poll
// notification), recovery.go, checkpoint.go, retention.go, keyindex.go,
// stats.go, faults.go (error classification and test fault hooks),
// watermark.go (a replica's read limit kept on disk).
// docs/storage.md describes the on-disk format for operators.
//
// # Layers
//
// The commit log (commitLog: commitlog.go, stage.go, flush.go, segment.go,
// prefill.go, and the log half of recovery.go) owns the append lock and
// everything it guards, assigns queue offsets inside its append, and
// publishes its positions (written, flushed, visible, oldest). The Store
// keeps topics and partitions, the dispatcher building indexes from the log,
// reads, retention and the checkpoint, and talks to the log through a few
// methods (see commitLog). docs/internal/store-api.md describes the seam.
//
// # Goroutines
//
// Exactly four per Store, whatever the number of partitions: the commit
// log's flusher (flush.go) and segment preallocator (commitlog.go; it also
// zero-fills ahead of the writer, prefill.go), the Store's dispatcher
// (dispatch.go) and housekeeper (checkpoints and retention, retention.go).
// Close stops them all.
//
// # Lock rules
//
// Locks are taken in this order and never the reverse; a function whose name
// ends in Locked expects the append lock (l.mu, s.clog.mu) to be held.
//
//  1. s.ckptMu — serialises checkpoints (index syncs and the checkpoint
//     file). Held across fsyncs; never taken by appenders or readers.
//  2. s.retMu — serialises retention passes.
//  3. l.flushMu — serialises flush rounds (flushOnce). Held across
//     fdatasync, so it is never taken by appenders.
//  4. l.stage.wmu — serialises writing staged records out (stage.go; the
//     flusher, writeOut callers, readers catching up, an appender whose
//     buffer is full). Held across the pwrite, never with l.mu held.
//     4a. s.dispMu — held by whoever runs a dispatch batch (dispatch.go):
//     the dispatcher goroutine, or an inline dispatch (TryLock only, with
//     l.flushMu held in the flusher). WaitFunc callbacks run after it is
//     released.
//  5. l.mu — THE APPEND LOCK (commitLog). Guards the write position and
//     active segment, assigning queue offsets (partition.next is only
//     stored under it), the last store time, the pending group-commit round,
//     the put counters (also topicState.puts), the sticky errors (writeErr,
//     refuseErr, rollErr), l.closed, the staging buffer and its positions
//     (l.stage) and the appender's partition cache. It is never held across
//     fsync, fallocate, pwrite or any other blocking I/O: a roll that finds
//     the next segment not ready waits for the preallocator with l.mu
//     released (makeRoomLocked).
//  6. l.segsMu — replacing the segment list (roll, retention, recovery);
//     readers load l.segs atomically without it.
//  7. s.partsMu — the shared topic/partition maps (s.topics, topic.parts).
//  8. s.repairMu — serialises index repairs on the read path (repair.go);
//     taken by a reader holding no other lock.
//  9. p.tailMu (a partition's buffered index units, indextail.go; held
//     across the pwrite that writes them out).
//  10. p.ixMu (a partition's index file list; held while creating a file).
//  11. leaf locks, never held while taking another: s.files.mu (open index
//     file LRU), s.tails.mu, tailBufs.mu (tailarena.go), p.waitMu, s.progWait (poswait), l.pre.mu, s.keys.mu,
//     s.wm.mu (the watermark file; held across its pwrite).
package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/metaqgo/metaq/internal/poswait"
	"github.com/metaqgo/metaq/protocol"
)

// Schedule tells when retention runs next (deleteWhen).
type Schedule interface {
	Next(after time.Time) time.Time
}

// Config configures a Store. Zero values take MetaQ's defaults.
type Config struct {
	Dir              string                           // dataPath
	BrokerID         int                              // 0..32767, high bits of msgId
	SegmentSize      int64                            // maxSegmentSize, default 1 GiB, at most protocol.MaxSegmentSize; tests use e.g. 64 KiB
	IndexFileSize    int64                            // indexFileSize, default 20 MiB, multiple of 16
	UnflushThreshold int                              // <= 0: sync flush with group commit; else fsync after N messages
	UnflushInterval  time.Duration                    // async: fsync at least this often (default 10s)
	MaxMessageSize   int                              // bound on data length (default 4 MiB)
	Retention        time.Duration                    // deletePolicy delete,N; 0 = keep forever
	TopicRetention   func(topic string) time.Duration // optional per-topic override (0 = use Retention)
	DeleteWhen       Schedule                         // when to run retention; nil = every hour
	Logger           *slog.Logger                     // nil = slog.Default()
	Now              func() time.Time                 // nil = time.Now (tests)

	// Additions to the documented API (all optional).

	// CheckpointInterval is how often the checkpoint is written (default 1s).
	// Recovery after a crash rescans the commit log from the last checkpoint.
	CheckpointInterval time.Duration
	// MaxOpenIndexFiles caps the index files kept open; the least recently
	// used are closed and reopened on demand. Default: RLIMIT_NOFILE minus
	// 4096 for connections and segments, at least 256 (Go raises the soft
	// limit to the hard one at startup).
	MaxOpenIndexFiles int
	// KeyIndexSlots and KeyIndexEntries size one key-index file (defaults
	// 1 Mi slots, 4 Mi entries: 84 MiB, sparse).
	KeyIndexSlots   int
	KeyIndexEntries int
	// IndexBufferSize bounds the memory that holds partitions' newest index
	// units until they fill a 4 KiB block (4 KiB per partition with buffered
	// units; default 64 MiB, enough for 16,384 partitions; negative = no
	// buffering). Partitions beyond it write their units through.
	IndexBufferSize int64
	// Replica opens the store as a slave's copy (docs/replication.md,
	// "Reads from a slave"): local appends are refused from the start
	// (SetReplica(true)) and reads are limited (SetReadLimit) to the high
	// watermark of the data directory's watermark file (watermark.go) before
	// recovery indexes the log.
	Replica bool
	// ZeroFill selects when the commit log is zero-filled ahead of the
	// writer so that group-commit fsyncs do not convert unwritten extents
	// (prefill.go). Default ZeroFillAuto: in sync-flush mode only.
	ZeroFill ZeroFill

	hooks        *faultHooks // tests only: injected I/O failures (faults.go)
	prefillGap   int64       // tests only: filler distance from the writer
	prefillChunk int64       // tests only: filler write size
	prefillLead  int64       // tests only: how far past the gap the filler goes
	stageSize    int         // tests only: staging buffer size (stage.go)
}

// Defaults (MetaQ's).
const (
	DefaultSegmentSize        = 1 << 30
	DefaultIndexFileSize      = 20 << 20
	DefaultUnflushInterval    = 10 * time.Second
	DefaultMaxMessageSize     = 4 << 20
	DefaultCheckpointInterval = time.Second
	DefaultKeyIndexSlots      = 1 << 20
	DefaultKeyIndexEntries    = 4 << 20

	minSegmentSize = 4096
)

// Errors. ErrDiskFull matches errors.Is(err, ErrIO) as well.
var (
	ErrClosed          = errors.New("store: closed")
	ErrMessageTooLarge = errors.New("store: message too large")
	ErrBadTopic        = errors.New("store: bad topic name")
	ErrBadPartition    = errors.New("store: bad partition") // addition: partition < 0
	ErrDiskFull        = error(diskFullError{})
	ErrIO              = errors.New("store: I/O error")
	ErrNotFound        = errors.New("store: not found")
	// ErrCorrupt (addition, matches ErrIO) is returned by reads that meet a
	// record failing verification; the record is never served.
	ErrCorrupt = error(corruptError{})
	// ErrLocked (addition) is returned by Open when another process holds the
	// directory's lock file.
	ErrLocked = errors.New("store: data directory is locked by another process")
)

// Store is one broker's storage. All methods are safe for concurrent use.
type Store struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	hooks *faultHooks
	sync  bool // sync flush (group commit)

	logDir, indexDir, keyDir string
	lockFile                 *os.File

	ra  readAheads // chunks of the commit log advised for reading (readahead.go)
	pop readAheads // chunks of the commit log populated for reading (readahead.go)
	pf  prefetches // direct reads started ahead of cold readers (coldread.go)

	// The commit log: the append lock and everything it guards, the flush
	// positions, the segment list, the flusher and preallocator (commitlog.go).
	clog *commitLog

	// Published position: indexes cover every record below this.
	dispatched  atomic.Int64
	dispFailing atomic.Bool // the dispatcher is retrying after an index write error (catchUp gives up sooner)

	ckptMu    sync.Mutex
	lastCkpt  *checkpointData // guarded by ckptMu
	shut      bool            // files closed; guarded by ckptMu
	ckptCount int             // periodic checkpoints; guarded by ckptMu
	retMu     sync.Mutex
	isClosed  atomic.Bool

	partsMu sync.RWMutex
	topics  map[string]*topicState
	// pending holds the WaitFunc waiters of partitions that do not exist
	// yet (never written), guarded by partsMu; partition moves them onto
	// the partition it creates (wait.go).
	pending map[pendingKey]*Waiter

	files *fileCache
	tails *tailPool
	keys  *keyIndex
	disp  *dispatcher

	dispKick  chan struct{}
	dispSleep atomic.Bool
	// dispMu is held by whoever runs a dispatch batch: the dispatcher
	// goroutine, or a goroutine that just made records visible and
	// dispatches them itself (dispatchInline, dispatch.go). It guards disp.
	dispMu sync.Mutex
	// waitParts counts partitions with an armed long-poll channel (wait.go).
	waitParts atomic.Int32

	// Dispatch progress notification for catchUp (wait.go).
	progWait poswait.Waiters
	stop     chan struct{}
	wg       sync.WaitGroup

	repairMu sync.Mutex // serialises index repairs on the read path (repair.go)
	logLimit logLimiter // rate-limits log lines readers can trigger (repair.go)

	counters counters

	wm      watermark       // a replica's read limit on disk (watermark.go)
	visWait poswait.Waiters // WaitVisible (raw.go)
	wrWait  poswait.Waiters // WaitWritten (raw.go)
	openEnd int64           // the commit log's end once Open recovered it (OpenPos)
}

// topicState is one topic's partitions.
type topicState struct {
	name  string
	dir   string               // index/<topic>
	parts map[int32]*partition // guarded by s.partsMu
	puts  int64                // appended since open, guarded by the append lock (s.clog.mu)
	_     [0]func()            // not comparable
}

// Open opens (creating if needed) the store in cfg.Dir: takes the directory
// lock, recovers, and starts the flusher, dispatcher, preallocator and
// housekeeper goroutines.
func Open(cfg Config) (*Store, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:      cfg,
		log:      cfg.Logger,
		now:      cfg.Now,
		hooks:    cfg.hooks,
		sync:     cfg.UnflushThreshold <= 0,
		logDir:   filepath.Join(cfg.Dir, "commitlog"),
		indexDir: filepath.Join(cfg.Dir, "index"),
		keyDir:   filepath.Join(cfg.Dir, "keyindex"),
		topics:   make(map[string]*topicState),
		dispKick: make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	s.log = s.log.With("component", "store", "dir", cfg.Dir)
	s.files = newFileCache(cfg.MaxOpenIndexFiles, s.hooks)
	s.tails = newTailPool(cfg.IndexBufferSize)
	s.clog = newCommitLog(&s.cfg, s.log, s.logDir, &s.counters, s.stop, &s.wg)
	s.clog.partitionFor = func(topic string, part int32) *partition { return s.partition(topic, part, true) }
	s.clog.onVisible = func() {
		if !s.dispatchInline() {
			s.wakeDispatcher()
		}
		s.visWait.Wake()
	}
	s.clog.onWritten = s.wrWait.Wake
	s.disp = newDispatcher(s)
	for _, d := range []string{cfg.Dir, s.logDir, s.indexDir, s.keyDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	if err := s.lockDir(); err != nil {
		return nil, err
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		s.unlockDir()
		return nil, err
	}
	s.openEnd = s.clog.writePos()
	s.clog.start() // the flusher and the preallocator
	s.wg.Add(2)
	go s.dispatchLoop()
	go s.housekeep()
	return s, nil
}

func (c *Config) fill() error {
	if c.Dir == "" {
		return errors.New("store: Config.Dir is empty")
	}
	if c.BrokerID < 0 || c.BrokerID > 32767 {
		return fmt.Errorf("store: BrokerID %d out of range 0..32767", c.BrokerID)
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.SegmentSize < minSegmentSize {
		return fmt.Errorf("store: SegmentSize %d below %d", c.SegmentSize, minSegmentSize)
	}
	if c.SegmentSize > protocol.MaxSegmentSize {
		return fmt.Errorf("store: SegmentSize %d above %d (4 GiB - 1): the BLANK filler ending a segment records its size in 32 bits",
			c.SegmentSize, int64(protocol.MaxSegmentSize))
	}
	if c.IndexFileSize == 0 {
		c.IndexFileSize = DefaultIndexFileSize
	}
	if c.IndexFileSize < unitSize || c.IndexFileSize%unitSize != 0 {
		return fmt.Errorf("store: IndexFileSize %d is not a positive multiple of %d", c.IndexFileSize, unitSize)
	}
	if c.UnflushInterval <= 0 {
		c.UnflushInterval = DefaultUnflushInterval
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.MaxOpenIndexFiles <= 0 {
		c.MaxOpenIndexFiles = defaultMaxOpenIndexFiles()
	}
	if c.KeyIndexSlots <= 0 {
		c.KeyIndexSlots = DefaultKeyIndexSlots
	}
	if c.KeyIndexEntries <= 0 {
		c.KeyIndexEntries = DefaultKeyIndexEntries
	}
	if c.IndexBufferSize == 0 {
		c.IndexBufferSize = DefaultIndexBufferSize
	}
	return nil
}

func defaultMaxOpenIndexFiles() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return int(min(max(int64(rl.Cur)-4096, 256), 1<<20))
}

// lockDir takes the flock on <dir>/lock and creates the abort marker.
func (s *Store) lockDir() error {
	path := filepath.Join(s.cfg.Dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s (is another broker running on this dataPath?)", ErrLocked, path)
		}
		return fmt.Errorf("store: flock %s: %w", path, err)
	}
	// The pid is informational only; the flock is what excludes.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	s.lockFile = f
	return nil
}

func (s *Store) unlockDir() {
	if s.lockFile != nil {
		_ = unix.Flock(int(s.lockFile.Fd()), unix.LOCK_UN)
		s.lockFile.Close()
		s.lockFile = nil
	}
}

func (s *Store) abortPath() string { return filepath.Join(s.cfg.Dir, "abort") }

// Close flushes, writes a final checkpoint, removes the abort marker and
// releases the lock. Readers holding ReadResults keep their segments mapped
// until they Release them.
func (s *Store) Close() error {
	if !s.clog.close() {
		return ErrClosed
	}
	s.isClosed.Store(true)

	close(s.stop)
	s.pf.dropAll() // cold reads' read-ahead (coldread.go): none starts after this
	s.wg.Wait()

	// Everything below runs with the background goroutines stopped.
	errFlush := s.clog.flushOnce()
	s.dispMu.Lock()
	errDisp := s.disp.run(s.clog.visibleLimit())
	fired := s.disp.takeFired()
	s.dispMu.Unlock()
	runFired(fired)
	errCkpt := s.checkpoint()
	s.releaseTails()
	s.closeAllWaiters()

	clean := s.clog.clean()
	var errAbort error
	if clean && errFlush == nil && errDisp == nil && errCkpt == nil {
		if err := os.Remove(s.abortPath()); err != nil && !os.IsNotExist(err) {
			errAbort = err
		} else {
			errAbort = syncDir(s.cfg.Dir)
		}
	}
	s.clog.discardPrepared()
	s.wm.close()
	s.ckptMu.Lock()
	s.shut = true // a racing Flush must not write a checkpoint any more
	s.ckptMu.Unlock()
	s.retMu.Lock() // nor may a racing DeleteExpired still be running
	s.closeFiles()
	s.retMu.Unlock()
	s.unlockDir()
	return errors.Join(errFlush, errDisp, errCkpt, errAbort)
}

// closeFiles drops the segment list's references, closes index files and
// the commit log's fsync ring (Close calls it after its last flush).
func (s *Store) closeFiles() {
	s.clog.closeSegments()
	s.clog.ring.close()
	s.files.closeAll()
	if s.keys != nil {
		s.keys.close()
	}
}

// maxTopicLen is the longest topic name (its length is stored in one byte).
const maxTopicLen = 255

// validTopic reports whether a topic can be stored: 1..255 bytes and safe as a
// directory name (the broker enforces the stricter charset of docs/protocol.md §1).
func validTopic(t string) bool {
	if len(t) == 0 || len(t) > maxTopicLen || t == "." || t == ".." {
		return false
	}
	return !strings.ContainsAny(t, "/\x00")
}

// topicLocked returns (creating) the shared state of topic; s.partsMu must be
// held for writing.
func (s *Store) topicLocked(topic string) *topicState {
	t := s.topics[topic]
	if t == nil {
		t = &topicState{name: topic, dir: filepath.Join(s.indexDir, topic), parts: make(map[int32]*partition)}
		s.topics[topic] = t
	}
	return t
}

// partition returns the shared state of topic/part, creating it when create
// is set (no files are created until the dispatcher writes a unit).
func (s *Store) partition(topic string, part int32, create bool) *partition {
	s.partsMu.RLock()
	if t := s.topics[topic]; t != nil {
		if p := t.parts[part]; p != nil {
			s.partsMu.RUnlock()
			return p
		}
	}
	s.partsMu.RUnlock()
	if !create {
		return nil
	}
	s.partsMu.Lock()
	defer s.partsMu.Unlock()
	t := s.topicLocked(topic)
	p := t.parts[part]
	if p == nil {
		p = newPartition(t, part)
		t.parts[part] = p
		s.adoptPendingLocked(p, topic, part)
	}
	return p
}

// partitionLocked is partition without creating it; s.partsMu must be held.
func (s *Store) partitionLocked(topic string, part int32) *partition {
	if t := s.topics[topic]; t != nil {
		return t.parts[part]
	}
	return nil
}

// partitionBytes is partition for a topic held as bytes (dispatcher, recovery);
// it does not allocate when the partition exists.
func (s *Store) partitionBytes(topic []byte, part int32) *partition {
	s.partsMu.RLock()
	if t := s.topics[string(topic)]; t != nil {
		if p := t.parts[part]; p != nil {
			s.partsMu.RUnlock()
			return p
		}
	}
	s.partsMu.RUnlock()
	return s.partition(string(topic), part, true)
}

// PartitionCount is the number of partitions the store keeps state for,
// written or not, in the topics whose names start with prefix (tests).
func (s *Store) PartitionCount(prefix string) int {
	s.partsMu.RLock()
	defer s.partsMu.RUnlock()
	n := 0
	for name, t := range s.topics {
		if strings.HasPrefix(name, prefix) {
			n += len(t.parts)
		}
	}
	return n
}

// allPartitions returns a snapshot of every partition.
func (s *Store) allPartitions() []*partition {
	s.partsMu.RLock()
	defer s.partsMu.RUnlock()
	var ps []*partition
	for _, t := range s.topics {
		for _, p := range t.parts {
			ps = append(ps, p)
		}
	}
	return ps
}

// syncDir fsyncs a directory so that entries created, renamed or removed in
// it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
