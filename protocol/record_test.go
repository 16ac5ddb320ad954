package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func sampleRecord() *Record {
	return &Record{
		MsgID: MakeMsgID(3, 4096), Flag: 1, Partition: 7, QueueOffset: 42,
		PhysicalOffset: 4096, StoreTime: 1700000000123, BornTime: 1700000000000,
		SysFlag: SysFlagRetry, ReconsumeTimes: 2,
		Topic: []byte("orders"), Properties: []byte("tag=paid&keys=o-1"), Data: []byte("hello world"),
	}
}

func encode(r *Record) []byte {
	b := make([]byte, RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	EncodeRecord(b, r)
	return b
}

func TestRecordRoundTrip(t *testing.T) {
	in := sampleRecord()
	b := encode(in)
	out, n, err := DecodeRecord(b, 0)
	if err != nil || n != len(b) {
		t.Fatalf("decode: n=%d err=%v", n, err)
	}
	if out.MsgID != in.MsgID || out.Flag != in.Flag || out.Partition != in.Partition ||
		out.QueueOffset != in.QueueOffset || out.PhysicalOffset != in.PhysicalOffset ||
		out.StoreTime != in.StoreTime || out.BornTime != in.BornTime || out.SysFlag != in.SysFlag ||
		out.ReconsumeTimes != in.ReconsumeTimes || !bytes.Equal(out.Topic, in.Topic) ||
		!bytes.Equal(out.Properties, in.Properties) || !bytes.Equal(out.Data, in.Data) ||
		int(out.Size) != len(b) {
		t.Fatalf("mismatch:\n in=%+v\nout=%+v", in, out)
	}
	if bid, pos := SplitMsgID(out.MsgID); bid != 3 || pos != 4096 {
		t.Fatalf("SplitMsgID = %d %d", bid, pos)
	}
}

func TestRecordEmptyParts(t *testing.T) {
	r := &Record{Topic: []byte("t")}
	b := encode(r)
	if len(b) != RecordOverhead+1 {
		t.Fatalf("size %d", len(b))
	}
	if _, _, err := DecodeRecord(b, 0); err != nil {
		t.Fatal(err)
	}
}

func TestRecordCorruption(t *testing.T) {
	b := encode(sampleRecord())
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		_, _, err := DecodeRecord(c, 0)
		if err == nil {
			t.Fatalf("flip at byte %d not detected", i)
		}
	}
	for n := 0; n < len(b); n++ {
		if _, _, err := DecodeRecord(b[:n], 0); err == nil {
			t.Fatalf("truncation to %d not detected", n)
		}
	}
	if _, _, err := DecodeRecord(b, len(b)-1); !errors.Is(err, ErrBadSize) {
		t.Fatalf("maxSize bound: %v", err)
	}
}

func TestBlank(t *testing.T) {
	b := make([]byte, 100)
	EncodeBlank(b, 100)
	_, n, err := DecodeRecord(b, 0)
	if err != ErrBlank || n != 100 {
		t.Fatalf("blank: n=%d err=%v", n, err)
	}
}

func TestRecordIterator(t *testing.T) {
	var block []byte
	for i := 0; i < 5; i++ {
		r := sampleRecord()
		r.QueueOffset = int64(i)
		block = append(block, encode(r)...)
	}
	it := NewRecordIterator(block)
	i := 0
	for it.Next() {
		if it.Record().QueueOffset != int64(i) {
			t.Fatalf("record %d has offset %d", i, it.Record().QueueOffset)
		}
		i++
	}
	if it.Err() != nil || i != 5 {
		t.Fatalf("iterated %d, err %v", i, it.Err())
	}
	it = NewRecordIterator(block[:len(block)-3])
	for it.Next() {
	}
	if it.Err() == nil {
		t.Fatal("torn block not reported")
	}
}

func TestEncodeNoAlloc(t *testing.T) {
	r := sampleRecord()
	b := make([]byte, RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	if n := testing.AllocsPerRun(100, func() { EncodeRecord(b, r) }); n != 0 {
		t.Fatalf("EncodeRecord allocates %v", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = DecodeRecord(b, 0) }); n != 0 {
		t.Fatalf("DecodeRecord allocates %v", n)
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder: it must never panic,
// never return a size beyond the input, and anything it accepts must
// re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encode(sampleRecord()))
	f.Add(encode(&Record{Topic: []byte("t")}))
	blank := make([]byte, 16)
	EncodeBlank(blank, 16)
	f.Add(blank)
	f.Add([]byte{0, 0, 0, 8, 'M', 'E', 'T', '1'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b, 1<<20)
		if err != nil {
			return
		}
		if n > len(b) || n != int(r.Size) {
			t.Fatalf("n=%d len=%d size=%d", n, len(b), r.Size)
		}
		again := encode(&r)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encode differs")
		}
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := sampleRecord()
	r.Data = bytes.Repeat([]byte("x"), 100)
	buf := make([]byte, RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		EncodeRecord(buf, r)
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	r := sampleRecord()
	r.Data = bytes.Repeat([]byte("x"), 100)
	buf := encode(r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := DecodeRecord(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}
