package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// ReplyKind tells a `result` from a `value` reply.
type ReplyKind uint8

const (
	ReplyResult ReplyKind = iota + 1 // result <code> <len> <opaque>\r\n<body>
	ReplyValue                       // value <len> <opaque>\r\n<records>
	ReplyCheck                       // check <msgId> <opaque>: a request from the broker (txparse.go)
)

func (k ReplyKind) String() string {
	switch k {
	case ReplyResult:
		return "result"
	case ReplyValue:
		return "value"
	case ReplyCheck:
		return "check"
	}
	return "reply(" + strconv.Itoa(int(k)) + ")"
}

// Reply is one broker reply. For a value reply Code is StatusSuccess and Body
// holds whole records (iterate them with NewRecordIterator).
type Reply struct {
	Kind   ReplyKind
	Code   int
	Opaque int32
	Body   []byte // ReplyCheck: the half message's id in decimal
}

// DefaultMaxReplyBody bounds a reply body when NewReplyReader gets 0: a
// value block of the default maxTransferSize (1 MiB) with room to spare.
const DefaultMaxReplyBody = 16 << 20

// Reply-reader errors. All of them leave the stream unframed: close the
// connection.
var (
	ErrReplyLineTooLong = errors.New("protocol: reply header line longer than 4096 bytes")
	ErrReplyTooLarge    = errors.New("protocol: reply body larger than the configured maximum")
)

// ReplyFormatError reports a reply header line that cannot be parsed.
type ReplyFormatError struct {
	Line string // the offending line, cut to 128 bytes
	Msg  string
}

func (e *ReplyFormatError) Error() string {
	return "protocol: bad reply " + strconv.Quote(e.Line) + ": " + e.Msg
}

// ReplyReader reads broker replies from a stream with hard limits: a header
// line longer than MaxLineLen or a body longer than the configured maximum is
// an error before anything is allocated for it, and the body buffer grows with
// the bytes actually received, so a hostile or broken server cannot make the
// client allocate more than it sent. Lines may end in "\r\n" or "\n".
type ReplyReader struct {
	// KeepBodies makes every Reply.Body a fresh allocation the caller owns;
	// by default one buffer is reused and a Body is valid only until the next
	// call to Next.
	KeepBodies bool

	r       *bufio.Reader
	maxBody int
	buf     []byte
}

// NewReplyReader reads replies from r. maxBody bounds a body (0 means
// DefaultMaxReplyBody). r is used directly when it is a *bufio.Reader of at
// least MaxLineLen bytes; otherwise it is wrapped in one.
func NewReplyReader(r io.Reader, maxBody int) *ReplyReader {
	if maxBody <= 0 {
		maxBody = DefaultMaxReplyBody
	}
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < MaxLineLen {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	return &ReplyReader{r: br, maxBody: maxBody}
}

// Buffered is the number of bytes read from the stream and not yet
// returned: 0 means the next Next reads from the stream.
func (rr *ReplyReader) Buffered() int { return rr.r.Buffered() }

// Next reads one reply. It returns io.EOF when the stream ends cleanly
// between replies and io.ErrUnexpectedEOF when it ends inside one.
func (rr *ReplyReader) Next() (Reply, error) { return rr.NextInto(nil) }

// NextInto is Next with the caller choosing where a body goes: once the
// header is parsed, dst (when not nil) is called with the reply and its
// body length, and a non-nil slice it returns receives the body (appended
// from its length 0, grown as bytes arrive beyond its capacity, so a body
// goes from the socket to the caller's buffer with no copy in between);
// a nil slice means the reader's own buffer (or a fresh one, KeepBodies).
// dst is not called for replies without a body.
func (rr *ReplyReader) NextInto(dst func(rep Reply, n int) []byte) (Reply, error) {
	if !rr.KeepBodies {
		if rr.r.Buffered() == 0 {
			// The read ReadSlice would do, done first so that the fast
			// path sees the replies it brings. An error here is what
			// ReadSlice would return for an empty line.
			if _, err := rr.r.Peek(1); err != nil {
				return Reply{}, err
			}
		}
		if rep, ok := rr.fastResult(dst); ok {
			return rep, nil
		}
	}
	line, err := rr.r.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(line) > MaxLineLen:
		return Reply{}, ErrReplyLineTooLong
	case err == io.EOF && len(line) > 0:
		return Reply{}, io.ErrUnexpectedEOF
	case err != nil:
		return Reply{}, err
	}
	rep, n, err := parseReplyLine(trimCR(line[:len(line)-1]), rr.maxBody)
	if err != nil {
		return Reply{}, err
	}
	if n == 0 {
		return rep, nil
	}
	var body []byte
	own := true
	if dst != nil {
		if b := dst(rep, n); b != nil {
			body, own = b[:0], false
		}
	}
	if own && !rr.KeepBodies {
		body = rr.buf[:0]
	}
	body, err = readBody(rr.r, body, n)
	if own && !rr.KeepBodies {
		rr.buf = body // the largest body received so far, at most maxBody
	}
	if err != nil {
		return Reply{}, err
	}
	rep.Body = body
	return rep, nil
}

