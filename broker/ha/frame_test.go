package ha

import (
	"bytes"
	"testing"
)

// FuzzFrameReader: whatever bytes arrive, the slave's frame reader returns
// frames within bounds or an error, never panics, and never asks for more
// than maxFramePayload.
func FuzzFrameReader(f *testing.F) {
	var h [frameHeaderSize]byte
	putFrameHeader(h[:], frameHeader{kind: frameData, n: 4, pos: 10, end: 20, time: 1})
	f.Add(append(h[:], 1, 2, 3, 4))
	putFrameHeader(h[:], frameHeader{kind: frameHeartbeat, pos: 20, end: 20, time: 1})
	f.Add(h[:])
	f.Add([]byte("result 200 1 1\r\nx"))
	var a [ackSize]byte
	putAck(a[:], 77)
	f.Add(a[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := frameReader{buf: b}
		for i := 0; i < 1000; i++ {
			h, p, ok, err := fr.next()
			if err != nil || !ok {
				break
			}
			if len(p) != h.n || h.n > maxFramePayload || h.pos < 0 {
				t.Fatalf("bad frame %+v", h)
			}
			if h.kind == frameData && !bytes.Equal(p, p) {
				t.Fatal()
			}
		}
		if need := partialNeed(b); need > frameHeaderSize+maxFramePayload {
			t.Fatalf("partialNeed %d", need)
		}
		_, _ = decodeAck(b)
	})
}

func TestFrameRoundTrip(t *testing.T) {
	var b [frameHeaderSize]byte
	in := frameHeader{kind: frameData, n: 100, pos: 1 << 40, end: 1<<40 + 100, time: 12345}
	putFrameHeader(b[:], in)
	out, err := decodeFrameHeader(b[:])
	if err != nil || out != in {
		t.Fatalf("%+v %v", out, err)
	}
	var a [ackSize]byte
	putAck(a[:], 99)
	if p, err := decodeAck(a[:]); err != nil || p != 99 {
		t.Fatal(p, err)
	}
	a[3] = 1
	if _, err := decodeAck(a[:]); err == nil {
		t.Fatal("reserved byte accepted")
	}
}
