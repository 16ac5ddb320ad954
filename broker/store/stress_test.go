package store

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// TestConcurrentUse runs appenders, long-polling readers, Flush, retention,
// key queries, id lookups and stats at once (for the race detector), in both
// flush modes, then checks every message.
func TestConcurrentUse(t *testing.T) {
	for _, mode := range []int{0, 50} {
		t.Run(fmt.Sprint("threshold=", mode), func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.UnflushThreshold = mode
			cfg.SegmentSize = 16 << 10
			cfg.Retention = time.Hour
			cfg.CheckpointInterval = 2 * time.Millisecond
			s := mustOpen(t, cfg)
			const writers, each, parts = 4, 150, 3
			var wg sync.WaitGroup
			var lastID atomic.Int64
			stop := make(chan struct{})
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						p := int32((w + i) % parts)
						a, err := s.Append(&Message{Topic: "cc", Partition: p, Properties: []byte(fmt.Sprintf("tag=w%d&keys=w%d-%d", w, w, i)),
							Data: []byte(fmt.Sprintf("w%d-%d", w, i))})
						if err != nil {
							t.Error(err)
							return
						}
						lastID.Store(a.MsgID)
					}
				}(w)
			}
			var readers sync.WaitGroup
			counts := make([]atomic.Int64, parts)
			for p := 0; p < parts; p++ {
				readers.Add(1)
				go func(p int32) { // a long-polling consumer
					defer readers.Done()
					off := int64(0)
					for {
						r, err := s.Read("cc", p, off, 512, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Status == ReadFound {
							it := protocol.NewRecordIterator(bytes.Join(r.Bufs, nil))
							for it.Next() {
								if it.Record().QueueOffset != off {
									t.Errorf("partition %d: offset %d, want %d", p, it.Record().QueueOffset, off)
								}
								off++
							}
							counts[p].Store(off)
							r.Release()
							continue
						}
						r.Release()
						select {
						case <-s.Wait("cc", p, off):
						case <-stop:
							return
						}
					}
				}(int32(p))
			}
			readers.Add(1)
			go func() { // housekeeping and lookups
				defer readers.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					s.Flush()
					s.DeleteExpired(time.Now())
					if r, err := s.QueryKey("cc", "w1-3", 3); err == nil {
						r.Release()
					}
					if id := lastID.Load(); id != 0 {
						if r, err := s.ReadByID(id); err == nil {
							r.Release()
						}
					}
					s.OffsetForTime("cc", 1, time.Now().UnixMilli()-1000)
					_ = s.Stats()
					_ = s.Topics()
				}
			}()
			wg.Wait()
			waitFor(t, "consumers caught up", func() bool {
				var n int64
				for p := range counts {
					n += counts[p].Load()
				}
				return n == writers*each
			})
			close(stop)
			readers.Wait()
			mustClose(t, s)
		})
	}
}
