package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// benchStore uses production-like segments (the test default of 1 MiB would
// make the benchmark measure segment rolling).
func benchStore(c *store.Config) { c.SegmentSize, c.IndexFileSize = 256<<20, 4<<20 }

// BenchmarkProducerSendAsync: 100-byte messages, one connection, a window of
// 1,000 requests in flight, against a real broker (async flush).
//
//	go test -run '^$' -bench ProducerSendAsync -benchtime 2000000x ./client
func BenchmarkProducerSendAsync(b *testing.B) {
	benchSendAsync(b, &Message{Topic: "bench", Body: make([]byte, 100)})
}

// BenchmarkProducerSendAsyncProps is BenchmarkProducerSendAsync with a tag
// and two keys: a properties line (built in a pooled buffer) on every put.
func BenchmarkProducerSendAsyncProps(b *testing.B) {
	benchSendAsync(b, &Message{Topic: "bench", Body: make([]byte, 100), Tag: "paid", Keys: []string{"order-4711", "customer-42"}})
}

func benchSendAsync(b *testing.B, msg *Message) {
	br := brokertest.RunBroker(b, brokertest.Options{Topics: map[string]int{"bench": 4}, Logger: testLogger(),
		StoreConf: benchStore})
	p, err := NewProducer(Config{Brokers: []string{br.Addr}, MaxInFlight: 1000, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	var fails atomic.Int64
	cb := func(_ SendResult, err error) {
		if err != nil {
			fails.Add(1)
		}
		wg.Done()
	}
	// Warm the connection up.
	if _, err := p.Send(ctx, msg); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	wg.Add(b.N)
	for i := 0; i < b.N; i++ {
		p.SendAsync(ctx, msg, cb)
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if fails.Load() > 0 {
		b.Fatalf("%d sends failed", fails.Load())
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
}

// BenchmarkConsumer drains a backlog of b.N 100-byte messages (4
// partitions, one consumer in ordered mode) through the whole consumer path:
// ZooKeeper registration and balancing, long-polling gets, record decoding,
// the handler, offset tracking. Needs ZooKeeper (METAQ_TEST_ZK).
//
//	METAQ_TEST_ZK=127.0.0.1:21810 go test -run '^$' -bench Consumer -benchtime 1000000x ./client
func BenchmarkConsumer(b *testing.B) {
	zk := zktest.Server(b)
	br := brokertest.RunBroker(b, brokertest.Options{ZK: zk, BrokerID: 1, Topics: map[string]int{"bench": 4}, Logger: testLogger(),
		StoreConf: benchStore})
	p, err := NewProducer(Config{Brokers: []string{br.Addr}, MaxInFlight: 1000, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(b.N)
	msg := &Message{Topic: "bench", Body: make([]byte, 100)}
	for i := 0; i < b.N; i++ {
		p.SendAsync(context.Background(), msg, func(_ SendResult, err error) {
			if err != nil {
				b.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	p.Close()

	c, err := NewConsumer(Config{ZKConnect: zk, Logger: testLogger(), Consumer: ConsumerOptions{MaxWait: time.Second}}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var n atomic.Int64
	var first, last atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	err = c.Subscribe("bench", "*", func(ctx context.Context, m *Message) error {
		k := n.Add(1)
		if k == 1 {
			first.Store(time.Now().UnixNano())
		}
		if k == target {
			last.Store(time.Now().UnixNano())
			close(done)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("consumed %d of %d", n.Load(), b.N)
	}
	b.StopTimer()
	if el := time.Duration(last.Load() - first.Load()); el > 0 && b.N > 1 {
		b.ReportMetric(float64(b.N-1)/el.Seconds(), "msgs/s")
	}
}

// BenchmarkEncodePut is the client's side of a put without the network: the
// send state, the properties line, the data block, checksum and encoding
// into a write buffer.
func BenchmarkEncodePut(b *testing.B) {
	p := &Producer{opts: &ProducerOptions{Selector: RoundRobin()}}
	msg := &Message{Topic: "bench", Body: make([]byte, 100), Tag: "paid", Keys: []string{"order-4711", "customer-42"}}
	buf := make([]byte, 0, 64<<10)
	b.SetBytes(100)
	b.ReportAllocs()
	for b.Loop() {
		s, err := p.newSend(context.Background(), msg)
		if err != nil {
			b.Fatal(err)
		}
		buf = protocol.AppendPutMessage(buf[:0], msg.Topic, 1, &s.data, s.data.Checksum(), 1)
		s.release()
	}
}

// BenchmarkDecodeBlock is the client's per-message decoding of a fetched
// value block (100 records of 100 bytes with a tag and a user property),
// without and with a `where` expression that keeps 10% of them (evaluated
// on the encoded record: a filtered message is never decoded).
//
//	go test -run '^$' -bench DecodeBlock -benchtime 2000x ./client
func BenchmarkDecodeBlock(b *testing.B) {
	var block []byte
	for i := 0; i < 100; i++ {
		r := &protocol.Record{Topic: []byte("bench"), QueueOffset: int64(i), Data: make([]byte, 100),
			Properties: []byte("tag=t&bench=" + string(rune('0'+i%10)))}
		buf := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
		protocol.EncodeRecord(buf, r)
		block = append(block, buf...)
	}
	for _, where := range []string{"", "bench = 0"} {
		name := "all"
		if where != "" {
			name = "where10pct"
		}
		b.Run(name, func(b *testing.B) {
			d := decoder{topic: "bench", brokerID: 0}
			wm, err := d.whereMatcher(where)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.decodeBlockWhere(block, wm); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/record")
		})
	}
}
