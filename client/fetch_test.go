package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// FetchInto reads what FetchWith reads: the same records, decoded the same
// way (RecordView.Decode and every accessor against the Message), the same
// NextOffset, a growing buffer reused get after get, and a 301 / 404 handled
// like FetchWith's.
func TestFetchInto(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"f": 1}, Logger: testLogger()})
	p, err := NewProducer(Config{Brokers: []string{b.Addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := ctxT(t, 30*time.Second)
	const n = 600
	for i := range n {
		m := &Message{Topic: "f", Body: bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%300)}
		switch i % 4 {
		case 1:
			m.Tag = fmt.Sprintf("t%d", i%3)
		case 2:
			m.Keys, m.Properties = []string{fmt.Sprint("k", i)}, map[string]string{"p": "v w"}
		case 3:
			m.Attribute = "attr"
		}
		if _, err := p.SendToPartition(ctx, m, Partition{BrokerID: 0, Partition: 0}); err != nil {
			t.Fatal(err)
		}
	}
	var fb FetchBuffer
	var got []Message
	caps := map[int]bool{}
	for off := int64(0); off < n; {
		req := FetchRequest{Topic: "f", Offset: off, MaxBytes: 8 << 10}
		want, err := a.FetchWith(ctx, b.Addr, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.FetchInto(ctx, b.Addr, req, &fb); err != nil {
			t.Fatal(err)
		}
		caps[cap(fb.Bytes())] = true
		i := 0
		for fb.Next() {
			r := fb.Record()
			var m Message
			r.Decode(&m)
			w := want.Messages[i]
			if !reflect.DeepEqual(m, w) {
				t.Fatalf("offset %d: FetchInto decodes\n%+v\nFetchWith\n%+v", w.Offset, m, w)
			}
			if r.Offset() != w.Offset || r.MsgID() != w.MsgID || r.Partition() != w.Partition.Partition ||
				!bytes.Equal(r.Body(), w.Body) || string(r.Attribute()) != w.Attribute || r.Tag() != w.Tag ||
				!r.StoreTime().Equal(w.StoreTime) || !r.BornTime().Equal(w.BornTime) || r.Flag() != w.Flag ||
				r.SysFlag() != w.SysFlag || r.ReconsumeTimes() != w.ReconsumeTimes || string(r.Topic()) != "f" {
				t.Fatalf("offset %d: accessors disagree with %+v", w.Offset, w)
			}
			got = append(got, m)
			i++
		}
		if fb.Err() != nil || i != len(want.Messages) || i == 0 {
			t.Fatalf("offset %d: %d records (FetchWith %d): %v", off, i, len(want.Messages), fb.Err())
		}
		if fb.NextOffset() != want.NextOffset {
			t.Fatalf("NextOffset %d, FetchWith %d", fb.NextOffset(), want.NextOffset)
		}
		off = fb.NextOffset()
	}
	if len(got) != n {
		t.Fatalf("%d records read, want %d", len(got), n)
	}
	if len(caps) > 2 {
		t.Errorf("the buffer was replaced %d times (capacities %v), want it reused", len(caps), caps)
	}

	// NextOffset without iterating: after the block's last record.
	if err := a.FetchInto(ctx, b.Addr, FetchRequest{Topic: "f", Offset: 10, MaxBytes: 4 << 10}, &fb); err != nil {
		t.Fatal(err)
	}
	want, _ := a.FetchWith(ctx, b.Addr, FetchRequest{Topic: "f", Offset: 10, MaxBytes: 4 << 10})
	if fb.NextOffset() != want.NextOffset {
		t.Fatalf("NextOffset before Next %d, want %d", fb.NextOffset(), want.NextOffset)
	}
	// The end (404): nothing, NextOffset stays; past the end (301): Moved.
	if err := a.FetchInto(ctx, b.Addr, FetchRequest{Topic: "f", Offset: n}, &fb); err != nil || fb.Next() || fb.Moved() || fb.NextOffset() != n {
		t.Fatalf("at the end: %v next %d moved %v", err, fb.NextOffset(), fb.Moved())
	}
	if err := a.FetchInto(ctx, b.Addr, FetchRequest{Topic: "f", Offset: n + 100}, &fb); err != nil || fb.Next() || !fb.Moved() || fb.NextOffset() != n {
		t.Fatalf("past the end: %v next %d moved %v", err, fb.NextOffset(), fb.Moved())
	}
	// A client-side where (re-checked on every record).
	if err := a.FetchInto(ctx, b.Addr, FetchRequest{Topic: "f", Offset: 0, Where: "p = 'v w'"}, &fb); err != nil {
		t.Fatal(err)
	}
	k := 0
	for fb.Next() {
		if fb.Record().Offset()%4 != 2 {
			t.Fatalf("where kept offset %d", fb.Record().Offset())
		}
		k++
	}
	if k == 0 || fb.Err() != nil {
		t.Fatalf("where kept %d: %v", k, fb.Err())
	}

	// Steady state: a get into a grown buffer allocates nothing in the
	// client. (The count is the process's: the in-process broker's reply
	// write, net.Buffers.WriteTo, allocates its one.)
	req := FetchRequest{Topic: "f", Offset: 0, MaxBytes: 64 << 10}
	allocs := testing.AllocsPerRun(50, func() {
		if err := a.FetchInto(ctx, b.Addr, req, &fb); err != nil {
			t.Fatal(err)
		}
		for fb.Next() {
			_ = fb.Record().Body()
			_ = fb.Record().Tag()
		}
	})
	if allocs > 1 && !raceOn {
		t.Errorf("FetchInto + iteration: %.1f allocations per get (broker included), want at most the broker's 1", allocs)
	}
}

// A damaged record ends the iteration with an error after the good ones,
// NextOffset is after the last good one; NoVerify skips only the checksum.
func TestFetchBufferDamaged(t *testing.T) {
	var block []byte
	for i := range 3 {
		r := &protocol.Record{Topic: []byte("t"), QueueOffset: int64(7 + i), Data: []byte("body")}
		buf := make([]byte, protocol.RecordSize(1, 0, 4))
		protocol.EncodeRecord(buf, r)
		block = append(block, buf...)
	}
	size := len(block) / 3
	block[2*size-1] ^= 1 // the second record's last data byte
	fb := FetchBuffer{from: 7, next: -1, rest: block, block: block}
	n := 0
	for fb.Next() {
		n++
	}
	if n != 1 || !errors.Is(fb.Err(), protocol.ErrBadCRC) || fb.NextOffset() != 8 {
		t.Fatalf("%d records, err %v, next %d", n, fb.Err(), fb.NextOffset())
	}
	fb = FetchBuffer{NoVerify: true, from: 7, next: -1, rest: block, block: block}
	n = 0
	for fb.Next() {
		n++
	}
	if n != 3 || fb.Err() != nil || fb.NextOffset() != 10 {
		t.Fatalf("NoVerify: %d records, err %v, next %d", n, fb.Err(), fb.NextOffset())
	}
	binary.BigEndian.PutUint32(block[size:], 1<<20) // a size past the block
	fb = FetchBuffer{NoVerify: true, from: 7, next: -1, rest: block, block: block}
	for fb.Next() {
	}
	if fb.Err() == nil || fb.NextOffset() != 8 {
		t.Fatalf("bad size: err %v, next %d", fb.Err(), fb.NextOffset())
	}
}

// FuzzFetchBuffer: on any block, FetchBuffer keeps exactly the records the
// decoder (FetchWith's path) keeps, with the same error and NextOffset, and
// never panics.
func FuzzFetchBuffer(f *testing.F) {
	var block []byte
	for i, props := range []string{"", "tag=a", "keys=x&p=1"} {
		r := &protocol.Record{Topic: []byte("t"), QueueOffset: int64(i), Properties: []byte(props), Data: []byte("data"), Flag: int32(i & 1)}
		if i == 1 {
			r.Data = []byte{0, 0, 0, 1, 'a', 'b'}
		}
		buf := make([]byte, protocol.RecordSize(1, len(props), len(r.Data)))
		protocol.EncodeRecord(buf, r)
		block = append(block, buf...)
	}
	f.Add(block)
	blank := make([]byte, 16)
	protocol.EncodeBlank(blank, 16)
	f.Add(append(append([]byte{}, block[:len(block)/2]...), blank...))
	f.Add([]byte{0, 0, 0, 8, 'M', 'E', 'T', '1'})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := decoder{topic: "t", brokerID: -1}
		msgs, next, derr := d.decodeBlockWhere(b, nil)
		fb := FetchBuffer{from: 5, next: -1, rest: b, block: b}
		i := 0
		for fb.Next() {
			var m Message
			fb.Record().Decode(&m)
			if i >= len(msgs) || !reflect.DeepEqual(m, msgs[i]) || fb.Record().Offset() != msgs[i].Offset ||
				!bytes.Equal(fb.Record().Body(), msgs[i].Body) || fb.Record().Tag() != msgs[i].Tag {
				t.Fatalf("record %d differs from the decoder's", i)
			}
			i++
		}
		if i != len(msgs) || (derr == nil) != (fb.err == nil) {
			t.Fatalf("%d records (decoder %d), err %v (decoder %v)", i, len(msgs), fb.err, derr)
		}
		if next < 0 {
			next = 5
		}
		if fb.NextOffset() != next {
			t.Fatalf("NextOffset %d, decoder %d", fb.NextOffset(), next)
		}
	})
}

