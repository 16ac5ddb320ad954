package store

import (
	"fmt"
	"sync"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

// A batch's records of one partition get consecutive queue offsets even
// while other goroutines append to the same partition, and a batch crossing
// the end of a segment rolls as a whole.
func TestAppendBatchContiguous(t *testing.T) {
	for _, syncMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", syncMode), func(t *testing.T) {
			cfg := testConfig(t, "")
			if syncMode {
				cfg.UnflushThreshold = 0
			}
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			const batches, per, plain = 40, 10, 400
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; i < plain; i++ {
					m := Message{Topic: "t", Partition: 0, Data: []byte("plain")}
					if _, err := s.Append(&m); err != nil {
						t.Errorf("Append: %v", err)
						return
					}
				}
			})
			wg.Go(func() {
				res := make([]AppendResult, per)
				for b := 0; b < batches; b++ {
					msgs := make([]Message, per)
					for i := range msgs {
						msgs[i] = Message{Topic: "t", Partition: 0, Data: fmt.Appendf(nil, "tx%d-%d-%0200d", b, i, 0)}
					}
					f, err := s.AppendBatch(msgs, res)
					if err == nil && f != nil {
						err = f.Wait()
					} else if err == nil {
						err = s.WriteOut()
					}
					if err != nil {
						t.Errorf("AppendBatch: %v", err)
						return
					}
					for i := 1; i < per; i++ {
						if res[i].QueueOffset != res[0].QueueOffset+int64(i) {
							t.Errorf("batch %d: offsets %d then %d", b, res[0].QueueOffset, res[i].QueueOffset)
						}
					}
				}
			})
			wg.Wait()
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			// Read everything back: each batch's records are adjacent.
			recs := readAll(t, s, "t", 0, 0, nil)
			if len(recs) != plain+batches*per {
				t.Fatalf("read %d records", len(recs))
			}
			for i := 0; i < len(recs); i++ {
				var b, k int
				if _, err := fmt.Sscanf(string(recs[i].Data), "tx%d-%d-", &b, &k); err != nil {
					continue
				}
				if k != 0 {
					t.Fatalf("record %d: batch %d starts at message %d", i, b, k)
				}
				for k = 1; k < per; k++ {
					var b2, k2 int
					if _, err := fmt.Sscanf(string(recs[i+k].Data), "tx%d-%d-", &b2, &k2); err != nil || b2 != b || k2 != k {
						t.Fatalf("record %d: batch %d interrupted by %q", i+k, b, recs[i+k].Data[:8])
					}
				}
				i += per - 1
			}
		})
	}
}

// AppendRun stores the same records as AppendBatch and reports the run: the
// first record's id, offset and position, each following record at the
// previous one plus its size. Messages of more than one partition are
// refused with nothing stored.
func TestAppendRunReportsTheRun(t *testing.T) {
	for _, syncMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", syncMode), func(t *testing.T) {
			cfg := testConfig(t, "")
			if syncMode {
				cfg.UnflushThreshold = 0
			}
			s := mustOpen(t, cfg)
			defer mustClose(t, s)
			wait := func(f *Flush, err error) {
				t.Helper()
				if err == nil && f != nil {
					err = f.Wait()
				} else if err == nil {
					err = s.WriteOut()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Append(&Message{Topic: "r", Partition: 1, Data: []byte("before")}); err != nil {
				t.Fatal(err)
			}
			msgs := make([]Message, 7)
			for i := range msgs {
				msgs[i] = Message{Topic: "r", Partition: 1, Flag: int32(i), Data: fmt.Appendf(nil, "m%0*d", i*13, i)}
				if i == 3 {
					msgs[i].Properties = []byte("tag=x")
				}
			}
			var run RunResult
			f, err := s.AppendRun(msgs, &run)
			wait(f, err)
			if run.FirstOffset != 1 {
				t.Fatalf("first offset %d, want 1", run.FirstOffset)
			}
			bad := []Message{{Topic: "r", Partition: 1, Data: []byte("x")}, {Topic: "r", Partition: 2, Data: []byte("y")}}
			if _, err := s.AppendRun(bad, &run); err != ErrBadPartition {
				t.Fatalf("two partitions: %v, want ErrBadPartition", err)
			}
			recs := readAll(t, s, "r", 1, 0, nil)
			if len(recs) != 1+len(msgs) {
				t.Fatalf("read %d records, want %d", len(recs), 1+len(msgs))
			}
			id, phys := run.FirstMsgID, run.FirstPhys
			for i, m := range msgs {
				r := recs[1+i]
				if r.MsgID != id || r.PhysicalOffset != phys || r.QueueOffset != run.FirstOffset+int64(i) ||
					r.StoreTime != run.StoreTime || string(r.Data) != string(m.Data) || r.Flag != m.Flag ||
					string(r.Properties) != string(m.Properties) {
					t.Fatalf("record %d: id %d phys %d offset %d store %d, want id %d phys %d offset %d store %d",
						i, r.MsgID, r.PhysicalOffset, r.QueueOffset, r.StoreTime, id, phys, run.FirstOffset+int64(i), run.StoreTime)
				}
				size := int64(protocol.RecordSize(len(m.Topic), len(m.Properties), len(m.Data)))
				id += size
				phys += size
			}
		})
	}
}
