package store

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

func TestTenThousandPartitions(t *testing.T) {
	const parts, each = 10000, 3
	// This test checks the store's logic (lazy files, fd LRU, no goroutine
	// per partition), not the disk.
	tempDirOnTmpfs(t)
	cfg := testConfig(t, "")
	cfg.UnflushThreshold = 1000
	cfg.SegmentSize = 1 << 20
	cfg.IndexFileSize = 64 // 4 units per file: 10,000 files
	cfg.MaxOpenIndexFiles = 200
	t0 := time.Now()
	s := mustOpen(t, cfg)
	goroutines := runtime.NumGoroutine()
	m := &Message{Topic: "many"}
	for i := 0; i < parts*each; i++ {
		m.Partition = int32(i % parts)
		m.Data = []byte(fmt.Sprintf("%d/%d", m.Partition, i/parts))
		if _, _, err := s.AppendAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Fatalf("goroutines grew %d -> %d", goroutines, g)
	}
	t.Logf("appended in %v", time.Since(t0))
	waitFor(t, "dispatch", func() bool { return s.dispatched.Load() == s.clog.written.Load() })
	t.Logf("dispatched in %v", time.Since(t0))
	if st := s.Stats(); st.OpenIndexFiles > cfg.MaxOpenIndexFiles {
		t.Fatalf("%d index files open, cap %d", st.OpenIndexFiles, cfg.MaxOpenIndexFiles)
	}
	check := func(s *Store) {
		t.Helper()
		for p := int32(0); p < parts; p++ {
			if s.MaxOffset("many", p) != each {
				t.Fatalf("partition %d: max %d", p, s.MaxOffset("many", p))
			}
			r, err := s.Read("many", p, 1, 1<<20, nil)
			if err != nil || r.Count != each-1 {
				t.Fatalf("partition %d: %v count %d", p, err, r.Count)
			}
			rec, _, _ := protocol.DecodeRecord(r.Bufs[0], 0)
			if string(rec.Data) != fmt.Sprintf("%d/1", p) {
				t.Fatalf("partition %d: %q", p, rec.Data)
			}
			r.Release()
		}
	}
	check(s)
	t.Logf("checked in %v", time.Since(t0))
	if ti := s.Topics(); len(ti) != 1 || len(ti[0].Partitions) != parts {
		t.Fatal("Topics")
	}
	mustClose(t, s)
	t.Logf("closed in %v", time.Since(t0))
	s = mustOpen(t, cfg)
	t.Logf("reopened in %v", time.Since(t0))
	check(s)
	t.Logf("checked in %v", time.Since(t0))
	mustClose(t, s)
}
