package store

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIndexWriteRacingCheckpointSyncStaysDirty: a checkpoint's syncDirty
// running while the dispatcher's index pwrite is in flight (the housekeeper
// and the dispatcher run concurrently) must not leave the written file
// marked clean. fileCache.pwrite used to mark the file dirty before its
// pwrite: the sync took it off the dirty list and fsynced it before the
// units landed, so the next checkpoint claimed those units durable
// (dispatched) without fsyncing them, and after a power failure recovery
// trusted an index that had lost them.
func TestIndexWriteRacingCheckpointSyncStaysDirty(t *testing.T) {
	for _, control := range []bool{true, false} {
		t.Run(map[bool]string{true: "control-no-race", false: "race"}[control], func(t *testing.T) {
			indexWriteRace(t, control)
		})
	}
}

func indexWriteRace(t *testing.T, control bool) {
	var hit atomic.Bool
	cfg := testConfig(t, "")
	cfg.CheckpointInterval = time.Hour
	var s *Store
	var armed sync.Once
	var ready = make(chan struct{})
	cfg.hooks = &faultHooks{onPwrite: func(path string) error {
		<-ready
		if filepath.Base(filepath.Dir(filepath.Dir(path))) == "race" {
			// A checkpoint's index sync runs right now, while the
			// write is in flight.
			armed.Do(func() {
				hit.Store(true)
				if !control {
					_ = s.files.syncDirty(s.indexDir)
				}
			})
		}
		return nil
	}}
	s = mustOpen(t, cfg)
	close(ready)
	defer mustClose(t, s)
	// 64 units fill one block (IndexFileSize 1024): the dispatcher writes it.
	for i := 0; i < 64; i++ {
		mustAppend(t, s, &Message{Topic: "race", Partition: 0, Data: body("race", 0, i, 50)})
	}
	waitReadable(t, s, "race", 0, 64)
	waitFor(t, "block written", hit.Load)
	s.dispMu.Lock() // the dispatcher's write is done
	s.dispMu.Unlock()
	if n := s.files.dirtyCount(); n == 0 {
		t.Fatalf("the index file written while the checkpoint's sync ran is not dirty: the next checkpoint will not fsync it (dirtyCount=0)")
	}
}
