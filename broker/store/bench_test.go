package store

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks (100-byte bodies). Run:
//
//	go test -bench . -run XXX ./broker/store
//
// msgs/s is the append (or read) rate; e2e-msgs/s for appends also waits
// until the dispatcher has indexed everything.

func benchConfig(b *testing.B) Config {
	cfg := testConfig(b, "")
	cfg.SegmentSize = 256 << 20
	cfg.IndexFileSize = 4 << 20
	cfg.CheckpointInterval = time.Second
	cfg.KeyIndexSlots = 1 << 16
	cfg.KeyIndexEntries = 1 << 20
	return cfg
}

func reportRate(b *testing.B, n int, name string, d time.Duration) {
	b.ReportMetric(float64(n)/d.Seconds(), name)
}

func waitDispatched(s *Store) {
	_ = s.WriteOut()
	for s.dispatched.Load() < s.clog.visibleLimit() || s.dispatched.Load() < s.clog.written.Load() && !s.sync {
		time.Sleep(50 * time.Microsecond)
	}
}

// benchAppendAsync appends round-robin over topics × partitions (topic
// "bench" alone when topics is 1, else "bench-0" … "bench-<topics-1>").
func benchAppendAsync(b *testing.B, topics, partitions int) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = benchThreshold()
	cfg.UnflushInterval = time.Second
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	names := []string{"bench"}
	if topics > 1 {
		names = make([]string, topics)
		for i := range names {
			names[i] = "bench-" + strconv.Itoa(i)
		}
	}
	data := make([]byte, 100)
	m := &Message{Data: data}
	set := func(i int) {
		m.Topic, m.Partition = names[i%topics], int32(i/topics%partitions)
	}
	// Steady state: every partition (and its first index file) exists.
	for i := 0; i < topics*partitions; i++ {
		set(i)
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	waitDispatched(s)
	if err := s.Flush(); err != nil { // writes buffered index units: creates the files
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		set(i)
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			// As the broker does once per batch of puts read from a
			// connection, before acknowledging them.
			if err := s.WriteOut(); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportAppends(b, s, t0)
}

// reportAppends ends an append benchmark that started at t0: the append
// rate once everything is written out, and the rate including the
// dispatcher's indexing.
func reportAppends(b *testing.B, s *Store, t0 time.Time) {
	if err := s.WriteOut(); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	waitDispatched(s)
	e2e := time.Since(t0)
	b.StopTimer()
	reportRate(b, b.N, "msgs/s", d)
	reportRate(b, b.N, "e2e-msgs/s", e2e)
	if st := s.Stats(); st.IndexWrites > 0 {
		b.ReportMetric(float64(st.DispatchedRecords)/float64(st.IndexWrites), "units/pwrite")
	}
}

func BenchmarkAppendAsync(b *testing.B) { benchAppendAsync(b, 1, 1) }

func BenchmarkAppendAsyncRoundRobin10k(b *testing.B) { benchAppendAsync(b, 1, 10000) }

// BenchmarkAppendAsyncTopics1000 is round-robin over 1,000 topics of one
// partition each: the store's share of the topics-1000 row (docs/storage.md,
// "Buffered index tails"). Compare with BenchmarkAppendAsync, run
// alternately:
//
//	go test -run '^$' -bench 'AppendAsync$|AppendAsyncTopics1000$' -benchtime 2000000x ./broker/store
func BenchmarkAppendAsyncTopics1000(b *testing.B) { benchAppendAsync(b, 1000, 1) }

// BenchmarkAppendBatch is AppendAsync's benchmark for AppendBatch: runs of
// 100 messages to one partition (an mput frame), written out after each
// run as the broker does; b.N counts messages.
func BenchmarkAppendBatch(b *testing.B) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = benchThreshold()
	cfg.UnflushInterval = time.Second
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	const run = 100
	data := make([]byte, 100)
	msgs := make([]Message, run)
	for i := range msgs {
		msgs[i] = Message{Topic: "bench", Data: data}
	}
	res := make([]AppendResult, run)
	if _, err := s.AppendBatch(msgs[:1], res); err != nil {
		b.Fatal(err)
	}
	waitDispatched(s)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i += run {
		k := min(run, b.N-i)
		if _, err := s.AppendBatch(msgs[:k], res); err != nil {
			b.Fatal(err)
		}
		if err := s.WriteOut(); err != nil {
			b.Fatal(err)
		}
	}
	reportAppends(b, s, t0)
}

func benchAppendSync(b *testing.B, writers int) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = 0
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	b.SetBytes(100)
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := &Message{Topic: "bench", Partition: int32(w % 8), Data: make([]byte, 100)}
			for next.Add(1) <= int64(b.N) {
				if _, err := s.Append(m); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	d := time.Since(t0)
	b.StopTimer()
	reportRate(b, b.N, "msgs/s", d)
	st := s.Stats()
	if st.GroupCommits > 0 {
		b.ReportMetric(float64(st.PutMessages)/float64(st.GroupCommits), "msgs/fsync")
		b.ReportMetric(float64(st.AvgFsync.Microseconds()), "µs/fsync")
	}
}

func BenchmarkAppendSync64(b *testing.B)  { benchAppendSync(b, 64) }
func BenchmarkAppendSync512(b *testing.B) { benchAppendSync(b, 512) }

func BenchmarkReadSequential(b *testing.B) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = 100000
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	const n = 200000
	m := &Message{Topic: "bench", Data: make([]byte, 100)}
	for i := 0; i < n; i++ {
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	waitDispatched(s)
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	off := int64(0)
	for got := 0; got < b.N; {
		r, err := s.Read("bench", 0, off, 256<<10, nil)
		if err != nil {
			b.Fatal(err)
		}
		if r.Status != ReadFound {
			b.Fatal(fmt.Sprint("status ", r.Status))
		}
		got += r.Count
		off = r.NextOffset
		if off >= n {
			off = 0
		}
		r.Release()
	}
	reportRate(b, b.N, "msgs/s", time.Since(t0))
}

// benchThreshold is the async benchmarks' UnflushThreshold (fsync every N
// messages; MetaQ's default is 1000).
func benchThreshold() int { return 10000 }
