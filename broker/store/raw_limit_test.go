package store

import (
	"bytes"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
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
	rc := testConfig(b, "")
	rc.SegmentSize, rc.UnflushThreshold = 256<<20, 1000
	r := mustOpen(b, rc)
	defer func() { mustClose(b, r) }()
	r.SetReplica(true)
	const n = 200_000 // ~ 28 MB
	chunks := rawBenchLog(b, n, testConfig(b, ""))
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

// rawBenchLog appends n 100-byte messages over 4 partitions (no properties)
// to a master opened with cfg (256 MiB segments, async flush) and returns
// its log as ReadRaw's 1 MiB chunks (to Release).
func rawBenchLog(b *testing.B, n int, cfg Config) []RawChunk {
	cfg.SegmentSize, cfg.UnflushThreshold = 256<<20, 1000
	m := mustOpen(b, cfg)
	b.Cleanup(func() { mustClose(b, m) })
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
			return chunks
		}
		chunks = append(chunks, c)
		pos = c.Next
	}
}

// BenchmarkRaiseReadLimitFrom: a slave's receive loop per 1 MiB run of
// 100-byte messages over 4 partitions (no properties): AppendRaw of the run
// from its receive buffer, then RaiseReadLimitFrom to its end with the
// buffer as the span, which indexes it on the calling goroutine — the check,
// the write into the segment, the indexing; no fdatasync. Reports the wall
// time and the process's CPU time (user + system, all goroutines) per
// record: the CPU moves much less with the machine's load.
func BenchmarkRaiseReadLimitFrom(b *testing.B) {
	const n = 200_000 // ~ 28 MB
	chunks := rawBenchLog(b, n, testConfig(b, ""))
	bufs := make([]RawSpan, len(chunks)) // the receive buffers
	for i := range chunks {
		bufs[i] = RawSpan{Pos: chunks[i].Pos, Buf: bytes.Clone(chunks[i].Buf)}
		chunks[i].Release()
	}
	var r *Store
	open := func() {
		rc := testConfig(b, "")
		rc.SegmentSize, rc.UnflushThreshold, rc.Replica, rc.IndexFileSize = 256<<20, 1000, true, 0
		r = mustOpen(b, rc)
		r.SetReadLimit(0)
	}
	open()
	defer func() { mustClose(b, r) }()
	var cpu time.Duration
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	done := 0
	for done < b.N {
		if done > 0 { // a fresh replica each pass (positions continue from 0)
			b.StopTimer()
			cpu += rusageSince(&ru0)
			mustClose(b, r)
			open()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.StartTimer()
		}
		for i := range bufs {
			sp := bufs[i : i+1]
			if err := r.AppendRaw(sp[0].Pos, sp[0].Buf); err != nil {
				b.Fatal(err)
			}
			if err := r.WriteOut(); err != nil {
				b.Fatal(err)
			}
			r.RaiseReadLimitFrom(sp[0].Pos+int64(len(sp[0].Buf)), sp)
		}
		done += n
	}
	b.StopTimer()
	cpu += rusageSince(&ru0)
	if last := bufs[len(bufs)-1]; r.IndexedPos() != last.Pos+int64(len(last.Buf)) {
		b.Fatalf("indexed to %d", r.IndexedPos())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(done), "cpu-ns/record")
}

// rusageSince is the process's user + system CPU time since *ru0.
func rusageSince(ru0 *syscall.Rusage) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
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

