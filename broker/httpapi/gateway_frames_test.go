package httpapi

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeClientFrame: any bytes decode to a valid frame or a
// *frameError, never a panic, and a valid frame keeps its limits. The
// seed corpus is under testdata/fuzz/FuzzDecodeClientFrame.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"ack","handle":"orders:0:17:1"}`,
		`{"op":"ack","handles":["a","b"],"id":7}`,
		`{"op":"release","handle":"h","delayMs":1000,"id":"r1"}`,
		`{"op":"reject","handle":"h"}`,
		`{"op":"extend","handle":"h","invisibleMs":60000}`,
		`{"op":"ack"}`,
		`{"op":"extend","handle":"h","invisibleMs":-1}`,
		`{"op":"ack","handle":"h","id":{"x":1}}`,
		`{"op":"ack","handle":"h"}{}`,
		`[1,2,3]`,
		`{"op":"ack","handles":[]}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeClientFrame(data)
		if err != nil {
			if _, ok := err.(*frameError); !ok {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		if fr.op < opAck || fr.op > opExtend {
			t.Fatalf("op %d", fr.op)
		}
		if len(fr.handles) == 0 || len(fr.handles) > maxFrameHandles {
			t.Fatalf("%d handles", len(fr.handles))
		}
		for _, h := range fr.handles {
			if h == "" || len(h) > maxHandleLen {
				t.Fatalf("handle %q", h)
			}
		}
		if fr.delay < 0 || fr.delay > maxReleaseDelay || (fr.op != opRelease && fr.delay != 0) {
			t.Fatalf("delay %v for %v", fr.delay, fr.op)
		}
		if (fr.op == opExtend) != (fr.inv != 0) {
			t.Fatalf("invisible %v for %v", fr.inv, fr.op)
		}
		if fr.id != nil && (len(fr.id) > maxFrameID || !json.Valid(fr.id)) {
			t.Fatalf("id %q", fr.id)
		}
	})
}

// A frame is one JSON value: anything after it but white space is refused.
func TestDecodeClientFrameTrailingBytes(t *testing.T) {
	for _, s := range []string{
		`{"op":"ack","handle":"h"}}`,
		`{"op":"ack","handle":"h"}]`,
		`{"op":"ack","handle":"h"}{}`,
		`{"op":"ack","handle":"h"} x`,
		`{"op":"ack","handle":"h"}"`,
	} {
		if _, err := decodeClientFrame([]byte(s)); err == nil {
			t.Errorf("%s: decoded, want an error", s)
		}
	}
	if _, err := decodeClientFrame([]byte(" {\"op\":\"ack\",\"handle\":\"h\"} \n")); err != nil {
		t.Errorf("white space around the frame: %v", err)
	}
}
