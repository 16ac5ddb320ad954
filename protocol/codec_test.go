package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// parseOne parses b and returns the rendered commands.
func parseOne(t *testing.T, b []byte) []string {
	t.Helper()
	got, err := feed(&Parser{}, [][]byte{b})
	if err != "" && err != ErrQuit.Error() {
		t.Fatalf("parse %q: %s", b, err)
	}
	return got
}

func TestEncodersExact(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{string(AppendPut(nil, "test", 0, 0, ChecksumNone, "", -2147483648, []byte("hello"))),
			"put test 0 5 0 -2147483648\r\nhello"},
		{string(AppendPut(nil, "test", 1, 4, 123, "", 7, []byte("hello"))), "put test 1 5 4 123 7\r\nhello"},
		{string(AppendPut(nil, "test", -1, 0, ChecksumNone, "TX:s:1", 7, []byte("hi"))), "put test -1 2 0 TX:s:1 7\r\nhi"},
		{string(AppendPut(nil, "test", 2, 0, -1, "TX:s:1", 8, nil)), "put test 2 0 0 -1 TX:s:1 8\r\n"},
		{string(AppendPutHeader(nil, "t", 0, 100, 0, ChecksumNone, "", 1)), "put t 0 100 0 1\r\n"},
		{string(AppendPutHeader(nil, "t", -2147483648, 2147483647, -2147483648, -2147483647, "", -2147483648)),
			"put t -2147483648 2147483647 -2147483648 -2147483647 -2147483648\r\n"},
		{string(AppendPutHeader(nil, "t", 1, 2147483648, 0, ChecksumNone, "", 1)), "put t 1 2147483648 0 1\r\n"},
		{string(AppendGet(nil, "t", "g", 0, 10, 1024, 5, 0, "")), "get t g 0 10 1024 5\r\n"},
		{string(AppendGet(nil, "t", "g", 0, 10, 1024, 5, 0, "*")), "get t g 0 10 1024 5\r\n"},
		{string(AppendGet(nil, "t", "g", 0, 10, 1024, 5, 3000, "")), "get t g 0 10 1024 5 3000\r\n"},
		{string(AppendGet(nil, "t", "g", 0, 10, 1024, 5, 1<<40, "")), "get t g 0 10 1024 5 2147483647\r\n"}, // the most a broker accepts
		{string(AppendGet(nil, "t", "g", 0, 10, 1024, 5, 0, "a||b")), "get t g 0 10 1024 5 0 a||b\r\n"},
		{string(AppendOffset(nil, "t", "g", 3, 99, 4)), "offset t g 3 99 4\r\n"},
		{string(AppendStats(nil, "", 5)), "stats  5\r\n"},
		{string(AppendStats(nil, "topics", 5)), "stats topics 5\r\n"},
		{string(AppendVersion(nil, 7)), "version 7\r\n"},
		{string(AppendQuit(nil)), "quit\r\n"},
		{string(AppendSeek(nil, "t", 1, 1700000000000, 2)), "seek t 1 1700000000000 2\r\n"},
		{string(AppendQueryID(nil, 42, 3)), "query id 42 3\r\n"},
		{string(AppendQueryKey(nil, "t", "k1", 10, 4)), "query key t k1 10 4\r\n"},
		{string(AppendTransaction(nil, "TX:s:1", "s", "BEGIN", 0, "", 1)), "transaction TX:s:1 s BEGIN 1\r\n"},
		{string(AppendTransaction(nil, "TX:s:1", "s", "BEGIN", 30, "", 1)), "transaction TX:s:1 s BEGIN 30 1\r\n"},
		{string(AppendTransaction(nil, "XID:1:a:b:u", "s", "PREPARE", 30, "u", 1)), "transaction XID:1:a:b:u s PREPARE 30 u 1\r\n"},
		{string(AppendTransaction(nil, "XID:1:a:b:u", "s", "END", 0, "u", 1)), "transaction XID:1:a:b:u s END u 1\r\n"},
		{string(AppendSync(nil, "t", 1, 0, 77, ChecksumNone, 4, []byte("hello"))), "sync t 1 5 0 77 4\r\nhello"},
		{string(AppendSync(nil, "t", 1, 0, 77, 9, 4, []byte("hello"))), "sync t 1 5 0 77 9 4\r\nhello"},
		{string(AppendResult(nil, 200, []byte("ok"), -1)), "result 200 2 -1\r\nok"},
		{string(AppendResultString(nil, 404, "", 2147483647)), "result 404 0 2147483647\r\n"},
		{string(AppendResultInt(nil, 301, 1234, 5)), "result 301 4 5\r\n1234"},
		{string(AppendResultInt(nil, 200, -1, 5)), "result 200 2 5\r\n-1"},
		{string(AppendPutResult(nil, MakeMsgID(1, 4096), 3, 17, -2147483648)),
			"result 200 20 -2147483648\r\n281474976714752 3 17"},
		{string(AppendValueHeader(nil, 1234, 9)), "value 1234 9\r\n"},
		{string(AppendError(nil, &Error{Code: 400, Msg: "bad", Opaque: 3})), "result 400 3 3\r\nbad"},
		{string(AppendStatsEnd(AppendStatInt(AppendStat(AppendStatsStart(nil), "a b", "x\r\ny z"), "n", -5))),
			"STATS\r\na_b x  y z\r\nn -5\r\nEND\r\n"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// Every encoder's output is parsed back to the same command.
func TestEncodersRoundTrip(t *testing.T) {
	data := []byte("hello")
	sum := MessageChecksum(data)
	cases := []struct {
		in   []byte
		want string
	}{
		{AppendPut(nil, "test", 0, 0, ChecksumNone, "", math.MinInt32, data), `put o=-2147483648 topic=test p=0 data="hello"`},
		{AppendPut(nil, "test", 1, 4, sum, "", 7, data), `put o=7 topic=test p=1 flag=4 ck=` + ck("hello") + ` data="hello"`},
		{AppendPut(nil, "test", -1, 0, ChecksumNone, "TX:s:1", 7, data), `put o=7 topic=test p=-1 tx=TX:s:1 data="hello"`},
		{AppendPut(nil, "test", 2, 0, -1, "TX:s:1", math.MaxInt32, data), `put o=2147483647 topic=test p=2 ck=-1 tx=TX:s:1 data="hello"`},
		{AppendGet(nil, "t", "g", 1, 10, 1024, 5, 0, ""), `get o=5 topic=t group=g p=1 off=10 max=1024`},
		{AppendGet(nil, "t", "g", 1, 10, 1024, 5, 100, "a||b"), `get o=5 topic=t group=g p=1 off=10 max=1024 wait=100 tags=a||b`},
		{AppendOffset(nil, "t", "g", 3, 99, 4), `offset o=4 topic=t group=g p=3 off=99`},
		{AppendStats(nil, "", 5), `stats o=5`},
		{AppendStats(nil, "realtime", 5), `stats o=5 item=realtime`},
		{AppendVersion(nil, -3), `version o=-3`},
		{AppendQuit(nil), `quit o=-`},
		{AppendSeek(nil, "t", 1, 1700000000000, 2), `seek o=2 topic=t p=1 ts=1700000000000`},
		{AppendQueryID(nil, 42, 3), `query id o=3 id=42`},
		{AppendQueryKey(nil, "t", "k1", 10, 4), `query key o=4 topic=t key=k1 num=10`},
		{AppendTransaction(nil, "XID:1:a:b:u", "s", "PREPARE", 30, "u", 1), `transaction o=1 tx=XID:1:a:b:u args=["XID:1:a:b:u" "s" "PREPARE" "30" "u" "1"]`},
		{AppendSync(nil, "t", 1, 0, 77, sum, 4, data), `sync o=4 topic=t p=1 ck=` + ck("hello") + ` data="hello" id=77`},
	}
	for _, c := range cases {
		got := parseOne(t, c.in)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%q parsed to %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEncodersAllocs(t *testing.T) {
	dst := make([]byte, 0, 4096)
	data := []byte("hello")
	body := []byte("body")
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendPut(dst[:0], "test", 0, 0, 123, "TX:s:1", 7, data)
		b = AppendGet(b, "t", "g", 0, 10, 1024, 5, 3000, "a||b")
		b = AppendOffset(b, "t", "g", 0, 1, 2)
		b = AppendStats(b, "", 1)
		b = AppendVersion(b, 1)
		b = AppendQuit(b)
		b = AppendSeek(b, "t", 0, 1, 1)
		b = AppendQueryID(b, 1, 1)
		b = AppendQueryKey(b, "t", "k", 1, 1)
		b = AppendTransaction(b, "TX:s:1", "s", "BEGIN", 30, "u", 1)
		b = AppendSync(b, "t", 0, 0, 1, 1, 1, data)
		b = AppendResult(b, 200, body, 1)
		b = AppendResultString(b, 404, "no", 1)
		b = AppendResultInt(b, 301, 77, 1)
		b = AppendPutResult(b, 1<<48|12345, 3, 17, 1)
		b = AppendValueHeader(b, 1000, 1)
		b = AppendStatsStart(b)
		b = AppendStat(b, "k", "v")
		b = AppendStatInt(b, "n", 5)
		b = AppendStatsEnd(b)
		_ = b
	})
	if allocs != 0 {
		t.Fatalf("encoders allocate %.1f times", allocs)
	}
}

func TestPutResultRoundTrip(t *testing.T) {
	for _, c := range []struct {
		id   int64
		part int32
		off  int64
	}{
		{MakeMsgID(0, 0), 0, 0}, {MakeMsgID(32767, 1<<48-1), math.MaxInt32, math.MaxInt64}, {5, -1, -1},
	} {
		b := AppendPutResult(nil, c.id, c.part, c.off, 9)
		rr := NewReplyReader(bytes.NewReader(b), 0)
		rep, err := rr.Next()
		if err != nil || rep.Kind != ReplyResult || rep.Code != 200 || rep.Opaque != 9 {
			t.Fatalf("%q: %+v %v", b, rep, err)
		}
		id, part, off, err := ParsePutResult(rep.Body)
		if err != nil || id != c.id || part != c.part || off != c.off {
			t.Fatalf("%q: %d %d %d %v", rep.Body, id, part, off, err)
		}
	}
	for _, bad := range []string{"", "1", "1 2", "1 2 x", "1  2 3", "a 2 3", "1 2147483648 3", "1 2 3 4"} {
		if _, _, _, err := ParsePutResult([]byte(bad)); err == nil {
			t.Errorf("ParsePutResult(%q) should fail", bad)
		}
	}
	if v, err := ParseInt([]byte("1234")); err != nil || v != 1234 {
		t.Fatal(v, err)
	}
	if _, err := ParseInt([]byte("12x")); err == nil {
		t.Fatal("ParseInt accepted junk")
	}
}

func TestStatsRoundTrip(t *testing.T) {
	b := AppendStatsStart(nil)
	b = AppendStat(b, "version", "metaq 1.0 (go)")
	b = AppendStatInt(b, "curr_connections", 3)
	b = AppendStat(b, "empty", "")
	b = AppendStatsEnd(b)
	st, err := ParseStats(b)
	want := []Stat{{"version", "metaq 1.0 (go)"}, {"curr_connections", "3"}, {"empty", ""}}
	if err != nil || len(st) != len(want) {
		t.Fatalf("%v %v", st, err)
	}
	for i := range want {
		if st[i] != want[i] {
			t.Fatalf("stat %d = %+v, want %+v", i, st[i], want[i])
		}
	}
	if st, err := ParseStats([]byte("STATS\nk v\nEND\n")); err != nil || len(st) != 1 || st[0] != (Stat{"k", "v"}) {
		t.Fatalf("LF stats: %v %v", st, err)
	}
	if st, err := ParseStats([]byte("STATS\r\nEND\r\n")); err != nil || len(st) != 0 {
		t.Fatalf("empty stats: %v %v", st, err)
	}
	for _, bad := range []string{"", "k v\r\nEND\r\n", "STATS\r\nk v\r\n", "STATS\r\nEND\r\nx y\r\n"} {
		if _, err := ParseStats([]byte(bad)); err == nil {
			t.Errorf("ParseStats(%q) should fail", bad)
		}
	}
}

// replies is a stream with every reply shape.
func replyStream() ([]byte, []Reply) {
	rec := encode(sampleRecord())
	var b []byte
	var want []Reply
	b = AppendPutResult(b, 281474976714752, 3, 17, -2147483648)
	want = append(want, Reply{ReplyResult, 200, -2147483648, []byte("281474976714752 3 17")})
	b = AppendResultString(b, 404, "", 2)
	want = append(want, Reply{ReplyResult, 404, 2, nil})
	b = AppendValueHeader(b, 2*len(rec), 3)
	b = append(b, rec...)
	b = append(b, rec...)
	want = append(want, Reply{ReplyValue, 200, 3, append(append([]byte(nil), rec...), rec...)})
	b = append(b, "result 400 12 4\nbad\r\nrequest"...) // LF-only header, body with CRLF
	want = append(want, Reply{ReplyResult, 400, 4, []byte("bad\r\nrequest")})
	b = append(b, "result  301   2 5 \r\n17"...) // extra spaces
	want = append(want, Reply{ReplyResult, 301, 5, []byte("17")})
	return b, want
}

func readAll(t *testing.T, rr *ReplyReader) ([]Reply, error) {
	var out []Reply
	for {
		rep, err := rr.Next()
		if err != nil {
			return out, err
		}
		rep.Body = bytes.Clone(rep.Body)
		out = append(out, rep)
	}
}

func TestReplyReader(t *testing.T) {
	stream, want := replyStream()
	readers := map[string]io.Reader{
		"whole":       bytes.NewReader(stream),
		"one byte":    iotest.OneByteReader(bytes.NewReader(stream)),
		"half":        iotest.HalfReader(bytes.NewReader(stream)),
		"small bufio": bufio.NewReaderSize(bytes.NewReader(stream), 16),
		"big bufio":   bufio.NewReaderSize(bytes.NewReader(stream), 8192),
	}
	for name, r := range readers {
		got, err := readAll(t, NewReplyReader(r, 1024))
		if err != io.EOF || len(got) != len(want) {
			t.Fatalf("%s: %d replies, err %v", name, len(got), err)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Kind != w.Kind || g.Code != w.Code || g.Opaque != w.Opaque || !bytes.Equal(g.Body, w.Body) {
				t.Fatalf("%s: reply %d = %+v, want %+v", name, i, g, w)
			}
		}
	}
	// The value body holds decodable records.
	it := NewRecordIterator(want[2].Body)
	n := 0
	for it.Next() {
		n++
	}
	if it.Err() != nil || n != 2 {
		t.Fatalf("records: %d %v", n, it.Err())
	}
}

func TestReplyReaderKeepBodies(t *testing.T) {
	stream := AppendResultString(AppendResultString(nil, 200, "first", 1), 200, "second", 2)
	rr := NewReplyReader(bytes.NewReader(stream), 0)
	rr.KeepBodies = true
	a, _ := rr.Next()
	b, _ := rr.Next()
	if string(a.Body) != "first" || string(b.Body) != "second" {
		t.Fatalf("%q %q", a.Body, b.Body)
	}
}

func TestReplyReaderErrors(t *testing.T) {
	cases := []struct {
		in   string
		want error // nil: a *ReplyFormatError
	}{
		{"result 200 5 1\r\nhel", io.ErrUnexpectedEOF},
		{"result 200 5", io.ErrUnexpectedEOF},
		{"value 100 1\r\n", io.ErrUnexpectedEOF},
		{"result 200 2000 1\r\n", ErrReplyTooLarge},
		{"value 99999999999 1\r\n", ErrReplyTooLarge},
		{strings.Repeat("x", 5000), ErrReplyLineTooLong},
		{"result 200 " + strings.Repeat("1", 5000) + " 1\r\n", ErrReplyLineTooLong},
		{"hello\r\n", nil},
		{"\r\n", nil},
		{"result 200 5\r\n", nil},
		{"result 200 5 1 2\r\n", nil},
		{"result 200 5 1 2 3 4\r\n", nil},
		{"result x 5 1\r\n", nil},
		{"result -200 5 1\r\n", nil},
		{"result 200 -5 1\r\n", nil},
		{"result 200 5 x\r\n", nil},
		{"result 200 5 2147483648\r\n", nil},
		{"value 5\r\n", nil},
		{"value x 1\r\n", nil},
		{"VALUE 5 1\r\n", nil},
	}
	for _, c := range cases {
		_, err := NewReplyReader(strings.NewReader(c.in), 1024).Next()
		var fe *ReplyFormatError
		if c.want == nil && !errors.As(err, &fe) || c.want != nil && err != c.want {
			t.Errorf("%.40q: err %v, want %v", c.in, err, c.want)
		}
	}
	if _, err := NewReplyReader(strings.NewReader(""), 0).Next(); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
}

// A server that announces a huge body and sends a few bytes costs little.
func TestReplyReaderBoundedAlloc(t *testing.T) {
	in := "value 16000000 1\r\nabc"
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	_, err := NewReplyReader(strings.NewReader(in), 16<<20).Next()
	runtime.ReadMemStats(&ms1)
	if err != io.ErrUnexpectedEOF {
		t.Fatal(err)
	}
	if d := ms1.TotalAlloc - ms0.TotalAlloc; d > 512<<10 {
		t.Fatalf("allocated %d bytes for a 3-byte body", d)
	}
}

type cycleReader struct {
	b []byte
	i int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.b[c.i:])
		n += k
		c.i = (c.i + k) % len(c.b)
	}
	return n, nil
}

