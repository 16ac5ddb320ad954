package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// Partition index files.
//
// A partition's index is a stream of 16-byte units; unit n describes the
// message at queue offset n and sits at byte n*16 of the stream. The stream
// is cut into files of IndexFileSize bytes, named by the 20-digit stream byte
// offset of their first byte:
//
//	index/<topic>/<partition>/<20-digit start byte>
//
// Files are created lazily, sparse (ftruncate to IndexFileSize, nothing
// preallocated), written only with pwrite (one pwrite per run of units of a
// dispatch batch) and read with pread. Unit layout, big-endian:
//
//	off len field
//	  0   8 physicalOffset  position of the record in the commit log
//	  8   4 size            record size; 0 marks an empty (unwritten) unit;
//	                        bit 31 (unitSigFlag): the last field is a signature
//	 12   4 tagHash         protocol.PropsTagHash(properties), 0 = no tag;
//	                        with unitSigFlag: filter.Signature(properties)
//
// A record without a tag whose properties line is not empty gets the
// signature of its properties (a 32-bit Bloom filter of its key=value
// pairs, protocol/filter/signature.go) in place of the tag hash (which
// would be 0), flagged in the size field: a get with an expression then
// skips most records the expression cannot select from the unit alone, as
// a tag filter skips other tags (readInto). getUnit hides both: it returns
// the size without the flag and 0 as the tag of a flagged unit. Units
// written before signatures existed (no flag) read as before; the record
// is read to evaluate the expression.
//
// Reads use pread rather than mmap: units are small and read in runs (one
// pread fetches up to 256), writes already need an fd, so one LRU of fds
// serves both; no mapping counts against vm.max_map_count with 10,000
// partitions, and a truncated or deleted file yields an error instead of a
// SIGBUS. Both paths go through the same page cache.
const unitSize = 16

// unitSigFlag marks, in a unit's size field, a unit whose last field holds
// the record's property signature instead of a tag hash.
const unitSigFlag = 1 << 31

func putUnit(b []byte, phys int64, size int32, tag uint32) {
	binary.BigEndian.PutUint64(b[0:], uint64(phys))
	binary.BigEndian.PutUint32(b[8:], uint32(size))
	binary.BigEndian.PutUint32(b[12:], tag)
}

// putRecordUnit writes the unit of a record with these properties: its tag
// hash, or (no tag, some properties) its flagged property signature.
func putRecordUnit(b []byte, phys int64, size int32, props []byte) {
	tag, flag := recordTag(props)
	putUnit(b, phys, int32(uint32(size)|flag), tag)
}

// recordTag is the last field of the unit of a record with these
// properties and the flag its size field carries: the tag hash, or (no tag,
// some properties) the property signature and unitSigFlag.
func recordTag(props []byte) (tag, flag uint32) {
	if len(props) == 0 {
		return 0, 0 // most records: no tag, nothing to sign
	}
	tag = protocol.PropsTagHash(props)
	if tag == 0 {
		tag, flag = filter.Signature(props), unitSigFlag
	}
	return tag, flag
}

// getUnit returns a unit's fields: the size without unitSigFlag and the tag
// hash (0 for a unit holding a signature: its record has no tag).
func getUnit(b []byte) (phys int64, size int32, tag uint32) {
	be := binary.BigEndian
	sz := be.Uint32(b[8:])
	if sz&unitSigFlag != 0 {
		return int64(be.Uint64(b[0:])), int32(sz &^ unitSigFlag), 0
	}
	return int64(be.Uint64(b[0:])), int32(sz), be.Uint32(b[12:])
}

// unitSignature returns the property signature a unit holds, if any.
func unitSignature(b []byte) (uint32, bool) {
	be := binary.BigEndian
	return be.Uint32(b[12:]), be.Uint32(b[8:])&unitSigFlag != 0
}

var (
	errGone           = errors.New("store: index file deleted")
	errMissingSegment = errors.New("store: commit-log segment missing")
	errBelowMin       = errors.New("store: record deleted by retention")
)

