package store

import (
	"fmt"
	"testing"
)

// A replica's read limit (SetReadLimit: its master's high watermark) hides
// what lies past it from Read, MaxOffset and ReadByID, in both flush modes;
// raising it serves them; removing it serves everything.
func TestRawReadLimit(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			mc, rc := testConfig(t, ""), testConfig(t, "")
			if sync {
				mc.UnflushThreshold, rc.UnflushThreshold = 0, 0
			}
			m, r := mustOpen(t, mc), mustOpen(t, rc)
			defer mustClose(t, m)
			defer mustClose(t, r)
			r.SetReplica(true)
			r.SetReadLimit(0)
			if got := r.ReadLimit(); got != 0 {
				t.Fatalf("ReadLimit %d, want 0", got)
			}
			var acked []AppendResult
			for i := 0; i < 10; i++ {
				acked = append(acked, mustAppend(t, m, &Message{Topic: "t", Data: body("t", 0, i, 50)}))
			}
			_ = m.WriteOut()
			end := copyRaw(t, m, r, 0, 1<<20)
			served := func(n int64) {
				t.Helper()
				if got := r.MaxOffset("t", 0); got != n {
					t.Fatalf("MaxOffset %d, want %d", got, n)
				}
				res, err := r.Read("t", 0, 0, 1<<20, nil)
				if err != nil {
					t.Fatal(err)
				}
				if int64(res.Count) != n {
					t.Fatalf("Read served %d records, want %d", res.Count, n)
				}
				res.Release()
				for i, a := range acked {
					res, err := r.ReadByID(a.MsgID)
					if got := err == nil; got != (int64(i) < n) {
						t.Fatalf("ReadByID of record %d: %v, want served %v", i, err, int64(i) < n)
					}
					if err == nil {
						res.Release()
					}
				}
			}
			served(0)
			// The limit at the end of the 4th record: 4 served.
			r.RaiseReadLimit(acked[4].PhysicalOffset)
			waitReadable(t, r, "t", 0, 4)
			served(4)
			r.RaiseReadLimit(acked[2].PhysicalOffset) // never down
			served(4)
			r.RaiseReadLimit(end)
			waitReadable(t, r, "t", 0, 10)
			served(10)
			r.SetReadLimit(-1)
			if r.ReadLimit() != -1 {
				t.Fatalf("ReadLimit after removing it: %d", r.ReadLimit())
			}
			r.RaiseReadLimit(5) // no limit: nothing to raise
			if r.ReadLimit() != -1 {
				t.Fatalf("RaiseReadLimit set a limit: %d", r.ReadLimit())
			}
		})
	}
}

// BenchmarkAppendRaw: a slave's append of what its master ships (100-byte
// messages over 4 partitions, 1 MiB runs as the stream reads them): the
// per-record check (layout, CRC) and bookkeeping, the write to the segment
// file. Reports ns per record.
func BenchmarkAppendRaw(b *testing.B) {
	mc, rc := testConfig(b, ""), testConfig(b, "")
	mc.SegmentSize, rc.SegmentSize = 256<<20, 256<<20
	mc.UnflushThreshold, rc.UnflushThreshold = 1000, 1000
	m, r := mustOpen(b, mc), mustOpen(b, rc)
	defer mustClose(b, m)
	defer func() { mustClose(b, r) }()
	r.SetReplica(true)
	const n = 200_000 // ~ 28 MB
	data := make([]byte, 100)
	for i := 0; i < n; i++ {
		if _, _, err := m.AppendAsync(&Message{Topic: "bench", Partition: int32(i % 4), Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	_ = m.WriteOut()
	var chunks []RawChunk
	for pos := int64(0); ; {
		c, ok, err := m.ReadRaw(pos, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			break
		}
		chunks = append(chunks, c)
		pos = c.Next
	}
	defer func() {
		for i := range chunks {
			chunks[i].Release()
		}
	}()
	b.ResetTimer()
	done := 0
	for done < b.N {
		// One pass over the master's log per n records; a fresh replica
		// each pass (positions must continue from 0).
		if done > 0 {
			b.StopTimer()
			mustClose(b, r)
			rc = testConfig(b, "")
			rc.SegmentSize, rc.UnflushThreshold = 256<<20, 1000
			r = mustOpen(b, rc)
			r.SetReplica(true)
			b.StartTimer()
		}
		for i := range chunks {
			if err := r.AppendRaw(chunks[i].Pos, chunks[i].Buf); err != nil {
				b.Fatal(err)
			}
			if err := r.WriteOut(); err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/record")
}

// BenchmarkCheckRaw: the CPU part of AppendRaw alone — checking a 1 MiB
// run of 100-byte records (layout, CRC, physical offsets) and collecting
// the partitions it appends to. Reports ns per record.
func BenchmarkCheckRaw(b *testing.B) {
	mc, rc := testConfig(b, ""), testConfig(b, "")
	mc.SegmentSize, rc.SegmentSize = 64<<20, 64<<20
	m, r := mustOpen(b, mc), mustOpen(b, rc)
	defer mustClose(b, m)
	defer mustClose(b, r)
	data := make([]byte, 100)
	for i := 0; i < 12_000; i++ {
		if _, _, err := m.AppendAsync(&Message{Topic: "bench", Partition: int32(i % 4), Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	_ = m.WriteOut()
	c, ok, err := m.ReadRaw(0, 1<<20)
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	defer c.Release()
	l := r.clog
	recs := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.mu.Lock()
		run, err := l.checkRawLocked(c.Buf)
		l.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
		recs += int(run.count)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recs), "ns/record")
}