func TestReplyReaderAllocs(t *testing.T) {
	stream, want := replyStream()
	rr := NewReplyReader(&cycleReader{b: stream}, 0)
	for range 2 * len(want) {
		if _, err := rr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := rr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReplyReader.Next allocates %.1f times", allocs)
	}
}

func TestStatusText(t *testing.T) {
	for code, s := range map[int]string{200: "Success", 301: "Moved", 400: "BadRequest", 403: "Forbidden",
		404: "NotFound", 500: "InternalServerError", 503: "ServiceUnavailable", 504: "GatewayTimeout",
		401: "Unauthorized", 418: "Status418"} {
		if StatusText(code) != s {
			t.Errorf("StatusText(%d) = %q", code, StatusText(code))
		}
	}
	if ReplyValue.String() != "value" || ReplyResult.String() != "result" || ReplyKind(9).String() != "reply(9)" {
		t.Fatal("ReplyKind.String")
	}
}

func TestSplitProperties(t *testing.T) {
	cases := []struct {
		flag      int32
		in        string
		props     string
		rest      string
		flagOut   int32
		wantError error
	}{
		{0, "hello", "", "hello", 0, nil},
		{1, "\x00\x00\x00\x01ahello", "", "\x00\x00\x00\x01ahello", 1, nil},
		{2, "tag=a&keys=k1\nhello", "tag=a&keys=k1", "hello", 0, nil},
		{3, "tag=a\r\n\x00\x00\x00\x00hello", "tag=a", "\x00\x00\x00\x00hello", 1, nil},
		{2 | 8, "\nhello", "", "hello", 8, nil},
		{2, "tag=a\n", "tag=a", "", 0, nil},
		{2, "tag=a", "", "", 2, ErrNoPropertiesEnd},
		{2, "", "", "", 2, ErrNoPropertiesEnd},
		{2, "tag=\x01\nx", "", "", 2, ErrBadProperties},
		{2, strings.Repeat("a", 65535) + "\nx", strings.Repeat("a", 65535), "x", 0, nil},
		{2, strings.Repeat("a", 65535) + "\r\nx", strings.Repeat("a", 65535), "x", 0, nil},
		{2, strings.Repeat("a", 65536) + "\nx", "", "", 2, ErrPropertiesTooLong},
		{2, strings.Repeat("a", 70000), "", "", 2, ErrPropertiesTooLong},
	}
	for i, c := range cases {
		props, rest, f, err := SplitProperties(c.flag, []byte(c.in))
		if err != c.wantError || string(props) != c.props || string(rest) != c.rest || (err == nil && f != c.flagOut) {
			t.Errorf("case %d: %.20q %.20q %d %v", i, props, rest, f, err)
		}
	}
	d := []byte("tag=a\nhello")
	if a := testing.AllocsPerRun(100, func() { SplitProperties(2, d) }); a != 0 {
		t.Fatalf("SplitProperties allocates %.1f", a)
	}
}

