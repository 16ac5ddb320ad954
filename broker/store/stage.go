package store

import (
	"sync"
	"sync/atomic"

	"github.com/metaqgo/metaq/protocol"
)

// The write path: staged appends, written out with pwrite.
//
// An append does not store its record through the segment's mapping: the
// appender encodes it into a staging buffer that mirrors the commit log from
// stage.base on, and the staged bytes reach the segment file with one pwrite
// per batch (writeStaged, serialised by stage.wmu). In sync-flush mode the
// flusher writes them just before each group-commit fdatasync. In async mode
// the appender calls WriteOut before acknowledging (the broker once per batch
// of commands read from a connection; Append does it per call), and a read
// that wants the newest records, the flusher and Close write out what is
// left. Readers and the dispatcher read through the mapping (same page
// cache) and only below visibleLimit, which never passes the written
// position; in async mode a write wakes the dispatcher.
//
// Why (measured on the dev VM, ext4, kernel 6.18): an fdatasync after stores
// through a shared mapping took ~750-850 µs where the same bytes written with
// pwrite took ~170-210 µs to sync (8 KiB and 54 KiB rounds): the mapping's
// write faults (page_mkwrite) apparently make every fdatasync commit the
// journal, and fdatasync latency is what bounds group commit. And writing
// 512 MiB through a prefaulted mapping cost ~2.8-3.3 s of CPU against
// ~1.1 s with 64 KiB pwrites (fdatasync every 128 KiB in both).
//
// Each write is padded with zeros to the end of its page (the log holds
// zeros past the write position anyway; the next write overwrites them): a
// partial-page write into a page that is not cached (the zero-filler writes
// with O_DIRECT) makes the kernel read it from disk first, ~100 µs.
//
// The buffer is linear and restarts at its front (at the write position)
// whenever nothing is staged, so in async mode the same first few hundred
// KiB are reused from one write-out to the next and stay cached. When a
// record does not fit behind what is staged, the appender writes out
// everything staged itself (l.mu released), then restarts the buffer. A roll does the
// same, then writes the old segment's BLANK header directly. With 4 MiB and
// ~100-byte messages that is one extra write every ~30,000 appends.
type stage struct {
	buf  []byte // guarded by l.mu; replaced only when nothing is staged
	base int64  // commit-log position of buf[0]; guarded by l.mu
	// written: staged bytes below it are in the segment files. Stored under
	// l.mu (by writeStaged, and by a roll when nothing is staged); loaded
	// anywhere.
	written atomic.Int64
	failed  atomic.Bool // a write failed (l.writeErr is set)
	wmu     sync.Mutex  // serialises writers; held across the pwrite
	iov     [][]byte    // logWrite's vector; guarded by wmu
}

const stageSize = 4 << 20

// initStage sets up staging at the recovered write position (Open).
func (l *commitLog) initStage() {
	st := &l.stage
	st.base = l.wpos
	st.written.Store(l.wpos)
	n := stageSize
	if l.cfg.stageSize > 0 {
		n = l.cfg.stageSize
	}
	st.buf = make([]byte, n)
	st.iov = make([][]byte, 0, 2)
}

// stageRoomLocked reports whether a record of size bytes can be staged at
// the write position, restarting (or growing) the buffer when nothing is
// staged. false: the caller must drainStagedLocked and re-check.
func (l *commitLog) stageRoomLocked(size int64) bool {
	st := &l.stage
	if st.written.Load() < l.wpos {
		// Something is staged: the record goes behind it, if it fits.
		return l.wpos-st.base+size <= int64(len(st.buf))
	}
	// Nothing is staged: restart at the front of the buffer, whose first
	// few hundred KiB stay in the CPU's cache from one write-out to the
	// next (async mode writes out after every read of a connection). Walking
	// on through all 4 MiB made each record's encode and its pwrite touch
	// cache lines that had left the L2 since the lap before.
	st.base = l.wpos
	if size > int64(len(st.buf)) {
		st.buf = make([]byte, max(size, 2*int64(len(st.buf))))
	}
	return true
}

// stagedLocked is the buffer space for a record of size bytes at the write
// position (stageRoomLocked said yes).
func (l *commitLog) stagedLocked(size int64) []byte {
	off := l.wpos - l.stage.base
	return l.stage.buf[off : off+size : off+size]
}

