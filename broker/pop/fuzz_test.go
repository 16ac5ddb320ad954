package pop

import (
	"bytes"
	"testing"
)

// FuzzParseHandle: never panics; a handle that parses formats back to the
// same bytes.
func FuzzParseHandle(f *testing.F) {
	for _, s := range []string{"test:0:1:1", "%RETRY%g:3:99999999:65535", "a:b:c:d", "::::", "t:0:1:0", "t:-1:2:1", "t:0:99999999999999999999:1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHandle(b)
		if err != nil {
			return
		}
		out := AppendHandle(nil, string(h.Topic), h.Partition, h.Offset, h.Attempt)
		if !bytes.Equal(out, b) && !bytes.HasPrefix(b, h.Topic) {
			t.Fatalf("%q parsed as %+v", b, h)
		}
	})
}

// FuzzRecords: the %POP% record decoders never panic and never allocate
// more than their input describes.
func FuzzRecords(f *testing.F) {
	f.Add(appendDone(nil, "g", []doneRef{{"t", 0, 1}, {"u", 2, 3}}))
	w := ckWriter{max: 4096}
	w.beginState("g", "t", 1, 5)
	w.addRun(3, 1, 8)
	w.addRun(2, runDone, 10)
	w.endState()
	for _, c := range w.finish(7, 9) {
		f.Add(c)
	}
	f.Add([]byte{1, 'C', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = decodeDone(b, func(string, string, int32, int64) {})
		_, _ = decodeCk(b, func(ckState) {})
	})
}

// Round trip of the record encoders.
func TestRecordRoundTrip(t *testing.T) {
	var got []doneRef
	if err := decodeDone(appendDone(nil, "g", []doneRef{{"t", 0, 1}, {"u", 2, 3}, {"t", 1, 4}}), func(g, tp string, p int32, o int64) {
		if g != "g" {
			t.Fatal(g)
		}
		got = append(got, doneRef{tp, p, o})
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2] != (doneRef{"t", 1, 4}) {
		t.Fatalf("%+v", got)
	}
	// a checkpoint split over several chunks
	w := ckWriter{max: 5000}
	w.beginState("g", "t", 0, 100)
	o := int64(100)
	for i := 0; i < 3000; i++ {
		w.addRun(1, uint16(i%2), o+1)
		o++
	}
	w.endState()
	chunks := w.finish(42, 7)
	if len(chunks) < 2 {
		t.Fatalf("%d chunks", len(chunks))
	}
	var total uint32
	next := int64(100)
	for i, c := range chunks {
		if len(c) > 5000 {
			t.Fatalf("chunk %d: %d bytes", i, len(c))
		}
		h, err := decodeCk(c, func(s ckState) {
			if s.from != next {
				t.Fatalf("fragment from %d, want %d", s.from, next)
			}
			for _, r := range s.runs {
				total += r.n
				next += int64(r.n)
			}
		})
		if err != nil || h.id != 42 || int(h.chunk) != i || int(h.chunks) != len(chunks) || h.cover != 7 {
			t.Fatalf("chunk %d: %+v %v", i, h, err)
		}
	}
	if total != 3000 {
		t.Fatalf("%d entries", total)
	}
}
