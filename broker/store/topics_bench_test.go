package store

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkAppendAsyncTopics1000 is BenchmarkAppendAsync round-robin over
// 1,000 topics of one partition each: the store's share of the topics-1000
// row (docs/scaling.md). Compare its ns/op with BenchmarkAppendAsync's, run
// alternately:
//
//	go test -run '^$' -bench 'AppendAsync$|AppendAsyncTopics1000$' -benchtime 2000000x ./broker/store
func BenchmarkAppendAsyncTopics1000(b *testing.B) { benchAppendTopics(b, 1000) }

func benchAppendTopics(b *testing.B, topics int) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = benchThreshold()
	cfg.UnflushInterval = time.Second
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	names := make([]string, topics)
	for i := range names {
		names[i] = "bench-" + strconv.Itoa(i)
	}
	m := &Message{Data: make([]byte, 100)}
	for _, n := range names { // steady state: every topic and its index file exists
		m.Topic = n
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	waitDispatched(s)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		m.Topic = names[i%topics]
		if _, _, err := s.AppendAsync(m); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			if err := s.WriteOut(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.WriteOut(); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	waitDispatched(s)
	e2e := time.Since(t0)
	b.StopTimer()
	reportRate(b, b.N, "msgs/s", d)
	reportRate(b, b.N, "e2e-msgs/s", e2e)
}