// partition is one topic partition's state. Its counters are read without
// locks; who writes them is noted per field.
//
// Layout: a partition is 320 bytes (TestPartitionLayout), so the allocator's
// 320-byte size class places it on 64-byte cache-line boundaries, and its
// fields are grouped by who touches them per message. With 10,000 partitions
// fed round-robin every message finds its partition's lines cold, so the
// count matters: the appender (put path) touches line 0 only; the dispatcher
// (one unit into the partition's pending run, its tail and its published
// count) lines 1–2 only; the rest is cold. Before, the hot fields were spread
// over four lines at any alignment, and the appender's next shared a line
// with the dispatcher's indexed. A run of one unit (the usual one when puts go
// round-robin over many partitions) is kept in first, inside those lines,
// rather than in a buffer of its own: one cold line less per message.
type partition struct {
	// Line 0: the appender's (commitLog.mu) and what is read rarely.
	topic *topicState
	next  atomic.Int64 // next queue offset to assign (MaxOffset); stored under the append lock (commitLog.mu)
	id    int32
	dir   string
	min   atomic.Int64 // MinOffset; recovery and retention
	filed atomic.Int64 // units below this are in the index file (indextail.go)
	ixMu  sync.Mutex

	// Lines 1–2: the dispatcher's, per unit.
	indexed atomic.Int64 // units below this are readable (file or tail); dispatcher
	// Owned by the dispatcher goroutine.
	pend      []byte // units of the current batch: first[:], or spill once the run grows (resetPend)
	pendStart int64  // queue offset of pend[0:16]
	first     [unitSize]byte
	inBatch   bool
	waiting   atomic.Bool // long-poll notification (wait.go): checked after each run
	// The newest units, not yet written to the file (indextail.go).
	tailMu sync.Mutex
	tail   indexTail
	// The dispatcher's own: where the tail's next unit goes (set by
	// appendUnits under tailMu, read without it), only for the dispatcher's
	// flush to prefetch that line a few partitions ahead. It may be stale —
	// the checkpoint may have written the tail out or returned its buffer —
	// which costs nothing: a prefetch never faults.
	tailNext *byte
	_        [128 - 8 - 24 - 8 - unitSize - 8 - 8 - 48 - 8]byte

	// Lines 3–4: cold.
	files   []*ixFile // sorted by base; guarded by ixMu
	waitMu  sync.Mutex
	waitCh  chan struct{}
	waiters *Waiter // WaitFunc's list; guarded by waitMu
	spill   []byte  // the dispatcher's buffer for runs of more than one unit
	_       [128 - 24 - 8 - 8 - 8 - 24]byte
}

func newPartition(t *topicState, id int32) *partition {
	return &partition{topic: t, id: id, dir: filepath.Join(t.dir, strconv.Itoa(int(id)))}
}

// ixFile is one index file. Its fd lives in the file cache (filecache.go).
type ixFile struct {
	p    *partition
	base int64 // stream byte offset of its first unit
	path string

	// guarded by fileCache.mu
	f          *os.File
	prev, next *ixFile // LRU list of open files
	dirty      bool    // written since the last checkpoint sync
	gone       bool    // deleted
}

// fileBase returns the base of the file holding unit q.
func (s *Store) fileBase(q int64) int64 {
	return q * unitSize / s.cfg.IndexFileSize * s.cfg.IndexFileSize
}

// ixFileFor returns the index file holding unit q, creating it (sparse) if
// create is set. nil, nil when it does not exist and create is false.
func (s *Store) ixFileFor(p *partition, q int64, create bool) (*ixFile, error) {
	base := s.fileBase(q)
	p.ixMu.Lock()
	defer p.ixMu.Unlock()
	i := sort.Search(len(p.files), func(i int) bool { return p.files[i].base >= base })
	if i < len(p.files) && p.files[i].base == base {
		return p.files[i], nil
	}
	if !create {
		return nil, nil
	}
	x, err := s.createIxFile(p, base)
	if err != nil {
		return nil, err
	}
	p.files = append(p.files, nil)
	copy(p.files[i+1:], p.files[i:])
	p.files[i] = x
	return x, nil
}

// createIxFile creates one sparse index file; p.ixMu held.
func (s *Store) createIxFile(p *partition, base int64) (*ixFile, error) {
	path := filepath.Join(p.dir, segmentName(base))
	var dirs []string
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if os.IsNotExist(err) { // first file of the partition
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			return nil, ioError("mkdir "+p.dir, err)
		}
		dirs = append(dirs, p.topic.dir, s.indexDir)
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, ioError("create index", err)
	}
	if err := f.Truncate(s.cfg.IndexFileSize); err != nil {
		f.Close()
		os.Remove(path)
		return nil, ioError("truncate index", err)
	}
	x := &ixFile{p: p, base: base, path: path}
	s.files.adopt(x, f, append(dirs, p.dir))
	return x, nil
}

// writeUnits writes a run of units starting at queue offset q (one pwrite per
// file touched).
func (s *Store) writeUnits(p *partition, q int64, units []byte) error {
	for len(units) > 0 {
		x, err := s.ixFileFor(p, q, true)
		if err != nil {
			return err
		}
		off := q*unitSize - x.base
		n := min(int64(len(units)), s.cfg.IndexFileSize-off)
		if err := s.files.pwrite(x, units[:n], off); err != nil {
			return err
		}
		units = units[n:]
		q += n / unitSize
	}
	return nil
}

