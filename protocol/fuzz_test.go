package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// chunksFrom cuts stream into pieces whose sizes come from cuts (each byte
// + 1, cycling); no cuts means one piece.
func chunksFrom(stream, cuts []byte) [][]byte {
	if len(cuts) == 0 {
		return [][]byte{stream}
	}
	var out [][]byte
	for i, k := 0, 0; i < len(stream); k++ {
		n := min(int(cuts[k%len(cuts)])+1, len(stream)-i)
		out = append(out, stream[i:i+n])
		i += n
	}
	return out
}

// fuzzMax derives a small MaxMessageSize so that the limit is exercised.
func fuzzMax(cuts []byte) int {
	if len(cuts) == 0 {
		return 0 // default 4 MiB
	}
	return 1 + int(cuts[0])*4
}

func parseSeeds() [][2][]byte {
	var seeds [][2][]byte
	for _, tc := range parseCases {
		seeds = append(seeds, [2][]byte{[]byte(tc.in), nil})
		seeds = append(seeds, [2][]byte{[]byte(tc.in), {0}})
		seeds = append(seeds, [2][]byte{[]byte(tc.in), {3, 0, 17, 200}})
	}
	// A pipelined mix.
	var mix []byte
	mix = AppendPut(mix, "test", 0, 2, MessageChecksum([]byte("tag=a\nhello")), "", 1, []byte("tag=a\nhello"))
	mix = AppendGet(mix, "test", "g", 0, 0, 1024, 2, 100, "a||b")
	mix = AppendPut(mix, "t", -1, 0, ChecksumNone, "TX:s:1", -2147483648, bytes.Repeat([]byte{0, '\r', '\n'}, 50))
	mix = AppendStats(mix, "", 3)
	mix = AppendSync(mix, "t", 1, 0, 5, -1, 4, []byte("\r\n"))
	mix = append(mix, "bogus\r\nput a/b 0 3 0 5\r\nabc\r\n"...)
	mix = AppendRetry(mix, "g", 281474976710656, 0, 9, "boom now")
	mix = append(mix, "retry g 1 -1 10\r\nretry g x 1 11 \x01\r\n"...)
	var block []byte
	for _, b := range []string{"one", "tag=x\ntwo", ""} {
		d := MessageData{Payload: []byte(b)}
		block = AppendBatchEntry(block, &d)
	}
	mix = append(AppendBatchPutHeader(mix, "test", 1, 3, len(block), MessageChecksum(block), 12), block...)
	mix = append(AppendBatchPutHeader(mix, "test", -1, 3, len(block), ChecksumNone, 13), block...)
	mix = append(mix, "mput test 0 0 3 14\r\nabcmput x 1 2 -1 15\r\n"...)
	mix = AppendQuit(mix)
	seeds = append(seeds, [2][]byte{mix, nil}, [2][]byte{mix, {1, 2, 5, 11}})
	// Broker-managed delivery (pop.go).
	var pm []byte
	pm = AppendPop(pm, "test", "g", 16, 30000, 1000, 1, "a||b", "a%20%3D%201")
	pm = AppendFinish(pm, OpAck, "g", 0, []byte("test:0:1:1 test:0:2:1\ntest:1:0:3"), 2)
	pm = AppendFinish(pm, OpRelease, "g", 500, []byte("test:0:3:1"), 3)
	pm = AppendFinish(pm, OpExtend, "g", 60000, []byte(""), 4)
	pm = append(pm, "ack g test:0:0:1 5\r\nreject g 4 6\r\nx:y:release g 10 3 7 8\r\nabcextend g 99 a:1:1:1 9\r\npop t g 0 1 2\r\n"...)
	seeds = append(seeds, [2][]byte{pm, nil}, [2][]byte{pm, {4, 9, 1, 30}})
	return seeds
}

// FuzzParser feeds a stream whole and in pieces (sizes from cuts) and byte by
// byte: the parser must never panic, must deliver the same commands and the
// same final error whatever the split, must never deliver data beyond
// MaxMessageSize or a line beyond MaxLineLen (checkInvariants), and must never
// buffer more than MaxMessageSize.
func FuzzParser(f *testing.F) {
	for _, s := range parseSeeds() {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		max := fuzzMax(cuts)
		p := &Parser{MaxMessageSize: max}
		whole, wholeErr := feed(p, [][]byte{stream})
		if cap(p.data) > p.maxMessageSize() {
			t.Fatalf("buffered %d > max %d", cap(p.data), p.maxMessageSize())
		}
		p = &Parser{MaxMessageSize: max}
		got, gotErr := feed(p, chunksFrom(stream, cuts))
		if !equalTranscript(whole, wholeErr, got, gotErr) {
			t.Fatalf("split %v:\n got  %q %q\n want %q %q", cuts, got, gotErr, whole, wholeErr)
		}
		if cap(p.data) > p.maxMessageSize() {
			t.Fatalf("buffered %d > max %d", cap(p.data), p.maxMessageSize())
		}
		if len(stream) <= 4096 {
			got, gotErr = feed(&Parser{MaxMessageSize: max}, byteChunks(string(stream)))
			if !equalTranscript(whole, wholeErr, got, gotErr) {
				t.Fatalf("byte by byte:\n got  %q %q\n want %q %q", got, gotErr, whole, wholeErr)
			}
		}
	})
}

