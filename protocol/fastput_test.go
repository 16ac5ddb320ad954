package protocol

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"
)

// renderFull renders every field of a command (the line, the checksum, the
// raw args and the error included), for comparing the two put paths.
func renderFull(c *Command) string {
	cc := *c
	e := ""
	if cc.Err != nil {
		e = fmt.Sprintf("%+v", *cc.Err)
	}
	cc.Err = nil
	return fmt.Sprintf("%+v err=%s line=%q topic=%q data=%q", cc, e, c.Line, c.Topic, c.Data)
}

// feedFull parses stream in one piece (fast path allowed or not) and renders
// what was delivered, plus the error.
func feedFull(stream []byte, slow bool, max int) ([]string, string) {
	p := &Parser{MaxMessageSize: max, slowOnly: slow}
	var out []string
	err := p.Parse(bytes.Clone(stream), func(c *Command) error {
		out = append(out, renderFull(c))
		return nil
	})
	return out, renderErr(err)
}

func fastPutSeeds() []string {
	payload := "hello, world"
	ck := MessageChecksum([]byte(payload))
	return []string{
		"put test 0 12 0 7\r\n" + payload,
		fmt.Sprintf("put test -1 12 3 %d 8\r\n%s", ck, payload),
		fmt.Sprintf("PUT test 2 12 -5 %d -2147483648\n%s", ck+1, payload), // checksum mismatch
		"put test 0 12 0 -1 9\r\n" + payload,
		"put test 0 12 0 -2 9\r\n" + payload, // bad checksum value
		"put test 0 12 0 TX:s:1 9\r\n" + payload,
		"put test 0 12 0 5 TX:s:1 9\r\n" + payload,
		"put  test 0 12 0 7\r\n" + payload,
		"put test 0 12 0 7 \r\n" + payload,
		"put test 0 12 0 7\r\r\n" + payload,
		"put test 0 12 0 7\r\n" + payload[:5], // data continues later
		"put . 0 1 0 7\r\nx",
		"put .. 0 1 0 7\r\nx",
		"put a/b 0 1 0 7\r\nx",
		"put test -2 1 0 7\r\nx",
		"put test 2147483648 1 0 7\r\nx",
		"put test 0 99999999999 0 7\r\nx",
		"put test 0 1 2147483648 7\r\nx",
		"put test 0 1 0 2147483648\r\nx",
		"put test 0 1 0 0000000000007\r\nx",
		"put test 00 01 00 07\r\nx",
		"put test - 1 0 7\r\nx",
		"put test 0 1 0 -\r\nx",
		"put test 0 5 0 1\r\nhelloput test 0 5 0 2\nworldget test g 0 0 10 3\r\n",
		"put " + strings.Repeat("t", 255) + " 0 1 0 7\r\nx",
		"put " + strings.Repeat("t", 256) + " 0 1 0 7\r\nx",
		"put test 0 0 0 7\r\n",
		"put test 0 1 0 7",
		"putx test 0 1 0 7\r\nx",
		// A fast put after a command that filled other fields (Parser.putOnly),
		// and after a put with a checksum.
		"get test g 3 17 10 3 500\r\nput test 0 5 0 1\r\nhello",
		"put test 0 5 0 TX:s:1 9\r\nhelloput test 0 5 0 2\r\nworld",
		fmt.Sprintf("put test 0 12 0 %d 8\r\n%sput test 1 5 2 9\r\nworld", ck, payload),
	}
}

// TestFastPutMatchesGeneralPath: for each seed the fast path delivers
// exactly what the general path does (or leaves the put to it).
func TestFastPutMatchesGeneralPath(t *testing.T) {
	for _, s := range fastPutSeeds() {
		for _, max := range []int{0, 5} {
			want, wantErr := feedFull([]byte(s), true, max)
			got, gotErr := feedFull([]byte(s), false, max)
			if !equalTranscript(want, wantErr, got, gotErr) {
				t.Errorf("%q (max %d):\n fast %q %q\n slow %q %q", s, max, got, gotErr, want, wantErr)
			}
		}
	}
}

// TestFastPutTaken: the common puts do take the fast path.
func TestFastPutTaken(t *testing.T) {
	var p Parser
	for _, s := range fastPutSeeds()[:2] {
		n, ok, err := p.fastPut([]byte(s), func(*Command) error { return nil })
		if !ok || err != nil || n != len(s) {
			t.Errorf("%q: fast path n=%d ok=%v err=%v", s, n, ok, err)
		}
	}
}

// FuzzFastPut: whatever the bytes, the parser with the put fast path
// delivers the same commands and the same error as without it.
func FuzzFastPut(f *testing.F) {
	for _, s := range fastPutSeeds() {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, m uint8) {
		max := int(m) * 3 // 0: the default
		want, wantErr := feedFull(stream, true, max)
		got, gotErr := feedFull(stream, false, max)
		if !equalTranscript(want, wantErr, got, gotErr) {
			t.Fatalf("%q:\n fast %q %q\n slow %q %q", stream, got, gotErr, want, wantErr)
		}
	})
}

// TestReplyFastPathTaken: a put reply whole in the buffer is read without
// the general path's body copy (rr.buf stays unallocated), and the same
// reply split across reads takes the general path with the same result.
func TestReplyFastPathTaken(t *testing.T) {
	stream := "result 200 20 7\r\n12345678901 0 424242result 500 3 -8\nbad"
	rr := NewReplyReader(strings.NewReader(stream), 0)
	var got []string
	for {
		rep, err := rr.Next()
		if err != nil {
			break
		}
		got = append(got, fmt.Sprintf("%d %d %d %q", rep.Kind, rep.Code, rep.Opaque, rep.Body))
	}
	if rr.buf != nil {
		t.Fatal("the general path copied a body")
	}
	want, _ := readEvents(iotest.OneByteReader(strings.NewReader(stream)), 1<<20)
	var gen []string
	for _, e := range want {
		gen = append(gen, fmt.Sprintf("%d %d %d %q", e.kind, e.code, e.opaque, e.body))
	}
	if len(got) != 2 || strings.Join(got, "|") != strings.Join(gen, "|") || want[0].body != "12345678901 0 424242" {
		t.Fatalf("fast %q, general %v", got, want)
	}
}

// FuzzFastPutResult: whatever the bytes, a put result fastPutResult accepts
// parses to the same numbers on the general path.
func FuzzFastPutResult(f *testing.F) {
	for _, s := range []string{"0 0 0", "1125899906842624 3 424242", "999999999999999999 2147483647 999999999999999999",
		"1 2147483648 3", "5 -1 -1", "1  2 3", "1 2 3 ", "0001 02 3", "1234567890123456789 1 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, part, off, ok := fastPutResult(b)
		if !ok {
			return
		}
		gid, gpart, goff, err := parsePutResult(b)
		if err != nil || gid != id || gpart != part || goff != off {
			t.Fatalf("%q: fast %d %d %d, general %d %d %d %v", b, id, part, off, gid, gpart, goff, err)
		}
	})
}
