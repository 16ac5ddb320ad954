package store

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// slowDispatcher makes every index and key-index write take d while on is
// set: a dispatcher that is not scheduled for a while, as on a loaded
// 2-core machine.
func slowDispatcher(on *atomic.Bool, d time.Duration) func(string) error {
	return func(string) error {
		if on.Load() {
			time.Sleep(d)
		}
		return nil
	}
}

// TestReadWaitsForASlowDispatcher: a read of an acknowledged record must
// find it even when the dispatcher takes longer than catchUpTimeout to
// index it (it used to answer "no message" after 50 ms, the flake of
// TestStagedRecordsAreReadableBeforeWriteOut and TestReadYourWritesWholeRange
// under load). The records carry a key so that every dispatch batch writes
// the key index, which the hook slows down.
func TestReadWaitsForASlowDispatcher(t *testing.T) {
	for _, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t, "")
			if mode == "async" {
				cfg.UnflushThreshold = 1000
				cfg.UnflushInterval = time.Hour
			}
			var slow atomic.Bool
			cfg.hooks = &faultHooks{onPwrite: slowDispatcher(&slow, 4*catchUpTimeout)}
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			defer slow.Store(false)
			slow.Store(true)
			for round := 0; round < 3; round++ {
				var first int64 = -1
				for i := 0; i < 5; i++ {
					m := &Message{Topic: "slow", Properties: []byte("keys=k" + strconv.Itoa(i)), Data: []byte("x")}
					var a AppendResult
					var err error
					if mode == "async" {
						a, _, err = s.AppendAsync(m)
					} else {
						a, err = s.Append(m)
					}
					if err != nil {
						t.Fatal(err)
					}
					if first < 0 {
						first = a.QueueOffset
					}
				}
				// The newest record, then the whole range from 0.
				r, err := s.Read("slow", 0, first+4, 4096, nil)
				if err != nil || r.Status != ReadFound {
					t.Fatalf("round %d: read of the newest record: %v, status %v", round, err, r.Status)
				}
				r.Release()
				r, err = s.Read("slow", 0, 0, 1<<20, nil)
				if err != nil || r.Count != int(first+5) {
					t.Fatalf("round %d: read %d records from 0 (err %v), want %d", round, r.Count, err, first+5)
				}
				r.Release()
			}
		})
	}
}