// BenchmarkFetchInto against BenchmarkFetchWith: one 1 MiB get of 100-byte
// messages per op from a real broker (in memory after the first), decoded
// (FetchWith) or iterated with checksums (FetchInto). CPU per record is the
// figure (ns/op ÷ records, both processes; -cpuprofile for the client).
func BenchmarkFetchInto(b *testing.B) { benchFetch(b, true) }

// BenchmarkFetchWith is BenchmarkFetchInto through FetchWith.
func BenchmarkFetchWith(b *testing.B) { benchFetch(b, false) }

func benchFetch(b *testing.B, into bool) {
	br := brokertest.RunBroker(b, brokertest.Options{Topics: map[string]int{"f": 1}, Logger: testLogger()})
	p, err := NewProducer(Config{Brokers: []string{br.Addr}, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	msgs := make([]*Message, 100)
	for i := range msgs {
		msgs[i] = &Message{Topic: "f", Body: bytes.Repeat([]byte("x"), 100)}
	}
	const n = 20_000
	for i := 0; i < n; i += len(msgs) {
		if _, err := p.SendBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	var fb FetchBuffer
	records := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := FetchRequest{Topic: "f", MaxBytes: 1 << 20}
		if into {
			if err := a.FetchInto(ctx, br.Addr, req, &fb); err != nil {
				b.Fatal(err)
			}
			for fb.Next() {
				_ = fb.Record().Body()
				records++
			}
			continue
		}
		res, err := a.FetchWith(ctx, br.Addr, req)
		if err != nil {
			b.Fatal(err)
		}
		records += len(res.Messages)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(records, 1)), "ns/record")
}

// BenchmarkFetchBufferNext iterates a 1 MiB block of 100-byte records in
// memory, every CRC checked, the body touched: the consumer's per-record
// cost without the socket (ns/op per record).
func BenchmarkFetchBufferNext(b *testing.B) {
	data := make([]byte, 100)
	size := protocol.RecordSize(len("bench"), 0, len(data))
	n := (1 << 20) / size
	block := make([]byte, n*size)
	for i := range n {
		protocol.EncodeRecord(block[i*size:(i+1)*size], &protocol.Record{Topic: []byte("bench"), QueueOffset: int64(i), Data: data})
	}
	var fb FetchBuffer
	var sink byte
	var ru0, ru1 syscall.Rusage
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Getrusage(syscall.RUSAGE_THREAD, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		fb.Reset()
		fb.block, fb.rest = block, block
		for fb.Next() {
			sink ^= fb.Record().Body()[0]
		}
		if fb.Err() != nil {
			b.Fatal(fb.Err())
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_THREAD, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/record") // this thread's CPU: steady under load, unlike ns/op
	_ = sink
}