// FuzzPutRoundTrip encodes a put with AppendPut and parses it back.
func FuzzPutRoundTrip(f *testing.F) {
	f.Add("test", int32(0), int32(0), true, "", int32(-2147483648), []byte("hello"))
	f.Add("t", int32(-1), int32(3), false, "TX:s:1", int32(5), []byte{})
	f.Add("%RETRY%g", int32(7), int32(-1), true, "XID:1:a:b:c", int32(2147483647), []byte("\r\n"))
	f.Fuzz(func(t *testing.T, topic string, partition, flag int32, withCk bool, txKey string, opaque int32, data []byte) {
		checksum := ChecksumNone
		if withCk {
			checksum = MessageChecksum(data)
		}
		b := AppendPut(nil, topic, partition, flag, checksum, txKey, opaque, data)
		valid := ValidName(topic) && partition >= -1 && len(data) <= DefaultMaxMessageSize && len(b)-len(data) <= MaxLineLen
		if txKey != "" {
			c := txKey[0]
			valid = valid && c != '-' && (c < '0' || c > '9')
			for i := 0; i < len(txKey); i++ {
				if txKey[i] <= ' ' || txKey[i] == 0x7f {
					valid = false
				}
			}
		}
		var got *Command
		var p Parser
		err := p.Parse(b, func(c *Command) error {
			if got != nil {
				return errors.New("two commands")
			}
			cc := *c
			cc.Topic, cc.TxKey, cc.Data = bytes.Clone(c.Topic), bytes.Clone(c.TxKey), bytes.Clone(c.Data)
			got = &cc
			return nil
		})
		if !valid {
			return // must only not panic
		}
		if err != nil || got == nil || got.Err != nil {
			t.Fatalf("%q: err %v cmd %+v", b, err, got)
		}
		if string(got.Topic) != topic || got.Partition != partition || got.Flag != flag || string(got.TxKey) != txKey ||
			got.Opaque != opaque || !bytes.Equal(got.Data, data) || got.HasChecksum != withCk {
			t.Fatalf("%q: parsed %+v", b, got)
		}
	})
}

type replyEvent struct {
	kind   ReplyKind
	code   int
	opaque int32
	body   string
}

func readEvents(r io.Reader, maxBody int) ([]replyEvent, string) {
	return readEventsBatched(r, maxBody, 0)
}

// readEventsBatched is readEvents taking, after each Next, what
// NextBuffered returns in batches of up to batch replies (none when 0).
func readEventsBatched(r io.Reader, maxBody, batch int) ([]replyEvent, string) {
	rr := NewReplyReader(r, maxBody)
	var out []replyEvent
	reps := make([]Reply, 0, batch)
	for {
		for batch > 0 {
			reps = rr.NextBuffered(reps[:0])
			if len(reps) == 0 {
				break
			}
			for _, rep := range reps {
				out = append(out, replyEvent{rep.Kind, rep.Code, rep.Opaque, string(rep.Body)})
			}
		}
		rep, err := rr.Next()
		if err != nil {
			var fe *ReplyFormatError
			if errors.As(err, &fe) {
				return out, "format"
			}
			return out, err.Error()
		}
		if len(rep.Body) > maxBody {
			panic("body beyond max")
		}
		out = append(out, replyEvent{rep.Kind, rep.Code, rep.Opaque, string(rep.Body)})
	}
}

// FuzzReplyReader reads a stream whole, one byte at a time and whole in
// NextBuffered's batches: no panic, the same replies and the same error
// class, bodies within the limit.
func FuzzReplyReader(f *testing.F) {
	stream, _ := replyStream()
	f.Add(stream, uint16(1024))
	f.Add(stream, uint16(3))
	f.Add([]byte("result 200 5 1\r\nhel"), uint16(100))
	f.Add([]byte("value 99999 1\r\n"), uint16(100))
	f.Add([]byte(strings.Repeat("r", 5000)), uint16(100))
	f.Add([]byte("result 200 0 1\nvalue 0 2\r\nresult 1 1 1\r\nx"), uint16(1))
	f.Fuzz(func(t *testing.T, stream []byte, maxBody uint16) {
		mb := int(maxBody) + 1
		a, aErr := readEvents(bytes.NewReader(stream), mb)
		b, bErr := readEvents(iotest.OneByteReader(bytes.NewReader(stream)), mb)
		if aErr != bErr || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("whole %v %q\nbytes %v %q", a, aErr, b, bErr)
		}
		c, cErr := readEventsBatched(bytes.NewReader(stream), mb, 3)
		if aErr != cErr || fmt.Sprint(a) != fmt.Sprint(c) {
			t.Fatalf("whole %v %q\nbatched %v %q", a, aErr, c, cErr)
		}
	})
}

// TestWriteFuzzCorpus regenerates the committed seed corpus under
// testdata/fuzz when METAQ_WRITE_FUZZ_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("METAQ_WRITE_FUZZ_CORPUS") != "1" {
		t.Skip("set METAQ_WRITE_FUZZ_CORPUS=1 to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParser")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range parseSeeds() {
		if len(s[1]) < 2 {
			continue // whole and byte-split seeds are added by f.Add
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", s[0], s[1])
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join("testdata", "fuzz", "FuzzReplyReader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stream, _ := replyStream()
	for i, s := range []string{string(stream), "result 200 5 1\r\nhel", "value 99999 1\r\n",
		"result 200 0 1\nvalue 0 2\r\nresult 1 1 1\r\nx", "result  200  3  -1 \r\nabc", "\r\n\r\n"} {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint16(%d)\n", s, 64)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
