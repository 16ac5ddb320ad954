package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/metaqgo/metaq/protocol"
)

// A replica's log is cut or replaced at Open, never under a running store
// (the first version of docs/internal/store-api.md (c): "truncate, then
// reopen the store"). ScheduleReset writes a marker file into the data
// directory; the next Open applies it during recovery and removes it.
//
//	<dataPath>/ha-reset    "<kind> <pos> <crc>\n"
//	                       kind: truncate | reset; crc: CRC-32C of "<kind> <pos>"
//
// truncate <pos>: the commit log is cut at pos (a record boundary: the
// divergence point of a former master, docs/replication.md); the bytes and
// records cut are logged, the log is rescanned and every index rebuilt.
// reset <pos>: the commit log, indexes, key index and checkpoint are
// deleted and the log starts empty at pos (a slave behind its master's
// retention starts at the master's oldest segment).
//
// Written temp → fsync → rename → fsync dir; a torn or damaged marker is
// ignored with a warning (the replica then finds the divergence again).

// ResetKind is what ScheduleReset asks the next Open to do.
type ResetKind string

const (
	ResetTruncate ResetKind = "truncate"
	ResetWipe     ResetKind = "reset"
)

const resetMarker = "ha-reset"

// ScheduleReset records that the next Open of the store in dir must cut
// (ResetTruncate) or replace (ResetWipe) its commit log at pos.
func ScheduleReset(dir string, kind ResetKind, pos int64) error {
	if kind != ResetTruncate && kind != ResetWipe || pos < 0 {
		return fmt.Errorf("store: bad reset %q %d", kind, pos)
	}
	body := string(kind) + " " + strconv.FormatInt(pos, 10)
	line := body + " " + strconv.FormatUint(uint64(protocol.CRC32C([]byte(body))), 10) + "\n"
	tmp := filepath.Join(dir, resetMarker+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("store: reset marker: %w", err)
	}
	_, err = f.WriteString(line)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, resetMarker))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("store: reset marker: %w", err)
	}
	return nil
}

// PendingReset reads the marker in dir (ok false: none, or unreadable).
func PendingReset(dir string) (kind ResetKind, pos int64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, resetMarker))
	if err != nil {
		return "", 0, false
	}
	f := bytes.Fields(b)
	if len(f) != 3 {
		return "", 0, false
	}
	body := string(f[0]) + " " + string(f[1])
	crc, err1 := strconv.ParseUint(string(f[2]), 10, 32)
	pos, err2 := strconv.ParseInt(string(f[1]), 10, 64)
	kind = ResetKind(f[0])
	if err1 != nil || err2 != nil || pos < 0 || uint32(crc) != protocol.CRC32C([]byte(body)) ||
		kind != ResetTruncate && kind != ResetWipe {
		return "", 0, false
	}
	return kind, pos, true
}

// takeReset is recovery's part: it reads the marker (a bad one is logged
// and removed) and, for a wipe, deletes the log, indexes and checkpoint.
func (s *Store) takeReset() (kind ResetKind, pos int64, ok bool, err error) {
	path := filepath.Join(s.cfg.Dir, resetMarker)
	if _, serr := os.Stat(path); serr != nil {
		return "", 0, false, nil
	}
	kind, pos, ok = PendingReset(s.cfg.Dir)
	if !ok {
		s.log.Warn("replication: ignoring a damaged reset marker", "file", path)
		_ = os.Remove(path)
		return "", 0, false, nil
	}
	if kind == ResetWipe {
		s.log.Warn("replication: deleting the commit log and indexes; the log restarts empty at the master's oldest segment",
			"startsAt", pos)
		for _, d := range []string{s.logDir, s.indexDir, s.keyDir} {
			if err := os.RemoveAll(d); err != nil {
				return "", 0, false, fmt.Errorf("store: reset: %w", err)
			}
			if err := os.MkdirAll(d, 0o755); err != nil {
				return "", 0, false, fmt.Errorf("store: reset: %w", err)
			}
		}
		_ = os.Remove(s.checkpointPath())
		if err := syncDir(s.cfg.Dir); err != nil {
			return "", 0, false, fmt.Errorf("store: reset: %w", err)
		}
	}
	return kind, pos, true, nil
}

// doneReset removes the marker once recovery has applied it.
func (s *Store) doneReset() error {
	if err := os.Remove(filepath.Join(s.cfg.Dir, resetMarker)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("store: reset marker: %w", err)
	}
	return syncDir(s.cfg.Dir)
}
