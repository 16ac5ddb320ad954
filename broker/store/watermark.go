package store

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/metaqgo/metaq/protocol"
)

// The read limit of a replica kept on disk (docs/replication.md, "Reads
// from a slave: the high watermark"; docs/storage.md):
//
//	<dataPath>/watermark   "<pos: 20 digits> <crc: 10 digits>\n" (32 bytes)
//	                       crc: CRC-32C of the 20 digits
//
// A slave serves only what its master has acknowledged; the master says so
// in the stream, and the store of a slave holds it as its read limit. The
// file keeps it across a restart, so that a slave restarted while it held
// unacknowledged bytes does not serve them once its indexes are rebuilt.
// It cannot be a commit-log record (a slave's log is its master's, byte for
// byte) and cannot be derived from the log (which bytes were acknowledged is
// what the master said), hence a side file. It may only under-state:
//
//   - it holds a position the master acknowledged, i.e. safe to serve; a
//     raise of the read limit rewrites it in place before the new limit
//     takes effect (raiseReadLimitSaved; SaveReadLimit retries a failed
//     save), so a process killed after a rise does not restart below what
//     its consumers read (one pwrite, not fsynced: after a crash of the
//     machine it may hold an older value, or be torn, both of which serve
//     less);
//   - Open (Config.Replica) starts with it as the read limit before recovery
//     indexes the log, never below what the indexes of the previous run
//     covered (the checkpoint's dispatched position: those records were
//     served already, below the limit of their time) and never past the
//     recovered end of the log; a missing, torn or damaged file serves
//     nothing beyond the checkpoint until the master speaks;
//   - a truncation or a reset of the log (raw_reset.go) removes it (with the
//     directory fsync that completes the reset): the bytes written past the
//     cut later are another history; the limit of that run is capped at the
//     cut;
//   - lifting the limit (a promotion: SetReadLimit(-1)) removes it.

const (
	watermarkFile = "watermark"
	watermarkSize = 32
)

// watermark is the file's state in a running store.
type watermark struct {
	mu    sync.Mutex // leaf: f, buf, the file's existence
	f     *os.File   // open for rewriting in place, nil until the first save
	buf   [watermarkSize]byte
	saved atomic.Int64 // the value in the file (-1: none or unknown)
}

func (s *Store) watermarkPath() string { return filepath.Join(s.cfg.Dir, watermarkFile) }

func encodeWatermark(b *[watermarkSize]byte, pos int64) {
	putDigits(b[:20], uint64(pos))
	b[20] = ' '
	putDigits(b[21:31], uint64(protocol.CRC32C(b[:20])))
	b[31] = '\n'
}

// putDigits writes v in decimal into b, right-aligned, padded with zeros.
func putDigits(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
}

func decodeWatermark(b []byte) (int64, bool) {
	if len(b) != watermarkSize || b[20] != ' ' || b[31] != '\n' {
		return 0, false
	}
	pos, err1 := strconv.ParseInt(string(b[:20]), 10, 64)
	crc, err2 := strconv.ParseUint(string(b[21:31]), 10, 32)
	if err1 != nil || err2 != nil || pos < 0 || uint32(crc) != protocol.CRC32C(b[:20]) {
		return 0, false
	}
	return pos, true
}

// readWatermark reads the file (ok false: missing or damaged; a damaged one
// is logged).
func (s *Store) readWatermark() (pos int64, ok bool) {
	b, err := os.ReadFile(s.watermarkPath())
	if os.IsNotExist(err) {
		return 0, false
	}
	if err == nil {
		if pos, ok = decodeWatermark(b); ok {
			return pos, true
		}
	}
	s.log.Warn("replication: the high watermark file is damaged; nothing past what the last run had indexed is served until the master says more is acknowledged",
		"file", s.watermarkPath(), "size", len(b), "err", err)
	return 0, false
}