// RaiseReadLimitFrom indexes what becomes readable from the caller's copy of
// the bytes (a slave's receive buffer), reused by the caller as soon as the
// call returns: the replica serves exactly what a replica indexed from its
// mapped log serves — the same records per partition and offset, the same
// tag filtering (the units' tag hashes and signatures), the same key
// lookups — with the limit inside a span, spans that do not cover what became
// readable (read from the log), BLANK chunks among the spans, and segment
// rolls; records without properties are indexed from what AppendRaw's check
// found (rawUnit), the others decoded from the spans; and the indexing ran
// on the caller's goroutine.
func TestRawReadLimitFromSpans(t *testing.T) {
	m, ra, rb := mustOpen(t, testConfig(t, "")), mustOpen(t, testConfig(t, "")), mustOpen(t, testConfig(t, ""))
	defer mustClose(t, m)
	defer mustClose(t, ra)
	defer mustClose(t, rb)
	for _, r := range []*Store{ra, rb} {
		r.SetReplica(true)
		r.SetReadLimit(0)
	}
	tags := []string{"a", "b", "", "a", "c%20d"}
	var ends []int64            // the end of each record on the master
	for i := 0; i < 1200; i++ { // ~ 8 segments of 64 KiB
		props := fmt.Sprintf("keys=k%d", i)
		if tag := tags[i%len(tags)]; tag != "" {
			props = "tag=" + tag + "&" + props
		}
		switch {
		case i%7 == 0:
			props = "x=1" // no tag: the unit holds the properties' signature
		case i%3 != 0:
			props = "" // no properties: indexed from the check's entry alone
		}
		a := mustAppend(t, m, &Message{Topic: fmt.Sprintf("t%d", i%3), Partition: int32(i % 2),
			Properties: []byte(props), Data: body("t", 0, i, 200+i%97)})
		ends = append(ends, a.PhysicalOffset+int64(a.Size))
	}
	_ = m.WriteOut()
	var (
		pos    int64
		spans  []RawSpan
		inline = rb.counters.inlineDispatches.Load()
		calls  int64
	)
	for k := 0; pos < m.VisiblePos(); k++ {
		spans = spans[:0]
		var bufs [][]byte
		for n := 0; n < 1+k%3; n++ { // one to three chunks per "read"
			c, ok, err := m.ReadRaw(pos, 3000+k*97%20000)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			buf := bytes.Clone(c.Buf) // the receive buffer
			for _, r := range []*Store{ra, rb} {
				if err := r.AppendRaw(c.Pos, buf); err != nil {
					t.Fatalf("AppendRaw %d: %v", c.Pos, err)
				}
			}
			spans = append(spans, RawSpan{Pos: c.Pos, Buf: buf})
			bufs = append(bufs, buf)
			pos = c.Next
			c.Release()
		}
		// As the slave's receive loop does (broker/ha/follow.go): what a
		// read appended is written out before the limit is raised. Without
		// it a run staged while the flusher was writing the previous one
		// waited for the next flush, and the comparison of the logs below
		// found it missing (1 run in ~100 under load).
		for _, r := range []*Store{ra, rb} {
			if err := r.WriteOut(); err != nil {
				t.Fatal(err)
			}
		}
		// The limit: the end of what was shipped, or a record end inside
		// it, or (every fifth read) nothing new.
		limit := pos
		switch k % 5 {
		case 1:
			i, _ := slices.BinarySearch(ends, pos)
			limit = ends[max(i-3, 0)]
		case 4:
			limit = rb.ReadLimit()
		}
		if k%6 == 5 {
			spans = spans[:0] // nothing held: read from the log
		}
		ra.RaiseReadLimit(limit)
		if limit > rb.ReadLimit() && len(spans) > 0 {
			calls++
		}
		rb.RaiseReadLimitFrom(limit, spans)
		for _, b := range bufs {
			for i := range b {
				b[i] = 0xa5 // the buffer is reused
			}
		}
	}
	ra.RaiseReadLimit(pos)
	rb.RaiseReadLimitFrom(pos, nil)
	if got := rb.counters.inlineDispatches.Load() - inline; got < calls/2 {
		t.Fatalf("%d of %d raises with spans indexed on the caller's goroutine", got, calls)
	}
	if a, b := logBytes(t, m, pos), logBytes(t, rb, pos); !bytes.Equal(a, b) {
		t.Fatal("the replica's log differs from the master's")
	}
	if len(rb.clog.segments()) < 5 {
		t.Fatalf("only %d segments: the test did not roll", len(rb.clog.segments()))
	}
	for tp := 0; tp < 3; tp++ {
		for p := int32(0); p < 2; p++ {
			topic := fmt.Sprintf("t%d", tp)
			want := m.MaxOffset(topic, p)
			waitReadable(t, ra, topic, p, want)
			waitReadable(t, rb, topic, p, want)
			// The units themselves (reads would repair a wrong one).
			pa, pb := ra.partition(topic, p, false), rb.partition(topic, p, false)
			for q := int64(0); q < want; q++ {
				pha, sza, tga, erra := ra.readUnit(pa, q)
				phb, szb, tgb, errb := rb.readUnit(pb, q)
				if erra != nil || errb != nil || pha != phb || sza != szb || tga != tgb {
					t.Fatalf("%s/%d unit %d: (%d %d %x %v) from the log's index, (%d %d %x %v) from the spans'",
						topic, p, q, pha, sza, tga, erra, phb, szb, tgb, errb)
				}
			}
			for _, expr := range []string{"*", "a", "b", "a||b", "c d"} {
				f := protocol.ParseTagFilter(expr)
				a, b := readAll(t, ra, topic, p, 0, f), readAll(t, rb, topic, p, 0, f)
				if len(a) != len(b) || (expr == "*" && int64(len(b)) != want) {
					t.Fatalf("%s/%d filter %q: %d records from the log's index, %d from the spans' (%d appended)", topic, p, expr, len(a), len(b), want)
				}
				for i := range a {
					if a[i].MsgID != b[i].MsgID || a[i].QueueOffset != b[i].QueueOffset || !bytes.Equal(a[i].Data, b[i].Data) {
						t.Fatalf("%s/%d filter %q: record %d differs", topic, p, expr, i)
					}
				}
			}
		}
	}
	for _, i := range []int{3, 6, 555, 1194} { // multiples of 3, not of 7: those have keys
		topic, key := fmt.Sprintf("t%d", i%3), fmt.Sprintf("k%d", i)
		if a, b := queryIDs(t, ra, topic, key, 10), queryIDs(t, rb, topic, key, 10); len(b) == 0 || !slices.Equal(a, b) {
			t.Fatalf("key %s: %v from the log's index, %v from the spans'", key, a, b)
		}
	}
}
