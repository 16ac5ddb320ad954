package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// render prints a command compactly: only the fields that are set.
func render(c *Command) string {
	var b strings.Builder
	b.WriteString(c.Op.String())
	if c.HasOpaque {
		fmt.Fprintf(&b, " o=%d", c.Opaque)
	} else {
		if c.Opaque != DefaultOpaque {
			fmt.Fprintf(&b, " BADOPAQUE=%d", c.Opaque)
		}
		b.WriteString(" o=-")
	}
	if c.Err != nil {
		if c.Err.Opaque != c.Opaque || c.Err.HasOpaque != c.HasOpaque {
			b.WriteString(" ERR-OPAQUE-MISMATCH")
		}
		fmt.Fprintf(&b, " !%d %s", c.Err.Code, c.Err.Msg)
		return b.String()
	}
	if c.Topic != nil {
		fmt.Fprintf(&b, " topic=%s", c.Topic)
	}
	if c.Group != nil {
		fmt.Fprintf(&b, " group=%s", c.Group)
	}
	switch c.Op {
	case OpPut, OpGet, OpOffset, OpSync, OpSeek:
		fmt.Fprintf(&b, " p=%d", c.Partition)
	}
	if c.Flag != 0 {
		fmt.Fprintf(&b, " flag=%d", c.Flag)
	}
	if c.HasChecksum {
		fmt.Fprintf(&b, " ck=%d", c.Checksum)
	} else if c.Checksum != -1 {
		b.WriteString(" BADCHECKSUM")
	}
	if c.TxKey != nil {
		fmt.Fprintf(&b, " tx=%s", c.TxKey)
	}
	if c.Op == OpPut || c.Op == OpSync {
		fmt.Fprintf(&b, " data=%q", c.Data)
	} else if c.Data != nil {
		b.WriteString(" UNEXPECTED-DATA")
	}
	if c.Offset != 0 {
		fmt.Fprintf(&b, " off=%d", c.Offset)
	}
	if c.MaxSize != 0 {
		fmt.Fprintf(&b, " max=%d", c.MaxSize)
	}
	if c.MaxWaitMs != 0 {
		fmt.Fprintf(&b, " wait=%d", c.MaxWaitMs)
	}
	if c.Tags != nil {
		fmt.Fprintf(&b, " tags=%s", c.Tags)
	}
	if c.Where != nil {
		fmt.Fprintf(&b, " where=%s", c.Where)
	}
	if c.Item != nil {
		fmt.Fprintf(&b, " item=%s", c.Item)
	}
	if c.Timestamp != 0 {
		fmt.Fprintf(&b, " ts=%d", c.Timestamp)
	}
	if c.MsgID != 0 {
		fmt.Fprintf(&b, " id=%d", c.MsgID)
	}
	if c.Key != nil {
		fmt.Fprintf(&b, " key=%s", c.Key)
	}
	if c.MaxNum != 0 {
		fmt.Fprintf(&b, " num=%d", c.MaxNum)
	}
	if c.Op == OpTransaction {
		fmt.Fprintf(&b, " args=%q", c.Args)
	}
	return b.String()
}

func renderErr(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		o := "-"
		if e.HasOpaque {
			o = strconv.Itoa(int(e.Opaque))
		} else if e.Opaque != DefaultOpaque {
			o = "BADOPAQUE"
		}
		return fmt.Sprintf("FATAL=%v o=%s !%d %s", e.Fatal, o, e.Code, e.Msg)
	}
	return err.Error()
}

// feed parses the chunks in order, each copied into a scratch buffer that is
// scribbled over after Parse returns (so the parser must copy what it keeps).
// It returns the rendered commands and the rendered final error.
func feed(p *Parser, chunks [][]byte) ([]string, string) {
	var out []string
	var scratch []byte
	h := func(c *Command) error {
		out = append(out, render(c))
		checkInvariants(p, c)
		return nil
	}
	for _, ch := range chunks {
		scratch = append(scratch[:0], ch...)
		err := p.Parse(scratch, h)
		for i := range scratch {
			scratch[i] = '#'
		}
		if err != nil {
			return out, renderErr(err)
		}
	}
	return out, ""
}

// checkInvariants panics when a delivered command breaks a documented rule.
func checkInvariants(p *Parser, c *Command) {
	if len(c.Data) > p.maxMessageSize() {
		panic("data beyond MaxMessageSize")
	}
	if len(c.Line) >= MaxLineLen {
		panic("line beyond MaxLineLen")
	}
	if c.Err == nil {
		if c.Topic != nil && !ValidNameBytes(c.Topic) {
			panic("invalid topic delivered")
		}
		if c.Group != nil && !ValidNameBytes(c.Group) {
			panic("invalid group delivered")
		}
		switch c.Op {
		case OpUnknown:
			panic("OpUnknown without Err")
		case OpPut:
			if c.Topic == nil || c.Partition < -1 {
				panic("bad put")
			}
			if c.HasChecksum && c.Checksum != -1 && MessageChecksum(c.Data) != c.Checksum {
				panic("checksum not verified")
			}
		case OpGet:
			if c.Topic == nil || c.Group == nil || c.Partition < 0 || c.Offset < 0 || c.MaxSize < 1 || c.MaxWaitMs < 0 {
				panic("bad get")
			}
		}
	} else if c.Err.Fatal {
		panic("fatal error delivered as a command")
	}
}

func oneChunk(s string) [][]byte { return [][]byte{[]byte(s)} }