// openWatermark is recovery's part: on a replica it reads the stored
// watermark (ok false: none, or damaged). A reset (a truncation or a wipe
// of the log, raw_reset.go) removes the file: the value read still caps
// this run's limit, at most the log's new end; the directory fsync that
// completes the reset makes the removal durable before the reset marker
// goes.
func (s *Store) openWatermark(reset bool) (pos int64, ok bool) {
	s.wm.saved.Store(-1)
	if s.cfg.Replica {
		if pos, ok = s.readWatermark(); ok {
			s.wm.saved.Store(pos)
		}
	}
	if reset {
		if err := s.dropWatermark(); err != nil {
			s.log.Warn("replication: removing the high watermark file", "err", err)
		}
	}
	return pos, ok
}

// nextPastIndex sets each partition's next queue offset from the records of
// [from, end) that recovery left unindexed (they lie past a replica's read
// limit: the dispatcher indexes them once the limit passes them), as
// AppendRaw does for the records it appends.
func (s *Store) nextPastIndex(from, end int64) error {
	err := s.scanRecords(from, func() int64 { return end }, func(pos int64, b []byte) error {
		rec, err := indexFields(b)
		if err != nil {
			return fmt.Errorf("%w: record at %d: %v", ErrCorrupt, pos, err)
		}
		s.partitionBytes(rec.topic, rec.partition).noteRaw(rec.queueOffset, rec.queueOffset)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: recovery: the records past the read limit at %d: %w", from, err)
	}
	return nil
}

// SaveReadLimit writes the read limit to the watermark file when it rose
// since the last save (nothing when there is no limit): a slave calls it
// after each ack, which retries a save that failed when the limit rose
// (raiseReadLimitSaved) and reports its error. Not fsynced (see above): one
// pwrite of 32 bytes when the limit moved, one atomic load otherwise.
func (s *Store) SaveReadLimit() error { return s.saveReadLimitAt(s.clog.readLimit.Load()) }

// saveReadLimitAt writes lim, a position the master has acknowledged, to
// the watermark file when it is above the value there and the store has a
// read limit: SaveReadLimit, and a raise of the limit before it takes
// effect (raiseReadLimitSaved).
func (s *Store) saveReadLimitAt(lim int64) error {
	w := &s.wm
	if lim == math.MaxInt64 || lim <= w.saved.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Again under the lock: a promotion may have lifted the limit (and
	// removed the file) meanwhile.
	if s.clog.readLimit.Load() == math.MaxInt64 || lim <= w.saved.Load() || s.isClosed.Load() {
		return nil
	}
	if w.f == nil {
		f, err := os.OpenFile(s.watermarkPath(), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("store: high watermark file: %w", err)
		}
		w.f = f
	}
	encodeWatermark(&w.buf, lim)
	if _, err := w.f.WriteAt(w.buf[:], 0); err != nil {
		return fmt.Errorf("store: high watermark file: %w", err)
	}
	w.saved.Store(lim)
	return nil
}

// dropWatermark removes the watermark file (the limit is lifted, or the log
// was cut or reset). The directory is not fsynced here: a file that comes
// back after a crash of the machine holds a position that was safe to serve
// then (a reset fsyncs the directory itself before its marker goes).
func (s *Store) dropWatermark() error {
	w := &s.wm
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeLocked()
	w.saved.Store(-1)
	if err := os.Remove(s.watermarkPath()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("store: high watermark file: %w", err)
	}
	return nil
}

// raiseReadLimitSaved is commitLog.raiseReadLimit with the new limit written
// to the watermark file first (its error is left to SaveReadLimit's retry):
// what the limit lets consumers read is on the file before they can read
// it, so a slave killed right after a rise does not restart with a lower
// limit than the offsets its consumers already reached (they would wait
// for the master to speak again).
func (s *Store) raiseReadLimitSaved(pos int64) bool {
	if cur := s.clog.readLimit.Load(); pos <= cur || cur == math.MaxInt64 {
		return false
	}
	_ = s.saveReadLimitAt(pos)
	return s.clog.raiseReadLimit(pos)
}

func (w *watermark) closeLocked() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}

func (w *watermark) close() {
	w.mu.Lock()
	w.closeLocked()
	w.mu.Unlock()
}
