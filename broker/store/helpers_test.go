package store

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		// Child of the crash test: no leak check (it is killed).
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// logBuf is a concurrency-safe log sink for tests that check what was logged.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testConfig(t testing.TB, dir string) Config {
	if dir == "" {
		dir = t.TempDir()
	}
	return Config{
		Dir:                dir,
		BrokerID:           7,
		SegmentSize:        64 << 10,
		IndexFileSize:      1024, // 64 units per file
		UnflushThreshold:   1,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		CheckpointInterval: 50 * time.Millisecond,
		KeyIndexSlots:      64,
		KeyIndexEntries:    256,
	}
}

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func body(topic string, part int32, i int, n int) []byte {
	b := []byte(fmt.Sprintf("%s/%d/%d:", topic, part, i))
	for len(b) < n {
		b = append(b, byte('a'+len(b)%26))
	}
	return b[:max(n, len(b))]
}

func mustAppend(t testing.TB, s *Store, m *Message) AppendResult {
	t.Helper()
	r, err := s.Append(m)
	if err != nil {
		t.Fatalf("Append %s/%d: %v", m.Topic, m.Partition, err)
	}
	return r
}

// failWhile is a fault hook (faultHooks) that fails with err while on is set.
func failWhile(on *atomic.Bool, err error) func(string) error {
	return func(string) error {
		if on.Load() {
			return err
		}
		return nil
	}
}

// waitPrepared waits until the preallocator has the next segment ready.
func waitPrepared(t testing.TB, s *Store) {
	t.Helper()
	waitFor(t, "preallocation", func() bool {
		s.clog.pre.mu.Lock()
		defer s.clog.pre.mu.Unlock()
		return s.clog.pre.ready != nil
	})
}

// appendUntilError appends up to n messages body("d", 0, i, size) to d/0 and
// returns those acknowledged and the first error.
func appendUntilError(t testing.TB, s *Store, n, size int) (acked []AppendResult, err error) {
	t.Helper()
	for i := 0; i < n; i++ {
		a, err := s.Append(&Message{Topic: "d", Data: body("d", 0, i, size)})
		if err != nil {
			return acked, err
		}
		acked = append(acked, a)
	}
	return acked, nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitReadable waits until topic/part has n readable messages.
func waitReadable(t testing.TB, s *Store, topic string, part int32, n int64) {
	t.Helper()
	_ = s.WriteOut() // async: records appended with AppendAsync are staged until then
	waitFor(t, fmt.Sprintf("%s/%d readable to %d", topic, part, n), func() bool {
		p := s.partition(topic, part, false)
		return p != nil && p.indexed.Load() >= n
	})
}

// readAll reads every record of topic/part from offset from, decoding them.
func readAll(t testing.TB, s *Store, topic string, part int32, from int64, f *protocol.TagFilter) []protocol.Record {
	t.Helper()
	var out []protocol.Record
	off := from
	for {
		r, err := s.Read(topic, part, off, 4096, f)
		if err != nil {
			t.Fatalf("Read %s/%d@%d: %v", topic, part, off, err)
		}
		switch r.Status {
		case ReadFound:
			for _, b := range r.Bufs {
				it := protocol.NewRecordIterator(b)
				for it.Next() {
					rec := *it.Record()
					rec.Topic = bytes.Clone(rec.Topic)
					rec.Properties = bytes.Clone(rec.Properties)
					rec.Data = bytes.Clone(rec.Data)
					out = append(out, rec)
				}
				if it.Err() != nil {
					t.Fatalf("decode: %v", it.Err())
				}
			}
			off = r.NextOffset
			r.Release()
		case ReadFiltered:
			off = r.NextOffset
			r.Release()
		default:
			r.Release()
			return out
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tempDirOnTmpfs sends t's t.TempDir to tmpfs when there is one: 10,000
// partitions mean 10,000 directories and index files, and on this project's
// shared ext4 VM disk a mkdir or create costs ~300µs, which would dominate a
// test or a benchmark's setup that is not about the disk.
func tempDirOnTmpfs(t testing.TB) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		t.Setenv("TMPDIR", "/dev/shm")
	}
}
