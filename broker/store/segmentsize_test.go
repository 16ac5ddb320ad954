package store

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// writeTestRecord encodes one record of big/0 at log position pos into f (a
// segment file starting at base).
func writeTestRecord(t *testing.T, f *os.File, base, pos, qoff int64, data string) int64 {
	t.Helper()
	topic := []byte("big")
	n := protocol.RecordSize(len(topic), 0, len(data))
	b := make([]byte, n)
	protocol.EncodeRecord(b, &protocol.Record{
		MsgID: protocol.MakeMsgID(7, pos), QueueOffset: qoff, PhysicalOffset: pos,
		StoreTime: 1000 + qoff, BornTime: 1000 + qoff, Topic: topic, Data: []byte(data),
	})
	if _, err := f.WriteAt(b, pos-base); err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

// TestSegmentSizeBound: a roll's BLANK filler records the rest of the
// segment in a 32-bit size field, so a SegmentSize of 4 GiB or more would
// make it wrap (crash recovery then took it for a filler that does not end
// the segment and cut the log there). Open refuses such a size.
func TestSegmentSizeBound(t *testing.T) {
	for _, size := range []int64{1 << 32, 64 << 30} {
		cfg := Config{Dir: t.TempDir(), SegmentSize: size}
		err := cfg.fill()
		if err == nil || !strings.Contains(err.Error(), "SegmentSize") || !strings.Contains(err.Error(), "4294967295") {
			t.Errorf("SegmentSize %d: fill() = %v, want an error naming SegmentSize and the limit 4294967295", size, err)
		}
	}
	cfg := Config{Dir: t.TempDir(), SegmentSize: protocol.MaxSegmentSize}
	if err := cfg.fill(); err != nil {
		t.Errorf("SegmentSize %d (the limit): %v", int64(protocol.MaxSegmentSize), err)
	}
}

// TestRecoverAfterRollOfBigSegment: a crash right after a roll of a segment
// as large as the format allows, and of a segment larger than that written
// before the bound existed (its filler's size is the rest of the segment
// modulo 2^32): recovery must take the roll's BLANK, written by the real
// code (rollStagedLocked), as the end of the segment and keep the next
// segment's record. It used to truncate the log at the wrapped filler and
// delete every later segment: acknowledged messages lost.
func TestRecoverAfterRollOfBigSegment(t *testing.T) {
	for _, tc := range []struct {
		name string
		file int64 // segment files' size (sparse; no disk used)
		cfg  int64 // SegmentSize the store is opened with
	}{
		{"at-the-limit", protocol.MaxSegmentSize, protocol.MaxSegmentSize},
		{"legacy-over-4GiB", 1<<32 + 1<<16, DefaultSegmentSize},
	} {
		t.Run(tc.name, func(t *testing.T) { recoverAfterBigRoll(t, tc.file, tc.cfg) })
	}
}

func recoverAfterBigRoll(t *testing.T, S, segSize int64) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = S
	cfg.UnflushThreshold = 1 << 20
	cfg.UnflushInterval = time.Hour
	cfg.ZeroFill = ZeroFillNever
	// No multi-GiB preallocation of a next segment during the test.
	cfg.hooks = &faultHooks{onFallocate: func(string) error { return syscall.ENOSPC }}
	logDir := filepath.Join(cfg.Dir, "commitlog")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(base int64) *os.File {
		f, err := os.Create(filepath.Join(logDir, segmentName(base)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(S); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f0, f1 := mk(0), mk(S)
	n0 := writeTestRecord(t, f0, 0, 0, 0, "first")
	writeTestRecord(t, f1, S, S, 1, "second, acknowledged")
	f0.Close()
	f1.Close()

	// The roll's BLANK, written by the real code.
	var wg sync.WaitGroup
	l := newCommitLog(&cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), logDir, new(counters), nil, &wg)
	g0, err := openSegment(filepath.Join(logDir, segmentName(0)), 0)
	if err != nil {
		t.Fatal(err)
	}
	g1 := &segment{base: S, size: S}
	l.mu.Lock()
	l.wpos = n0
	l.rollStagedLocked(g0, g1)
	werr := l.writeErr
	l.mu.Unlock()
	g0.release()
	if werr != nil {
		t.Fatal(werr)
	}
	// kill -9 after the roll, before any checkpoint.
	if err := os.WriteFile(filepath.Join(cfg.Dir, "abort"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var lb logBuf
	cfg.Logger = newTestLogger(&lb)
	cfg.SegmentSize = segSize
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	r, err := s.ReadByID(protocol.MakeMsgID(7, S))
	if err != nil {
		t.Fatalf("the record in the second segment is lost after recovery: %v\nlog:\n%s", err, lb.String())
	}
	r.Release()
	if strings.Contains(lb.String(), "truncated") {
		t.Errorf("recovery truncated the log:\n%s", lb.String())
	}
}