func byteChunks(s string) [][]byte {
	out := make([][]byte, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = []byte{s[i]}
	}
	return out
}

func ck(s string) string { return strconv.Itoa(int(MessageChecksum([]byte(s)))) }

type parseCase struct {
	name string
	in   string
	max  int      // MaxMessageSize (0 = default)
	want []string // rendered commands; a trailing '*' matches a prefix
	err  string   // rendered final error; a trailing '*' matches a prefix
}

var long255 = strings.Repeat("t", 255)

var parseCases = []parseCase{
	// ---- put, all forms
	{name: "put 6-field", in: "put test 0 5 0 1\r\nhello",
		want: []string{`put o=1 topic=test p=0 data="hello"`}},
	{name: "put python/ruby min opaque", in: "put test 0 5 0 -2147483648\r\nhello",
		want: []string{`put o=-2147483648 topic=test p=0 data="hello"`}},
	{name: "put 7-field checksum", in: "put test 3 5 4 " + ck("hello") + " 7\r\nhello",
		want: []string{`put o=7 topic=test p=3 flag=4 ck=` + ck("hello") + ` data="hello"`}},
	{name: "put 7-field unchecked", in: "put test 0 5 0 -1 7\r\nhello",
		want: []string{`put o=7 topic=test p=0 ck=-1 data="hello"`}},
	{name: "put 7-field txKey", in: "put test 0 5 0 TX:s1:1 7\r\nhello",
		want: []string{`put o=7 topic=test p=0 tx=TX:s1:1 data="hello"`}},
	{name: "put 7-field XID txKey", in: "put test 0 2 0 XID:1:ab:cd:q 7\r\nhi",
		want: []string{`put o=7 topic=test p=0 tx=XID:1:ab:cd:q data="hi"`}},
	{name: "put 8-field", in: "put test 2 5 3 " + ck("hello") + " TX:s1:2 8\r\nhello",
		want: []string{`put o=8 topic=test p=2 flag=3 ck=` + ck("hello") + ` tx=TX:s1:2 data="hello"`}},
	{name: "put 8-field unchecked", in: "put test 2 5 3 -1 TX:s1:2 8\r\nhello",
		want: []string{`put o=8 topic=test p=2 flag=3 ck=-1 tx=TX:s1:2 data="hello"`}},
	{name: "put partition -1", in: "put test -1 1 0 2\r\nx",
		want: []string{`put o=2 topic=test p=-1 data="x"`}},
	{name: "put empty data", in: "put test 0 0 0 9\r\nversion 1\r\n",
		want: []string{`put o=9 topic=test p=0 data=""`, `version o=1`}},
	{name: "put negative flag", in: "put test 0 1 -5 2\r\nx",
		want: []string{`put o=2 topic=test p=0 flag=-5 data="x"`}},
	{name: "put LF only", in: "put test 0 5 0 1\nhello",
		want: []string{`put o=1 topic=test p=0 data="hello"`}},
	{name: "put extra spaces", in: "  put  test   0 5 0 1  \r\nhello",
		want: []string{`put o=1 topic=test p=0 data="hello"`}},
	{name: "put upper case", in: "PUT test 0 5 0 1\r\nhello",
		want: []string{`put o=1 topic=test p=0 data="hello"`}},
	{name: "put data holds CRLF", in: "put test 0 7 0 1\r\nab\r\ncd\r\nversion 2\r\n",
		want: []string{`put o=1 topic=test p=0 data="ab\r\ncd\r"`, `version o=2`}},
	{name: "put data with properties and binary", in: "put test 0 13 2 1\r\ntag=a\n\x00\xff\r\n\x01\x02\x03",
		want: []string{`put o=1 topic=test p=0 flag=2 data="tag=a\n\x00\xff\r\n\x01\x02\x03"`}},
	{name: "put name charset", in: "put %RETRY%g-1_a.b 0 1 0 1\r\nx",
		want: []string{`put o=1 topic=%RETRY%g-1_a.b p=0 data="x"`}},
	{name: "put topic 255", in: "put " + long255 + " 0 1 0 1\r\nx",
		want: []string{`put o=1 topic=` + long255 + ` p=0 data="x"`}},
	{name: "put pipelined", in: "put a 0 1 0 1\r\nxput b 1 2 0 2\r\nyyput c 2 0 0 3\r\n",
		want: []string{`put o=1 topic=a p=0 data="x"`, `put o=2 topic=b p=1 data="yy"`, `put o=3 topic=c p=2 data=""`}},
	{name: "telnet session", in: "put test 0 5 0 1\r\nhello\r\nget test g 0 0 1048576 2\r\n",
		want: []string{`put o=1 topic=test p=0 data="hello"`, `get o=2 topic=test group=g p=0 max=1048576`}},
	{name: "put at max size", in: "put t 0 4 0 1\r\nabcd", max: 4,
		want: []string{`put o=1 topic=t p=0 data="abcd"`}},

	// ---- get / offset
	{name: "get 7", in: "get test g 0 10 1048576 5\r\n",
		want: []string{`get o=5 topic=test group=g p=0 off=10 max=1048576`}},
	{name: "get 8", in: "get test g 1 0 100 5 3000\r\n",
		want: []string{`get o=5 topic=test group=g p=1 max=100 wait=3000`}},
	{name: "get 9", in: "get test g 1 0 100 5 0 a||b\r\n",
		want: []string{`get o=5 topic=test group=g p=1 max=100 tags=a||b`}},
	{name: "get star", in: "get test g 1 0 100 -5 10 *\r\n",
		want: []string{`get o=-5 topic=test group=g p=1 max=100 wait=10 tags=*`}},
	{name: "get max offset", in: "get t g 0 9223372036854775807 1 1\r\n",
		want: []string{`get o=1 topic=t group=g p=0 off=9223372036854775807 max=1`}},
	{name: "offset", in: "offset test g 3 99 4\r\n",
		want: []string{`offset o=4 topic=test group=g p=3 off=99`}},

	// ---- stats / version / quit
	{name: "stats", in: "stats\r\n", want: []string{`stats o=-`}},
	{name: "stats opaque", in: "stats 5\r\n", want: []string{`stats o=5`}},
	{name: "stats java form", in: "stats  5\r\n", want: []string{`stats o=5`}},
	{name: "stats item", in: "stats topics\r\n", want: []string{`stats o=- item=topics`}},
	{name: "stats item opaque", in: "stats offsets 6\r\n", want: []string{`stats o=6 item=offsets`}},
	{name: "stats numeric topic", in: "stats 123 6\r\n", want: []string{`stats o=6 item=123`}},
	{name: "stats mixed", in: "stats 12a\r\n", want: []string{`stats o=- item=12a`}},
	{name: "version", in: "version\r\n", want: []string{`version o=-`}},
	{name: "version opaque", in: "version 7\r\n", want: []string{`version o=7`}},
	{name: "version min opaque", in: "version -2147483648\r\n", want: []string{`version o=-2147483648`}},
	{name: "quit", in: "version 1\r\nquit\r\nversion 2\r\n",
		want: []string{`version o=1`, `quit o=-`}, err: ErrQuit.Error()},
	{name: "quit extra", in: "quit now\r\n", want: []string{`quit o=-`}, err: ErrQuit.Error()},

	// ---- transaction / sync
	{name: "transaction 5", in: "transaction TX:s:1 s BEGIN 3\r\n",
		want: []string{`transaction o=3 tx=TX:s:1 args=["TX:s:1" "s" "BEGIN" "3"]`}},
	{name: "transaction 6", in: "transaction TX:s:1 s BEGIN 30 3\r\n",
		want: []string{`transaction o=3 tx=TX:s:1 args=["TX:s:1" "s" "BEGIN" "30" "3"]`}},
	{name: "transaction 7", in: "transaction XID:1:ab:cd:u s PREPARE 30 u 3\r\n",
		want: []string{`transaction o=3 tx=XID:1:ab:cd:u args=["XID:1:ab:cd:u" "s" "PREPARE" "30" "u" "3"]`}},
	{name: "sync 7", in: "sync test 1 5 0 77 4\r\nhello",
		want: []string{`sync o=4 topic=test p=1 data="hello" id=77`}},
	{name: "sync 8", in: "sync test 1 5 0 77 " + ck("hello") + " 4\r\nhello",
		want: []string{`sync o=4 topic=test p=1 ck=` + ck("hello") + ` data="hello" id=77`}},

	// ---- extensions
	{name: "seek", in: "seek test 2 1700000000000 9\r\n",
		want: []string{`seek o=9 topic=test p=2 ts=1700000000000`}},
	{name: "query id", in: "query id 844424930131968 9\r\n",
		want: []string{`query id o=9 id=844424930131968`}},
	{name: "query key", in: "query key test order-1 10 9\r\n",
		want: []string{`query key o=9 topic=test key=order-1 num=10`}},
	{name: "query upper", in: "QUERY ID 5 9\r\n", want: []string{`query id o=9 id=5`}},

	// ---- blank lines
	{name: "blank lines", in: "\r\n\n   \r\n\r\nversion 1\r\n\r\n",
		want: []string{`version o=1`}},

	// ---- non-fatal bad requests
	{name: "unknown command", in: "foo bar 5\r\nversion 1\r\n",
		want: []string{`unknown o=5 !400 unknown command "foo"`, `version o=1`}},
	{name: "unknown word", in: "hello\r\n", want: []string{`unknown o=- !400 unknown command "hello"`}},
	{name: "unknown printable", in: "{}[]\r\n", want: []string{`unknown o=- !400 unknown command*`}},
	{name: "http request", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		want: []string{`get o=- !400 wrong number of fields for get: 3*`, `unknown o=- !400 unknown command "Host:"`}},
	{name: "get too few", in: "get t g 0 0 100\r\n", want: []string{`get o=100 !400 wrong number of fields*`}},
	{name: "get where", in: "get t g 0 0 100 1 2 * tag+=+'paid'%20AND+a>1\r\n",
		want: []string{`get o=1 topic=t group=g p=0 max=100 wait=2 tags=* where=tag+=+'paid'%20AND+a>1`}},
	{name: "get where control", in: "get t g 0 0 100 1 2 * a\x01\r\n", want: []string{`get o=1 !400 control character*`}},
	{name: "get too many", in: "get t g 0 0 100 1 2 * x y\r\n", want: []string{`get o=- !400 wrong number of fields*`}},
	{name: "get way too many", in: "get" + strings.Repeat(" 1", 40) + "\r\n", want: []string{`get o=- !400 wrong number of fields for get: 41*`}},
	{name: "offset too few", in: "offset t g 0 0\r\n", want: []string{`offset o=0 !400 wrong number*`}},
	{name: "version too many", in: "version 1 2\r\n", want: []string{`version o=2 !400 wrong number*`}},
	{name: "version bad opaque", in: "version abc\r\n", want: []string{`version o=- !400 invalid opaque "abc"`}},
	{name: "version opaque overflow", in: "version 2147483648\r\n", want: []string{`version o=- !400 invalid opaque*`}},
	{name: "stats too many", in: "stats a b c\r\n", want: []string{`stats o=- !400 wrong number*`}},
	{name: "stats bad opaque", in: "stats a b\r\n", want: []string{`stats o=- !400 invalid opaque "b"`}},
	{name: "seek too few", in: "seek t 0 5\r\n", want: []string{`seek o=5 !400 wrong number*`}},
	{name: "seek negative ts", in: "seek t 0 -5 1\r\n", want: []string{`seek o=1 !400 invalid timestamp "-5": must be >= 0`}},
	{name: "query none", in: "query\r\n", want: []string{`unknown o=- !400 unknown query type ""*`}},
	{name: "query bad type", in: "query foo 1\r\n", want: []string{`unknown o=1 !400 unknown query type "foo"*`}},
	{name: "query id too few", in: "query id 5\r\n", want: []string{`query id o=5 !400 wrong number*`}},
	{name: "query id negative", in: "query id -5 1\r\n", want: []string{`query id o=1 !400 invalid msgId*`}},
	{name: "query key maxNum 0", in: "query key t k 0 1\r\n", want: []string{`query key o=1 !400 invalid maxNum "0": must be >= 1`}},
	{name: "query key bad topic", in: "query key a/b k 1 1\r\n", want: []string{`query key o=1 !400 invalid topic name "a/b"`}},
	{name: "transaction too few", in: "transaction a b 5\r\n", want: []string{`transaction o=5 !400 wrong number*`}},
	{name: "transaction too many", in: "transaction a b c d e f 5\r\n", want: []string{`transaction o=5 !400 wrong number*`}},
	{name: "transaction bad opaque", in: "transaction a b c x\r\n", want: []string{`transaction o=- !400 invalid opaque*`}},
	{name: "get non-numeric partition", in: "get t g x 0 100 5\r\n",
		want: []string{`get o=5 !400 invalid partition "x": not a decimal integer`}},
	{name: "get negative partition", in: "get t g -1 0 100 5\r\n",
		want: []string{`get o=5 !400 invalid partition "-1": must be >= 0`}},
	{name: "get negative offset", in: "get t g 0 -1 100 5\r\n",
		want: []string{`get o=5 !400 invalid offset "-1": must be >= 0`}},
	{name: "get offset overflow", in: "get t g 0 9223372036854775808 100 5\r\n",
		want: []string{`get o=5 !400 invalid offset*`}},
	{name: "get maxSize 0", in: "get t g 0 0 0 5\r\n", want: []string{`get o=5 !400 invalid maxSize "0": must be >= 1`}},
	{name: "get maxSize overflow", in: "get t g 0 0 2147483648 5\r\n", want: []string{`get o=5 !400 invalid maxSize*`}},
	{name: "get negative wait", in: "get t g 0 0 1 5 -1\r\n", want: []string{`get o=5 !400 invalid maxWaitMs*`}},
	{name: "get wait max int32", in: "get t g 0 0 1 5 2147483647\r\n", want: []string{`get o=5 topic=t group=g p=0 max=1 wait=2147483647`}},
	{name: "get wait over int32", in: "get t g 0 0 1 5 2147483648\r\n", want: []string{`get o=5 !400 invalid maxWaitMs "2147483648": must be <= 2147483647`}},
	{name: "get wait 2^63-1", in: "get t g 0 0 1 5 9223372036854775807\r\n", want: []string{`get o=5 !400 invalid maxWaitMs*`}},
	{name: "get plus sign", in: "get t g +1 0 1 5\r\n", want: []string{`get o=5 !400 invalid partition "+1"*`}},
	{name: "get bad opaque", in: "get t g 0 0 1 x\r\n", want: []string{`get o=- !400 invalid opaque "x"`}},
	{name: "get bad group", in: "get t g/h 0 0 1 5\r\n", want: []string{`get o=5 !400 invalid group name "g/h"`}},
	{name: "get control in tags", in: "get t g 0 0 1 5 0 a\x01b\r\n", want: []string{`get o=5 !400 control character in command line`}},
	{name: "offset negative", in: "offset t g 0 -3 5\r\n", want: []string{`offset o=5 !400 invalid offset*`}},
	{name: "trailing CR CR", in: "version 1\r\r\n", want: []string{`version o=- !400 invalid opaque "1\r"`}},

	// put with a bad field but a usable length: exactly its data is skipped
	{name: "put topic slash", in: "put a/b 0 5 0 1\r\nhelloversion 2\r\n",
		want: []string{`put o=1 !400 invalid topic name "a/b"`, `version o=2`}},
	{name: "put topic dotdot", in: "put .. 0 5 0 1\r\nhelloversion 2\r\n",
		want: []string{`put o=1 !400 invalid topic name ".."`, `version o=2`}},
	{name: "put topic dot", in: "put . 0 1 0 1\r\nx", want: []string{`put o=1 !400 invalid topic name "."`}},
	{name: "put topic 256", in: "put " + long255 + "t 0 1 0 1\r\nx", want: []string{`put o=1 !400 invalid topic name*`}},
	{name: "put topic control", in: "put a\x01b 0 5 0 1\r\nhello", want: []string{`put o=1 !400 invalid topic name "a\x01b"`}},
	{name: "put topic DEL", in: "put a\x7fb 0 5 0 1\r\nhello", want: []string{`put o=1 !400 invalid topic name*`}},
	{name: "put topic utf8", in: "put caf\xc3\xa9 0 5 0 1\r\nhello", want: []string{`put o=1 !400 invalid topic name*`}},
	{name: "put topic with space", in: "put my topic 0 5 0 1\r\nhello\r\n",
		want: []string{`put o=1 !400 invalid partition "topic"*`, `unknown o=- !400 unknown command "hello"`}},
	{name: "put partition -2", in: "put t -2 1 0 1\r\nx", want: []string{`put o=1 !400 invalid partition "-2": must be >= -1`}},
	{name: "put partition text", in: "put t p 1 0 1\r\nx", want: []string{`put o=1 !400 invalid partition "p"*`}},
	{name: "put flag text", in: "put t 0 1 f 1\r\nx", want: []string{`put o=1 !400 invalid flag "f"*`}},
	{name: "put flag overflow", in: "put t 0 1 4294967295 1\r\nx", want: []string{`put o=1 !400 invalid flag*`}},
	{name: "put bad opaque", in: "put t 0 1 0 x\r\nx", want: []string{`put o=- !400 invalid opaque "x"`}},
	{name: "put 5 fields", in: "put t 0 5 0\r\nhelloversion 2\r\n",
		want: []string{`put o=0 !400 wrong number of fields for put: 5*`, `version o=2`}},
	{name: "put 4 fields", in: "put t 0 5\r\nhelloversion 2\r\n",
		want: []string{`put o=5 !400 wrong number of fields for put: 4*`, `version o=2`}},
	{name: "put 9 fields", in: "put t 0 5 0 -1 TX:a 1 2\r\nhelloversion 2\r\n",
		want: []string{`put o=2 !400 wrong number of fields for put: 9*`, `version o=2`}},
	{name: "put checksum mismatch", in: "put t 0 5 0 12345 3\r\nhelloversion 4\r\n",
		want: []string{`put o=3 !400 checksum mismatch: data has ` + ck("hello") + `, header says 12345`, `version o=4`}},
	{name: "put 8-field checksum mismatch", in: "put t 0 5 0 0 TX:a:1 3\r\nhello",
		want: []string{`put o=3 !400 checksum mismatch*`}},
	{name: "put checksum -2", in: "put t 0 5 0 -2 3\r\nhello", want: []string{`put o=3 !400 invalid checksum "-2"*`}},
	{name: "put checksum junk", in: "put t 0 5 0 12a 3\r\nhello", want: []string{`put o=3 !400 invalid checksum "12a"*`}},
	{name: "put 8-field checksum junk", in: "put t 0 5 0 abc TX:1 3\r\nhello", want: []string{`put o=3 !400 invalid checksum "abc"*`}},
	{name: "put txKey control", in: "put t 0 5 0 TX\x01a 3\r\nhello", want: []string{`put o=3 !400 control character in command line`}},
	{name: "put tab in line", in: "put t\tx 0 5 0 3\r\nhello", want: []string{`put o=3 !400 invalid topic name "t\tx"`}},
	{name: "sync 6 fields", in: "sync t 0 5 0 1\r\nhello", want: []string{`sync o=1 !400 wrong number*`}},
	{name: "sync bad msgId", in: "sync t 0 5 0 x 1\r\nhello", want: []string{`sync o=1 !400 invalid msgId*`}},
	{name: "sync checksum mismatch", in: "sync t 0 5 0 7 1 2\r\nhello", want: []string{`sync o=2 !400 checksum mismatch*`}},

	// ---- fatal
	{name: "line too long", in: "put " + strings.Repeat("x", 5000),
		err: `FATAL=true o=- !400 command line longer than 4096 bytes`},
	{name: "line too long after commands", in: "version 1\r\n" + strings.Repeat("v", 4097),
		want: []string{`version o=1`}, err: `FATAL=true o=- !400 command line longer*`},
	{name: "line of 4096 with CRLF", in: "stats " + strings.Repeat("i", 4096-len("stats  1\r\n")) + " 1\r\n",
		want: []string{`stats o=1 item=` + strings.Repeat("i", 4096-len("stats  1\r\n"))}},
	{name: "line of 4096 with LF", in: "stats " + strings.Repeat("i", 4096-len("stats  1\n")) + " 1\n",
		want: []string{`stats o=1 item=` + strings.Repeat("i", 4096-len("stats  1\n"))}},
	{name: "line of 4097 with CRLF", in: "stats " + strings.Repeat("i", 4097-len("stats  1\r\n")) + " 1\r\n",
		err: `FATAL=true o=- !400 command line longer*`},
	{name: "line of spaces", in: strings.Repeat(" ", 5000), err: `FATAL=true o=- !400 command line longer*`},
	{name: "put length too large", in: "put t 0 5000000 0 1\r\n",
		err: `FATAL=true o=1 !400 data length 5000000 exceeds maxMessageSize 4194304`},
	{name: "put length over custom max", in: "put t 0 5 0 1\r\nhello", max: 4,
		err: `FATAL=true o=1 !400 data length 5 exceeds maxMessageSize 4`},
	{name: "put length huge", in: "put t 0 99999999999999999999 0 1\r\n",
		err: `FATAL=true o=1 !400 invalid data length*`},
	{name: "put length negative", in: "put t 0 -5 0 1\r\nhello",
		err: `FATAL=true o=1 !400 invalid data length "-5"*`},
	{name: "put length text", in: "put t 0 abc 0 1\r\nhello",
		err: `FATAL=true o=1 !400 invalid data length "abc"*`},
	{name: "put length text wrong count", in: "put t 0 abc 0\r\nhello",
		err: `FATAL=true o=- !400 invalid data length "abc"*`},
	{name: "put without length", in: "put t 0\r\nhello",
		err: `FATAL=true o=- !400 put without a data length*`},
	{name: "put alone", in: "version 1\r\nput\r\n",
		want: []string{`version o=1`}, err: `FATAL=true o=- !400 put without a data length*`},
	{name: "sync length too large", in: "sync t 0 5000000 0 1 1\r\n",
		err: `FATAL=true o=1 !400 data length 5000000 exceeds*`},
	{name: "tls hello", in: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		err: `FATAL=true o=- !400 binary data where a command was expected`},
	{name: "nul", in: "\x00", err: `FATAL=true o=- !400 binary data*`},
	{name: "8-bit command", in: "p\xffut t 0 1 0 1\r\nx", err: `FATAL=true o=- !400 binary data*`},
	{name: "binary after valid", in: "version 1\r\n\x80\x81", want: []string{`version o=1`}, err: `FATAL=true o=- !400 binary data*`},
	{name: "tab in command", in: "get\tt g 0 0 1 1\r\n", err: `FATAL=true o=- !400 binary data*`},
}