func TestAttributeAndMessageData(t *testing.T) {
	data, flag := AppendMessageData(nil, 4|FlagHasProperties, []byte("tag=a&keys=k"), []byte("attr"), true, []byte("payload"))
	if flag != 4|FlagHasProperties|FlagHasAttribute || string(data) != "tag=a&keys=k\n\x00\x00\x00\x04attrpayload" {
		t.Fatalf("%q %d", data, flag)
	}
	props, stored, flag2, err := SplitProperties(flag, data)
	if err != nil || string(props) != "tag=a&keys=k" || flag2 != 4|FlagHasAttribute {
		t.Fatalf("%q %d %v", props, flag2, err)
	}
	attr, payload, err := AttributeOf(flag2, stored)
	if err != nil || string(attr) != "attr" || string(payload) != "payload" {
		t.Fatalf("%q %q %v", attr, payload, err)
	}
	data, flag = AppendMessageData(nil, FlagHasAttribute|FlagHasProperties, nil, nil, false, []byte("p"))
	if flag != 0 || string(data) != "p" {
		t.Fatalf("%q %d", data, flag)
	}
	if a, p, err := AttributeOf(0, []byte("xyz")); a != nil || string(p) != "xyz" || err != nil {
		t.Fatal(a, p, err)
	}
	if a, p, err := AttributeOf(1, []byte("\x00\x00\x00\x00")); len(a) != 0 || len(p) != 0 || err != nil {
		t.Fatal(a, p, err)
	}
	for _, bad := range []string{"", "\x00\x00\x00", "\x00\x00\x00\x05abcd", "\xff\xff\xff\xffab"} {
		if _, _, err := AttributeOf(1, []byte(bad)); err != ErrBadAttribute {
			t.Errorf("AttributeOf(%q) = %v", bad, err)
		}
	}
}

func TestTagExprMatchHash(t *testing.T) {
	exprs := []string{"", "*", "a", "a||b", " a || b ", "a||*", "||", "a||||b", "b", "x||y", " * "}
	tags := []string{"", "a", "b", "c", "x"}
	for _, e := range exprs {
		f := ParseTagFilter(e)
		for _, tag := range tags {
			h := TagHashString(tag)
			if got, want := TagExprMatchHash([]byte(e), h), f.MatchHash(h); got != want {
				t.Errorf("expr %q tag %q: got %v want %v", e, tag, got, want)
			}
		}
	}
	e := []byte("a||b||c")
	if a := testing.AllocsPerRun(100, func() { TagExprMatchHash(e, 5) }); a != 0 {
		t.Fatalf("TagExprMatchHash allocates %.1f", a)
	}
}
