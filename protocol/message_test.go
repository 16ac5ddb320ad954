package protocol

import (
	"bytes"
	"testing"
)

// MessageData's pieces agree with the assembled block: flag, length,
// checksum, bytes; AppendPutMessage is the header plus the block and parses
// back into the same put.
func TestMessageDataPieces(t *testing.T) {
	for _, d := range []MessageData{
		{Payload: []byte("p")},
		{Flag: 4 | FlagHasAttribute | FlagHasProperties, Payload: []byte("p")},
		{Props: []byte("tag=a&keys=k"), Payload: []byte("payload")},
		{Flag: 8, Props: []byte("tag=a"), Attr: "attr", HasAttr: true, Payload: []byte("payload")},
		{HasAttr: true},
		{Attr: "ignored without HasAttr", Payload: []byte("x")},
	} {
		data, flag := AppendMessageData(nil, d.Flag, d.Props, []byte(d.Attr), d.HasAttr, d.Payload)
		if got := d.AppendTo([]byte("pre")); string(got) != "pre"+string(data) {
			t.Fatalf("%+v: AppendTo %q, AppendMessageData %q", d, got, data)
		}
		if d.SendFlag() != flag || d.Len() != len(data) || d.Checksum() != MessageChecksum(data) {
			t.Fatalf("%+v: flag %d/%d len %d/%d checksum %d/%d", d, d.SendFlag(), flag, d.Len(), len(data), d.Checksum(), MessageChecksum(data))
		}
		for _, sum := range []int32{ChecksumNone, d.Checksum()} {
			put := AppendPutMessage(nil, "t", 3, &d, sum, 7)
			want := AppendPut(nil, "t", 3, flag, sum, "", 7, data)
			if !bytes.Equal(put, want) {
				t.Fatalf("%+v: AppendPutMessage %q, want %q", d, put, want)
			}
		}
	}
	d := MessageData{Props: []byte("tag=a"), Attr: "a", HasAttr: true, Payload: make([]byte, 100)}
	buf := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { _ = AppendPutMessage(buf[:0], "t", 0, &d, d.Checksum(), 1) }); a != 0 {
		t.Fatalf("AppendPutMessage+Checksum allocate %.1f", a)
	}
}

func TestNextProperty(t *testing.T) {
	type kv struct{ k, v string }
	for in, want := range map[string][]kv{
		"":                   nil,
		"tag=a":              {{"tag", "a"}},
		"tag=a&keys=k1%20k2": {{"tag", "a"}, {"keys", "k1%20k2"}},
		"flag&=v&k=&&x=1=2":  {{"flag", ""}, {"", "v"}, {"k", ""}, {"", ""}, {"x", "1=2"}},
		"a=1&":               {{"a", "1"}},
	} {
		var got []kv
		for p := []byte(in); len(p) > 0; {
			var k, v []byte
			k, v, p = NextProperty(p)
			got = append(got, kv{string(k), string(v)})
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %v, want %v", in, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: %v, want %v", in, got, want)
			}
		}
	}
	if v, ok := PropertyRaw([]byte("tag=a&flag&keys=k"), "flag"); !ok || v != nil {
		t.Fatalf("PropertyRaw of a key without '=': %q %v", v, ok)
	}
}
