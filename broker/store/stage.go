package store

import (
	"sync"

	"github.com/metaqgo/metaq/protocol"
)

// The sync-flush write path: staged appends, written by the flusher.
//
// In async-flush mode an append encodes its record straight into the mapped
// segment. In sync-flush mode it does not: the appender encodes the record
// into a staging buffer that mirrors the commit log from stage.base on, and
// the flusher pwrites the staged bytes to the segment files just before each
// group-commit fdatasync (flushOnce). Readers and the dispatcher still read
// through the mapping: in sync mode they only see flushed bytes, and those
// were pwritten first (the mapping and pwrite share the page cache).
//
// Why: on ext4 (the dev VM, kernel 6.18), an fdatasync after stores through
// a shared mapping took ~750-850 µs where the same bytes written with pwrite
// took ~170-210 µs to sync (8 KiB and 54 KiB per round, zero-filled file):
// the mapping's write faults (page_mkwrite) apparently make every fdatasync
// commit the journal. fdatasync latency is what bounds group commit, so
// staging roughly triples the rounds a disk can complete. The extra copy
// happens on the flusher goroutine, off the append lock.
//
// The buffer is linear: when a record does not fit behind the write
// position, the appender waits (s.mu released) until the flusher has written
// everything staged, then restarts the buffer at the write position. A roll
// also waits for that, then writes the old segment's BLANK header directly.
// With 4 MiB and ~100-byte messages that is a wait every ~30,000 appends.
type stage struct {
	on   bool   // sync-flush mode; immutable
	buf  []byte // guarded by s.mu; replaced only when nothing is staged
	base int64  // commit-log position of buf[0]; guarded by s.mu
	// written: staged bytes below it are in the segment files. Guarded by
	// s.mu; advanced by the flusher only, and set by a roll when nothing is
	// staged.
	written int64
	drained sync.Cond // on s.mu: written advanced or writing failed
}

const stageSize = 4 << 20

// initStage sets up staging at the recovered write position (Open).
func (s *Store) initStage() {
	st := &s.stage
	st.on = s.sync
	st.drained.L = &s.mu
	st.base, st.written = s.wpos, s.wpos
	if st.on {
		n := stageSize
		if s.cfg.stageSize > 0 {
			n = s.cfg.stageSize
		}
		st.buf = make([]byte, n)
	}
}

// stageRoomLocked reports whether a record of size bytes can be staged at
// the write position, restarting (or growing) the buffer when nothing is
// staged. false: the caller must waitStagedLocked and re-check.
func (s *Store) stageRoomLocked(size int64) bool {
	st := &s.stage
	if s.wpos-st.base+size <= int64(len(st.buf)) {
		return true
	}
	if st.written < s.wpos {
		return false
	}
	st.base = s.wpos
	if size > int64(len(st.buf)) {
		st.buf = make([]byte, max(size, 2*int64(len(st.buf))))
	}
	return true
}

// stagedLocked is the buffer space for a record of size bytes at the write
// position (stageRoomLocked said yes).
func (s *Store) stagedLocked(size int64) []byte {
	off := s.wpos - s.stage.base
	return s.stage.buf[off : off+size : off+size]
}

// waitStagedLocked waits, with s.mu released, until the flusher has written
// more of the staged bytes (or failed). The caller re-checks everything.
func (s *Store) waitStagedLocked() {
	s.counters.stageWaits.Add(1)
	kick(s.flushKick)
	s.stage.drained.Wait()
}

// rollStagedLocked closes the active segment in staged mode: nothing is
// staged (makeRoomLocked waited), so the BLANK header goes straight to the
// file and staging restarts at the next segment's base.
func (s *Store) rollStagedLocked(old *segment, next *segment) {
	if off := s.wpos - old.base; off < old.size {
		var hdr [protocol.BlankMinSize]byte
		protocol.EncodeBlank(hdr[:], int(old.size-off))
		if err := s.hooks.logWrite(old.f, hdr[:], 0, off); err != nil && s.writeErr == nil {
			s.writeErr = ioError("write "+old.path, err)
			s.log.Error("commit log write failed; appends are refused until the store is reopened", "err", err)
		}
	}
	s.stage.base, s.stage.written = next.base, next.base
}

// takeStagedLocked returns the staged bytes not yet written, from position
// from, up to end (the write position the flusher swapped its round at).
func (s *Store) takeStagedLocked(end int64) (from int64, b []byte) {
	st := &s.stage
	if !st.on || st.written >= end {
		return end, nil
	}
	return st.written, st.buf[st.written-st.base : end-st.base]
}

// writeStaged pwrites b (staged bytes from commit-log position from) into
// the segments it spans and publishes the new written position. Flusher
// only (s.flushMu held), s.mu NOT held. On failure the error is sticky.
func (s *Store) writeStaged(from int64, b []byte) error {
	var err error
	pos := from
	for len(b) > 0 && err == nil {
		g := s.acquireSegment(pos)
		if g == nil {
			err = ioError("write", errMissingSegment)
			break
		}
		n := min(int64(len(b)), g.end()-pos)
		// Pad the last page with zeros (the log holds zeros past the write
		// position anyway; the next round overwrites them): a partial-page
		// write into a page not in the cache (the zero-filler writes with
		// O_DIRECT) makes the kernel read it from disk first, ~100 µs per
		// round on the dev VM.
		fend := pos - g.base + n
		pad := min((fend+pageSize-1)/pageSize*pageSize, g.size) - fend
		if werr := s.hooks.logWrite(g.f, b[:n], int(pad), pos-g.base); werr != nil {
			err = ioError("write "+g.path, werr)
		}
		g.release()
		pos += n
		b = b[n:]
	}
	s.mu.Lock()
	if err == nil {
		s.stage.written = pos
	} else if s.writeErr == nil {
		s.writeErr = err
		s.log.Error("commit log write failed; appends are refused until the store is reopened", "err", err)
	}
	s.stage.drained.Broadcast()
	s.mu.Unlock()
	return err
}
