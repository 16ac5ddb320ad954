package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"

	"github.com/metaqgo/metaq/protocol"
)

// Checkpoint file <dataPath>/checkpoint: 64 bytes, big-endian, replaced
// atomically (checkpoint.tmp → fsync → rename → fsync dir).
//
//	off len field
//	  0   4 magic       "MQCP"
//	  4   4 version     1
//	  8   8 flushed     commit-log bytes below this are durable (a record boundary)
//	 16   8 lastRecord  position of the last record below flushed, -1 none
//	 24   8 dispatched  index units and key-index entries of every record below
//	                    this are durable
//	 32   8 logMin      base of the oldest segment (informational)
//	 40   8 time        unix ms when written
//	 48  12 reserved    zero
//	 60   4 crc         CRC-32C of bytes [0, 60)
//
// After a crash, recovery scans the commit log from flushed and rebuilds the
// indexes from min(dispatched, recovered end). After a clean stop flushed is
// the end of the log, which recovery checks cheaply (lastRecord's CRC, zeros
// after flushed).
const (
	checkpointSize    = 64
	checkpointMagic   = 0x4D514350 // "MQCP"
	checkpointVersion = 1
)

type checkpointData struct {
	flushed, lastRecord, dispatched, logMin, time int64
}

func (c *checkpointData) encode(b []byte) {
	be := binary.BigEndian
	clear(b[:checkpointSize])
	be.PutUint32(b[0:], checkpointMagic)
	be.PutUint32(b[4:], checkpointVersion)
	be.PutUint64(b[8:], uint64(c.flushed))
	be.PutUint64(b[16:], uint64(c.lastRecord))
	be.PutUint64(b[24:], uint64(c.dispatched))
	be.PutUint64(b[32:], uint64(c.logMin))
	be.PutUint64(b[40:], uint64(c.time))
	be.PutUint32(b[60:], protocol.CRC32C(b[:60]))
}

var errBadCheckpoint = errors.New("store: invalid checkpoint")

func decodeCheckpoint(b []byte) (checkpointData, error) {
	be := binary.BigEndian
	if len(b) != checkpointSize || be.Uint32(b[0:]) != checkpointMagic ||
		be.Uint32(b[4:]) != checkpointVersion || be.Uint32(b[60:]) != protocol.CRC32C(b[:60]) {
		return checkpointData{}, errBadCheckpoint
	}
	c := checkpointData{
		flushed:    int64(be.Uint64(b[8:])),
		lastRecord: int64(be.Uint64(b[16:])),
		dispatched: int64(be.Uint64(b[24:])),
		logMin:     int64(be.Uint64(b[32:])),
		time:       int64(be.Uint64(b[40:])),
	}
	if c.flushed < 0 || c.dispatched < 0 || c.lastRecord < -1 || c.lastRecord >= c.flushed && c.lastRecord != -1 {
		return checkpointData{}, errBadCheckpoint
	}
	return c, nil
}

func (s *Store) checkpointPath() string { return filepath.Join(s.cfg.Dir, "checkpoint") }

// readCheckpoint returns the checkpoint; ok is false when it is missing or invalid.
func (s *Store) readCheckpoint() (checkpointData, bool) {
	b, err := os.ReadFile(s.checkpointPath())
	if err != nil {
		if !os.IsNotExist(err) {
			s.log.Warn("cannot read checkpoint", "err", err)
		}
		return checkpointData{}, false
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		s.log.Warn("checkpoint is invalid; recovering from the oldest segment", "err", err)
		return checkpointData{}, false
	}
	return c, true
}

// writeCheckpointFile replaces the checkpoint atomically.
func writeCheckpointFile(dir string, c *checkpointData) error {
	var b [checkpointSize]byte
	c.encode(b[:])
	tmp := filepath.Join(dir, "checkpoint.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return ioError("checkpoint", err)
	}
	if _, err := f.Write(b[:]); err != nil {
		f.Close()
		return ioError("checkpoint", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return ioError("checkpoint fsync", err)
	}
	if err := f.Close(); err != nil {
		return ioError("checkpoint", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "checkpoint")); err != nil {
		return ioError("checkpoint rename", err)
	}
	return ioError("checkpoint fsync dir", syncDir(dir))
}

// checkpoint records the flushed and dispatched positions (Flush, Close,
// recovery: always making the indexes written so far durable first).
func (s *Store) checkpoint() error { return s.checkpointNow(true) }

// indexSyncEvery: a periodic checkpoint syncs index files only every this
// many checkpoint intervals when many files are dirty or many partitions
// hold buffered units (10,000 partitions would otherwise write and sync
// 10,000 index pages every interval); between those it keeps the last
// synced dispatch position, so recovery re-dispatches at most that much of
// the log.
const indexSyncEvery = 10

// checkpointNow writes the checkpoint. When syncIndex is false (the periodic
// checkpoint) the index files are synced only if few are dirty or
// indexSyncEvery intervals have passed; otherwise the checkpoint keeps the
// previously synced dispatch position. Serialised by s.ckptMu; skipped when
// nothing moved since the last one.
func (s *Store) checkpointNow(syncIndex bool) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.shut {
		return ErrClosed
	}
	var c checkpointData
	c.flushed, c.lastRecord = s.clog.durable()
	c.dispatched = s.dispatched.Load()
	c.logMin = s.clog.minPos()
	last := s.lastCkpt
	if last != nil && last.flushed == c.flushed && last.dispatched == c.dispatched && last.logMin == c.logMin {
		return nil
	}
	s.ckptCount++
	if last != nil && !syncIndex && s.files.dirtyCount()+s.tails.pendingCount() > syncfsThreshold &&
		s.ckptCount%indexSyncEvery != 0 {
		c.dispatched = min(last.dispatched, c.dispatched)
	} else {
		// Everything dispatched below c.dispatched was added to the index
		// before it was published: write the buffered units out and sync
		// the files before the checkpoint claims it.
		if err := s.flushTails(); err != nil {
			s.log.Warn("checkpoint: writing buffered index units failed; keeping the previous checkpoint", "err", err)
			return err
		}
		if err := s.files.syncDirty(s.indexDir); err != nil {
			return err
		}
		if s.keys != nil {
			if err := s.keys.sync(); err != nil {
				return err
			}
		}
	}
	c.time = s.now().UnixMilli()
	if err := writeCheckpointFile(s.cfg.Dir, &c); err != nil {
		s.log.Warn("checkpoint write failed", "err", err)
		return err
	}
	s.lastCkpt = &c
	s.counters.checkpoints.Add(1)
	return nil
}