// drainStagedLocked writes out everything staged so far itself, with l.mu
// released (the buffer is full, or a roll needs the old segment's records in
// place). The caller re-checks everything.
func (l *commitLog) drainStagedLocked() {
	l.ctr.stageWaits.Add(1)
	l.mu.Unlock()
	_, _ = l.writeStaged(l.written.Load()) // a failure is sticky: the caller sees it
	l.mu.Lock()
}

// rollStagedLocked closes the active segment in staged mode: nothing is
// staged (makeRoomLocked waited), so the BLANK header goes straight to the
// file and staging restarts at the next segment's base.
func (l *commitLog) rollStagedLocked(old *segment, next *segment) {
	if off := l.wpos - old.base; off < old.size {
		var hdr [protocol.BlankMinSize]byte
		protocol.EncodeBlank(hdr[:], int(old.size-off))
		if err := l.hooks.logWrite(old.f, [][]byte{hdr[:]}, off); err != nil {
			l.stageFailedLocked(ioError("write "+old.path, err))
		}
	}
	l.stage.base = next.base
	l.stage.written.Store(next.base)
}

// stageFailedLocked makes a failed commit-log write sticky.
func (l *commitLog) stageFailedLocked(err error) {
	if l.writeErr == nil {
		l.writeErr = err
		l.log.Error("commit log write failed; appends are refused until the store is reopened", "err", err)
	}
	l.stage.failed.Store(true)
}

// WriteOut writes every record appended so far from the staging buffer to
// the commit-log files (the page cache), so that they survive a crash of the
// process (not of the machine) and become readable. In async-flush mode an
// appender must call it before acknowledging (the broker does, once per
// batch of commands read from a connection); in sync mode the group commit
// does it and WriteOut returns at once. An error is the sticky write error:
// appends since the last successful WriteOut must not be acknowledged.
func (s *Store) WriteOut() error { return s.clog.writeOut() }

// writeOut is WriteOut.
func (l *commitLog) writeOut() error {
	if l.sync || l.written.Load() <= l.stage.written.Load() && !l.stage.failed.Load() {
		return nil // nothing staged (the common case costs two atomic loads)
	}
	_, err := l.writeStaged(l.written.Load())
	return err
}

// writeStaged writes the staged bytes below end (at most the write position)
// that are not written yet into the segments they span and publishes the
// new written position. Called with l.mu NOT held (flusher, WriteOut, an
// appender whose buffer is full). After a failure it returns the sticky
// error (l.writeErr) and writes nothing more. woke: in sync mode, a waiter
// for the written position was woken (a master's replication stream:
// WaitWritten).
func (l *commitLog) writeStaged(end int64) (woke bool, err error) {
	st := &l.stage
	st.wmu.Lock()
	l.mu.Lock()
	if st.failed.Load() {
		err := l.writeErr
		l.mu.Unlock()
		st.wmu.Unlock()
		return false, err
	}
	from := st.written.Load()
	if from >= end {
		l.mu.Unlock()
		st.wmu.Unlock()
		return false, nil
	}
	// The buffer cannot restart under us: that needs written >= wpos.
	b := st.buf[from-st.base : end-st.base]
	l.mu.Unlock()

	pos := from
	for len(b) > 0 && err == nil {
		g := l.acquireSegment(pos)
		if g == nil {
			err = ioError("write", errMissingSegment)
			break
		}
		n := min(int64(len(b)), g.end()-pos)
		fend := pos - g.base + n
		pad := min((fend+pageSize-1)/pageSize*pageSize, g.size) - fend
		st.iov = append(st.iov[:0], b[:n])
		if pad > 0 {
			st.iov = append(st.iov, zeroPage[:pad])
		}
		if werr := l.hooks.logWrite(g.f, st.iov, pos-g.base); werr != nil {
			err = ioError("write "+g.path, werr)
		}
		clear(st.iov[:cap(st.iov)])
		g.release()
		pos += n
		b = b[n:]
	}
	l.mu.Lock()
	if err == nil {
		st.written.Store(pos)
	} else {
		l.stageFailedLocked(err)
	}
	l.mu.Unlock()
	if err == nil && l.sync && l.onWritten != nil {
		woke = l.onWritten() // sync: a master's stream ships them while they are fsynced
	}
	st.wmu.Unlock()
	if err == nil && !l.sync {
		// async: written records are visible (sync: once flushed). After
		// wmu: it may dispatch them and answer parked gets (dispatch.go).
		l.onVisible()
	}
	return woke, err
}