// readUnits reads units from queue offset q into buf (a multiple of 16
// bytes), stopping at the end of the file holding q, and at the partition's
// tail: units not yet written to the file are copied from memory
// (indextail.go). It returns the bytes read; errGone when the file holding q
// does not exist (deleted by retention).
func (s *Store) readUnits(p *partition, q int64, buf []byte) (int, error) {
	if filed := p.filed.Load(); q < filed {
		buf = buf[:min(int64(len(buf)), (filed-q)*unitSize)]
	} else if n := s.readTail(p, q, buf); n > 0 {
		return n, nil
	}
	x, err := s.ixFileFor(p, q, false)
	if err != nil {
		return 0, err
	}
	if x == nil {
		return 0, errGone
	}
	off := q*unitSize - x.base
	n := min(int64(len(buf)), s.cfg.IndexFileSize-off)
	if err := s.files.pread(x, buf[:n], off); err != nil {
		return 0, err
	}
	return int(n), nil
}

// readUnit reads the unit at q.
func (s *Store) readUnit(p *partition, q int64) (phys int64, size int32, tag uint32, err error) {
	var b [unitSize]byte
	if _, err := s.readUnits(p, q, b[:]); err != nil {
		return 0, 0, 0, err
	}
	phys, size, tag = getUnit(b[:])
	return phys, size, tag, nil
}

// unitSpan returns the first unit of the stream's first file and the end of
// its last file (in units), extended by the units buffered in the tail;
// 0, 0 when the partition has neither.
func (p *partition) unitSpan(ifs int64) (first, end int64) {
	p.tailMu.Lock()
	tstart, tend := p.tail.start, p.tail.end()
	p.tailMu.Unlock()
	p.ixMu.Lock()
	defer p.ixMu.Unlock()
	if len(p.files) == 0 {
		if tend > tstart {
			return tstart, tend
		}
		return 0, 0
	}
	first, end = p.files[0].base/unitSize, (p.files[len(p.files)-1].base+ifs)/unitSize
	return first, max(end, tend)
}

// searchUnits returns the first queue offset in [lo, hi) whose unit satisfies
// pred (which must be false then true along the stream), or hi. Units in a
// missing file count as not satisfying pred.
func (s *Store) searchUnits(p *partition, lo, hi int64, pred func(phys int64, size int32) bool) (int64, error) {
	var firstErr error
	for lo < hi {
		mid := lo + (hi-lo)/2
		phys, size, _, err := s.readUnit(p, mid)
		ok := false
		if err == nil {
			ok = pred(phys, size)
		} else if err != errGone && firstErr == nil {
			firstErr = err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, firstErr
}

// loadIndexFiles lists an existing partition directory's files (recovery).
func (s *Store) loadIndexFiles(p *partition) error {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return ioError("read index dir", err)
	}
	var files []*ixFile
	for _, e := range ents {
		base, ok := parseSegmentName(e.Name())
		if !ok {
			continue
		}
		if base%s.cfg.IndexFileSize != 0 {
			return fmt.Errorf("store: index file %s does not start at a multiple of IndexFileSize %d (was IndexFileSize changed?)",
				filepath.Join(p.dir, e.Name()), s.cfg.IndexFileSize)
		}
		x := &ixFile{p: p, base: base, path: filepath.Join(p.dir, e.Name())}
		if fi, err := e.Info(); err == nil && fi.Size() != s.cfg.IndexFileSize {
			// Keep every file IndexFileSize long (sparse) so pread never
			// falls off the end.
			if err := os.Truncate(x.path, s.cfg.IndexFileSize); err != nil {
				return ioError("truncate index", err)
			}
		}
		files = append(files, x)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].base < files[j].base })
	p.ixMu.Lock()
	p.files = files
	p.ixMu.Unlock()
	return nil
}

// cutUnits empties units [q, end of stream): zeroes the rest of q's file
// (hole punched by truncating down and back up) and deletes later files.
// Used by recovery so that stale units can never look valid later.
func (s *Store) cutUnits(p *partition, q int64) error {
	base := s.fileBase(q)
	p.ixMu.Lock()
	var keep, drop []*ixFile
	for _, x := range p.files {
		if x.base <= base {
			keep = append(keep, x)
		} else {
			drop = append(drop, x)
		}
	}
	p.files = keep
	p.ixMu.Unlock()
	for _, x := range drop {
		s.files.remove(x)
	}
	if len(keep) > 0 && keep[len(keep)-1].base == base {
		x := keep[len(keep)-1]
		if err := s.files.zeroFrom(x, q*unitSize-x.base, s.cfg.IndexFileSize); err != nil {
			return err
		}
	}
	if len(drop) > 0 {
		s.files.markDirDirty(p.dir)
	}
	return nil
}