// fastResult reads a `result <code> <len> <opaque>\r\n<body>` that is whole
// in the read buffer in one pass, with Body aliasing the buffer (valid until
// the next Next, as documented): a pipelined producer's put replies, which
// otherwise cost a line search, a field split and a copy of each body
// through io.ReadFull. Anything else (a value reply, a check, a reply not
// yet whole, extra spaces, long or out-of-range numbers, a body over the
// maximum) is left to the general path, untouched. dst is NextInto's: a
// buffer it returns gets a copy of the body, as on the general path.
func (rr *ReplyReader) fastResult(dst func(rep Reply, n int) []byte) (Reply, bool) {
	n := rr.r.Buffered()
	if n < len("result 0 0 0\n") {
		return Reply{}, false
	}
	b, _ := rr.r.Peek(n) // no read: n bytes are buffered
	rep, ds, de, ok := parseFastResult(b, rr.maxBody)
	if !ok {
		return Reply{}, false
	}
	if de > ds {
		var own []byte
		if dst != nil {
			own = dst(rep, de-ds)
		}
		if own != nil {
			rep.Body = append(own[:0], b[ds:de]...)
		} else {
			rep.Body = b[ds:de:de]
		}
	}
	_, _ = rr.r.Discard(de) // buffered: cannot fail
	return rep, true
}

// NextBuffered appends to dst, up to its capacity, the replies whole in the
// read buffer that fastResult would take (`result` replies in the common
// shape), stopping at the first that is not, and returns it; it never reads
// from the stream, so it returns dst unchanged when the buffer does not
// start with such a reply (Next then reads it). Every Body aliases the read
// buffer and stays valid until the next Next, NextInto or NextBuffered: a
// pipelined producer's reader takes all the replies one read brought in
// one go (and their calls under one lock, client/selfread.go).
func (rr *ReplyReader) NextBuffered(dst []Reply) []Reply {
	if rr.KeepBodies {
		return dst
	}
	b, _ := rr.r.Peek(rr.r.Buffered()) // no read
	off := 0
	for len(dst) < cap(dst) && len(b)-off >= len("result 0 0 0\n") {
		rep, ds, de, ok := parseFastResult(b[off:], rr.maxBody)
		if !ok {
			break
		}
		if de > ds {
			rep.Body = b[off+ds : off+de : off+de]
		}
		dst = append(dst, rep)
		off += de
	}
	_, _ = rr.r.Discard(off) // buffered: cannot fail
	return dst
}

// parseFastResult parses the reply at the start of b for fastResult: its
// header, where its body starts (ds) and ends (de, the bytes it takes); ok
// false when it is not a whole `result` reply in the common shape.
func parseFastResult(b []byte, maxBody int) (rep Reply, ds, de int, ok bool) {
	if len(b) < len("result 0 0 0\n") || string(b[:7]) != "result " {
		return Reply{}, 0, 0, false
	}
	code, j, ok := fastInt(b, 7, ' ')
	if !ok || j >= len(b) || code < 0 || code > maxI32 {
		return Reply{}, 0, 0, false
	}
	blen, j, ok := fastInt(b, j, ' ')
	if !ok || j >= len(b) || blen < 0 || blen > int64(maxBody) {
		return Reply{}, 0, 0, false
	}
	op, j, ok := fastInt(b, j, 0)
	if !ok || op < minI32 || op > maxI32 {
		return Reply{}, 0, 0, false
	}
	switch {
	case b[j] == '\n':
	case b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n':
		j++
	default:
		return Reply{}, 0, 0, false
	}
	ds = j + 1
	if int64(len(b)-ds) < blen {
		return Reply{}, 0, 0, false
	}
	return Reply{Kind: ReplyResult, Code: int(code), Opaque: int32(op)}, ds, ds + int(blen), true
}