func match(want, got string) bool {
	if strings.HasSuffix(want, "*") {
		return strings.HasPrefix(got, want[:len(want)-1])
	}
	return want == got
}

func checkTranscript(t *testing.T, what string, want []string, wantErr string, got []string, gotErr string) {
	t.Helper()
	ok := len(got) == len(want) && match(wantErr, gotErr)
	for i := 0; ok && i < len(want); i++ {
		ok = match(want[i], got[i])
	}
	if !ok {
		t.Fatalf("%s:\n got  %q err %q\n want %q err %q", what, got, gotErr, want, wantErr)
	}
}

func TestParserCases(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Parser{MaxMessageSize: tc.max}
			got, gotErr := feed(p, oneChunk(tc.in))
			checkTranscript(t, "whole", tc.want, tc.err, got, gotErr)
			if gotErr == "" && p.Pending() {
				t.Fatalf("parser pending after a complete stream")
			}
		})
	}
}

// TestParserSplits feeds every case in every 2-way split, in 3 pieces and
// byte by byte: the transcript must be the one of the whole stream.
func TestParserSplits(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			whole, wholeErr := feed(&Parser{MaxMessageSize: tc.max}, oneChunk(tc.in))
			in := []byte(tc.in)
			for i := 0; i <= len(in); i++ {
				got, gotErr := feed(&Parser{MaxMessageSize: tc.max}, [][]byte{in[:i], in[i:]})
				if !equalTranscript(whole, wholeErr, got, gotErr) {
					t.Fatalf("split at %d:\n got  %q %q\n want %q %q", i, got, gotErr, whole, wholeErr)
				}
			}
			if len(in) <= 300 {
				for i := 0; i <= len(in); i++ {
					for j := i; j <= len(in); j++ {
						got, gotErr := feed(&Parser{MaxMessageSize: tc.max}, [][]byte{in[:i], in[i:j], in[j:]})
						if !equalTranscript(whole, wholeErr, got, gotErr) {
							t.Fatalf("split at %d,%d:\n got  %q %q\n want %q %q", i, j, got, gotErr, whole, wholeErr)
						}
					}
				}
			}
			got, gotErr := feed(&Parser{MaxMessageSize: tc.max}, byteChunks(tc.in))
			if !equalTranscript(whole, wholeErr, got, gotErr) {
				t.Fatalf("byte by byte:\n got  %q %q\n want %q %q", got, gotErr, whole, wholeErr)
			}
		})
	}
}