// readBody reads exactly n bytes into buf, growing it as bytes arrive.
func readBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	for len(buf) < n {
		if len(buf) == cap(buf) {
			c := min(n, max(2*cap(buf), 64<<10))
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		k, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// parseReplyLine parses `result <code> <len> <opaque>` or `value <len>
// <opaque>` and returns the body length.
func parseReplyLine(line []byte, maxBody int) (Reply, int, error) {
	var f [5][]byte
	nf := 0
	for k := 0; k < len(line); {
		if line[k] == ' ' {
			k++
			continue
		}
		s := k
		for k < len(line) && line[k] != ' ' {
			k++
		}
		if nf == len(f) {
			return Reply{}, 0, replyErr(line, "too many fields")
		}
		f[nf] = line[s:k]
		nf++
	}
	var rep Reply
	var lenField, opField []byte
	switch {
	case nf == 4 && string(f[0]) == "result":
		code, ok := parseInt32(f[1])
		if !ok || code < 0 {
			return Reply{}, 0, replyErr(line, "bad status code")
		}
		rep.Kind, rep.Code = ReplyResult, int(code)
		lenField, opField = f[2], f[3]
	case nf == 3 && string(f[0]) == "check":
		return parseCheckLine(line, f[1], f[2])
	case nf == 3 && string(f[0]) == "value":
		rep.Kind, rep.Code = ReplyValue, StatusSuccess
		lenField, opField = f[1], f[2]
	default:
		return Reply{}, 0, replyErr(line, "want `result <code> <len> <opaque>` or `value <len> <opaque>`")
	}
	n, ok := parseInt64(lenField)
	if !ok || n < 0 {
		return Reply{}, 0, replyErr(line, "bad body length")
	}
	if n > int64(maxBody) {
		return Reply{}, 0, ErrReplyTooLarge
	}
	op, ok := parseInt32(opField)
	if !ok {
		return Reply{}, 0, replyErr(line, "bad opaque")
	}
	rep.Opaque = op
	return rep, int(n), nil
}

func replyErr(line []byte, msg string) error {
	return &ReplyFormatError{Line: string(clip128(line)), Msg: msg}
}

// clip128 cuts b to the 128 bytes an error message quotes.
func clip128(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}

// ParsePutResult parses MetaQ's put success body `<msgId> <partition> <offset>`.
func ParsePutResult(body []byte) (msgID int64, partition int32, offset int64, err error) {
	if msgID, partition, offset, ok := fastPutResult(body); ok {
		return msgID, partition, offset, nil
	}
	return parsePutResult(body)
}

// fastPutResult parses a put result whose numbers are unsigned and at most
// 18 digits (no overflow to check) in one pass, where parsePutResult looks
// for the spaces first and parses each field after: every async send's
// reply. ok false leaves it to parsePutResult, which gives the same result
// for anything fastPutResult accepts.
func fastPutResult(b []byte) (msgID int64, partition int32, offset int64, ok bool) {
	var v [3]uint64
	j := 0
	for f := range v {
		s := j
		var u uint64
		for j < len(b) {
			d := b[j] - '0'
			if d > 9 {
				break
			}
			u = u*10 + uint64(d)
			j++
		}
		if j == s || j-s > 18 {
			return 0, 0, 0, false
		}
		v[f] = u
		if f < 2 {
			if j >= len(b) || b[j] != ' ' {
				return 0, 0, 0, false
			}
			j++
		}
	}
	if j != len(b) || v[1] > maxI32 {
		return 0, 0, 0, false
	}
	return int64(v[0]), int32(v[1]), int64(v[2]), true
}

// parsePutResult is ParsePutResult's general path.
func parsePutResult(body []byte) (msgID int64, partition int32, offset int64, err error) {
	i := bytes.IndexByte(body, ' ')
	if i < 0 {
		return 0, 0, 0, errPutResult(body)
	}
	j := bytes.IndexByte(body[i+1:], ' ')
	if j < 0 {
		return 0, 0, 0, errPutResult(body)
	}
	j += i + 1
	var ok1, ok2, ok3 bool
	msgID, ok1 = parseInt64(body[:i])
	partition, ok2 = parseInt32(body[i+1 : j])
	offset, ok3 = parseInt64(body[j+1:])
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, errPutResult(body)
	}
	return msgID, partition, offset, nil
}

func errPutResult(body []byte) error {
	return errors.New("protocol: bad put result " + strconv.Quote(string(clip128(body))) + ": want `<msgId> <partition> <offset>`")
}

// ParseInt parses a reply body that is one decimal number (offset, 301, seek).
func ParseInt(body []byte) (int64, error) {
	v, ok := parseInt64(bytes.TrimSpace(body))
	if !ok {
		return 0, errors.New("protocol: not a decimal integer: " + strconv.Quote(string(clip128(body))))
	}
	return v, nil
}

// Stat is one `key value` line of a stats body.
type Stat struct {
	Key, Value string
}

// ParseStats parses a stats body `STATS\r\n` + `key value\r\n`… + `END\r\n`.
// The value is the rest of the line after the first space (it may hold
// spaces). Bare "\n" line ends are accepted.
func ParseStats(body []byte) ([]Stat, error) {
	var out []Stat
	err := EachStat(body, func(k, v []byte) {
		out = append(out, Stat{Key: string(k), Value: string(v)})
	})
	return out, err
}

// EachStat calls fn for every `key value` line of a stats body without
// allocating; k and v alias body.
func EachStat(body []byte, fn func(key, value []byte)) error {
	first, ended := true, false
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		line = trimCR(line)
		switch {
		case ended:
			if len(line) > 0 {
				return errors.New("protocol: stats body: data after END")
			}
		case first:
			if string(line) != "STATS" {
				return errors.New("protocol: stats body does not start with STATS")
			}
			first = false
		case string(line) == "END":
			ended = true
		default:
			k, v := line, []byte(nil)
			if i := bytes.IndexByte(line, ' '); i >= 0 {
				k, v = line[:i], line[i+1:]
			}
			fn(k, v)
		}
	}
	if !ended {
		return errors.New("protocol: stats body does not end with END")
	}
	return nil
}