func equalTranscript(a []string, aErr string, b []string, bErr string) bool {
	if aErr != bErr || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParserAllCasesConcatenated parses all non-fatal, non-quit cases as one
// pipelined stream, whole and byte by byte.
func TestParserAllCasesConcatenated(t *testing.T) {
	var stream strings.Builder
	var want []string
	for _, tc := range parseCases {
		if tc.err != "" || tc.max != 0 {
			continue
		}
		whole, _ := feed(&Parser{}, oneChunk(tc.in))
		stream.WriteString(tc.in)
		want = append(want, whole...)
	}
	got, gotErr := feed(&Parser{}, oneChunk(stream.String()))
	if !equalTranscript(want, "", got, gotErr) {
		t.Fatalf("whole stream: got %d commands, err %q; want %d", len(got), gotErr, len(want))
	}
	got, gotErr = feed(&Parser{}, byteChunks(stream.String()))
	if !equalTranscript(want, "", got, gotErr) {
		t.Fatalf("byte by byte: got %d commands, err %q; want %d", len(got), gotErr, len(want))
	}
}

func TestParserZeroCopyData(t *testing.T) {
	buf := []byte("put test 0 5 0 1\r\nhello")
	var p Parser
	n := 0
	err := p.Parse(buf, func(c *Command) error {
		n++
		if &c.Data[0] != &buf[18] || cap(c.Data) != 5 {
			t.Errorf("put data is not a capped sub-slice of the read buffer")
		}
		if &c.Topic[0] != &buf[4] {
			t.Errorf("topic is not a sub-slice of the read buffer")
		}
		if string(c.Line) != "put test 0 5 0 1" || c.Args != nil {
			t.Errorf("line %q args %q", c.Line, c.Args)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("n=%d err=%v", n, err)
	}
}

func TestParserFatalSticky(t *testing.T) {
	var p Parser
	err := p.Parse([]byte("put t 0 -1 0 1\r\n"), func(*Command) error { return nil })
	var e *Error
	if !errors.As(err, &e) || !e.Fatal || e.Code != 400 || e.Opaque != 1 || !e.HasOpaque {
		t.Fatalf("err = %#v", err)
	}
	called := false
	if err2 := p.Parse([]byte("version 1\r\n"), func(*Command) error { called = true; return nil }); err2 != err || called {
		t.Fatalf("fatal not sticky: %v called=%v", err2, called)
	}
	p.Reset()
	if err := p.Parse([]byte("version 1\r\n"), func(*Command) error { called = true; return nil }); err != nil || !called {
		t.Fatalf("after Reset: %v called=%v", err, called)
	}
}

func TestParserHandlerError(t *testing.T) {
	var p Parser
	stop := errors.New("stop")
	var seen []int32
	h := func(c *Command) error {
		seen = append(seen, c.Opaque)
		if c.Opaque == 2 {
			return stop
		}
		return nil
	}
	if err := p.Parse([]byte("version 1\r\nversion 2\r\nversion 3\r\n"), h); err != stop {
		t.Fatalf("err = %v", err)
	}
	if len(seen) != 2 {
		t.Fatalf("seen %v", seen)
	}
	// The parser is at a command boundary: it can go on.
	if err := p.Parse([]byte("version 4\r\n"), h); err != nil || seen[2] != 4 {
		t.Fatalf("resume: %v %v", err, seen)
	}
	// Handler error while a split put completes.
	p = Parser{}
	if err := p.Parse([]byte("put t 0 4 0 2\r\nab"), h); err != nil {
		t.Fatal(err)
	}
	if err := p.Parse([]byte("cdversion 9\r\n"), h); err != stop {
		t.Fatalf("err = %v", err)
	}
	if p.Pending() {
		t.Fatal("pending after a delivered command")
	}
}

func TestParserPending(t *testing.T) {
	var p Parser
	nop := func(*Command) error { return nil }
	steps := []struct {
		in      string
		pending bool
	}{
		{"vers", true}, {"ion 1\r\n", false}, {"put t 0 5 0 1\r\n", true}, {"hel", true}, {"lo", false},
		{"put a/b 0 5 0 1\r\nhe", true}, {"llo", false}, {"\r\n", false},
	}
	for _, s := range steps {
		if err := p.Parse([]byte(s.in), nop); err != nil {
			t.Fatal(err)
		}
		if p.Pending() != s.pending {
			t.Fatalf("after %q: Pending = %v", s.in, p.Pending())
		}
	}
}

// A client announcing a big message and sending little must cost what it sent.
func TestParserDataGrowsWithInput(t *testing.T) {
	var p Parser
	nop := func(*Command) error { return nil }
	if err := p.Parse([]byte("put t 0 4000000 0 1\r\n0123456789"), nop); err != nil {
		t.Fatal(err)
	}
	if cap(p.data) > 4096 {
		t.Fatalf("buffered %d bytes for 10 received", cap(p.data))
	}
	chunk := bytes.Repeat([]byte("x"), 100000)
	if err := p.Parse(chunk, nop); err != nil {
		t.Fatal(err)
	}
	if cap(p.data) > 2*100010 {
		t.Fatalf("buffered %d bytes for 100010 received", cap(p.data))
	}
	// Finish it: the big buffer is not retained.
	n := 0
	rest := bytes.Repeat([]byte("y"), 4000000-100010)
	if err := p.Parse(rest, func(c *Command) error { n = len(c.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 4000000 || p.data != nil {
		t.Fatalf("n=%d retained=%d", n, cap(p.data))
	}
	// A small split message keeps its buffer for reuse.
	p.Parse([]byte("put t 0 10 0 1\r\n01234"), nop)
	p.Parse([]byte("56789"), nop)
	if cap(p.data) == 0 || cap(p.data) > maxRetainedData {
		t.Fatalf("small buffer not retained: %d", cap(p.data))
	}
}

// With RetainData, a big split data block keeps its buffer for the next
// one (no allocation per frame) until ReleaseData; the next block must not
// see the previous one's bytes.
func TestParserRetainData(t *testing.T) {
	p := Parser{RetainData: 256 << 10}
	var got []string
	h := func(c *Command) error { got = append(got, string(c.Data)); return nil }
	for i, b := range []byte("ab") {
		data := bytes.Repeat([]byte{b}, 100000)
		frame := append([]byte("put t 0 100000 0 "+strconv.Itoa(i)+"\r\n"), data...)
		for len(frame) > 0 { // split: 4 KiB per Parse
			k := min(4096, len(frame))
			if err := p.Parse(frame[:k], h); err != nil {
				t.Fatal(err)
			}
			frame = frame[k:]
		}
		if !p.RetainsData() || cap(p.data) < 100000 {
			t.Fatalf("block %d: retained %d bytes", i, cap(p.data))
		}
	}
	if len(got) != 2 || got[0] != strings.Repeat("a", 100000) || got[1] != strings.Repeat("b", 100000) {
		t.Fatalf("got %d blocks", len(got))
	}
	// Released only between commands.
	if err := p.Parse([]byte("put t 0 100000 0 3\r\nxyz"), h); err != nil {
		t.Fatal(err)
	}
	p.ReleaseData()
	if !p.RetainsData() {
		t.Fatal("ReleaseData dropped the buffer of a block in progress")
	}
	if err := p.Parse(bytes.Repeat([]byte("x"), 100000-3), h); err != nil {
		t.Fatal(err)
	}
	p.ReleaseData()
	if p.RetainsData() || p.data != nil {
		t.Fatalf("ReleaseData kept %d bytes", cap(p.data))
	}
	// Above RetainData the buffer is dropped after use, as by default.
	p.RetainData = 50000
	if err := p.Parse([]byte("put t 0 100000 0 4\r\nxyz"), h); err != nil {
		t.Fatal(err)
	}
	if err := p.Parse(bytes.Repeat([]byte("x"), 100000-3), h); err != nil {
		t.Fatal(err)
	}
	if p.data != nil {
		t.Fatalf("kept %d bytes above RetainData", cap(p.data))
	}
}

func TestParserAllocs(t *testing.T) {
	stream := []byte("put test 0 100 0 " + ck(strings.Repeat("a", 100)) + " 1\r\n" + strings.Repeat("a", 100) +
		"put test 0 5 0 1\r\nhello" +
		"get test group 0 12345 1048576 2 3000 a||b\r\n" +
		"offset test group 0 99 3\r\nversion 4\r\nstats topics 5\r\nseek test 1 1700000000000 6\r\n" +
		"query id 123 7\r\nquery key test k 10 8\r\ntransaction TX:a:1 s BEGIN 9\r\n" +
		"sync test 0 5 0 77 10\r\nhello")
	var p Parser
	n := 0
	h := func(c *Command) error { n++; return nil }
	allocs := testing.AllocsPerRun(1000, func() {
		if err := p.Parse(stream, h); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Parse allocates %.1f times per stream", allocs)
	}
	if n == 0 || n%11 != 0 {
		t.Fatalf("n = %d", n)
	}
	// Split lines and split data reuse the parser's buffers. Errors are
	// checked: a sticky fatal error would make every later Parse a no-op
	// that trivially does not allocate.
	// The first put's header is 30 bytes and its data 100: cut mid-line, at
	// the start of the data, mid-data and inside the second put's line.
	for _, cut := range []int{10, 30, 80, 140} {
		a, b := stream[:cut], stream[cut:]
		parseSplit := func() {
			if err := p.Parse(a, h); err != nil {
				t.Fatal(err)
			}
			if err := p.Parse(b, h); err != nil {
				t.Fatal(err)
			}
		}
		parseSplit()
		n = 0
		allocs = testing.AllocsPerRun(1000, parseSplit)
		if allocs != 0 {
			t.Fatalf("split at %d: Parse allocates %.1f times", cut, allocs)
		}
		if n == 0 || n%11 != 0 {
			t.Fatalf("split at %d: n = %d", cut, n)
		}
	}
}

func TestValidName(t *testing.T) {
	good := []string{"a", "test", "%RETRY%g", "%DLQ%g", "a.b", "...", ".a", "a..", "A-Z_0.9", long255}
	bad := []string{"", ".", "..", "a/b", "a b", "a\x00", "a\n", "é", long255 + "x", "a:b", "a*"}
	for _, s := range good {
		if !ValidName(s) || !ValidNameBytes([]byte(s)) {
			t.Errorf("%q should be valid", s)
		}
	}
	for _, s := range bad {
		if ValidName(s) || ValidNameBytes([]byte(s)) {
			t.Errorf("%q should be invalid", s)
		}
	}
}

func TestParseInt(t *testing.T) {
	cases := []struct {
		in string
		v  int64
		ok bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"007", 7, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"-9223372036854775808", -1 << 63, true}, {"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false}, {"18446744073709551615", 0, false}, {"", 0, false},
		{"-", 0, false}, {"+1", 0, false}, {"1a", 0, false}, {" 1", 0, false}, {"99999999999999999999", 0, false},
	}
	for _, c := range cases {
		v, ok := parseInt64([]byte(c.in))
		if v != c.v || ok != c.ok {
			t.Errorf("parseInt64(%q) = %d %v", c.in, v, ok)
		}
	}
	for _, s := range []string{"2147483647", "-2147483648"} {
		if _, ok := parseInt32([]byte(s)); !ok {
			t.Errorf("parseInt32(%q) failed", s)
		}
	}
	if v, ok := parseInt32([]byte("000000000001")); !ok || v != 1 {
		t.Errorf("parseInt32 leading zeros: %d %v", v, ok)
	}
	for _, s := range []string{"2147483648", "-2147483649"} {
		if _, ok := parseInt32([]byte(s)); ok {
			t.Errorf("parseInt32(%q) should fail", s)
		}
	}
	for _, v := range []int64{0, 1, 9, 10, -1, -10, 1<<63 - 1, -1 << 63, 123456} {
		if intLen(v) != len(strconv.FormatInt(v, 10)) {
			t.Errorf("intLen(%d) = %d", v, intLen(v))
		}
	}
}

func TestOpString(t *testing.T) {
	if OpQueryKey.String() != "query key" || Op(200).String() != "op(200)" {
		t.Fatal(OpQueryKey.String(), Op(200).String())
	}
	e := &Error{Code: 400, Msg: "x", Fatal: true}
	if e.Error() != "protocol: fatal 400: x" {
		t.Fatal(e.Error())
	}
}
