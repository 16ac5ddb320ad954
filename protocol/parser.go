package protocol

import (
	"bytes"
	"strconv"
)

// Parser is the server side of the wire: a state machine fed with whatever
// the connection read (any split of the stream: byte by byte, mid-line,
// mid-data) that calls a handler for every complete command. Modelled on
// nats-server's parser:
//
//   - no allocation per command on the hot path: a header line that is whole
//     in the read buffer is split in place, a put whose data is whole in the
//     read buffer gets a sub-slice of it;
//   - a header line split across reads is accumulated in a fixed 4 KiB
//     buffer (allocated once, the first time it is needed, so idle
//     connections cost ~1 KiB); data split across reads is accumulated in a
//     reusable buffer that grows with the bytes actually received (at most
//     the checked length, so a client that announces 4 MiB and stalls costs
//     what it sent; GrowData allocates it whole once the caller has budgeted
//     it) and is kept between commands only up to 16 KiB;
//   - MaxLineLen is enforced at every byte, the data length is checked against
//     MaxMessageSize as soon as its header line is complete, before any byte
//     of data is buffered;
//   - the first token of a line must be printable ASCII: a control or 8-bit
//     byte there is binary garbage and fatal at once (a TLS hello, say),
//     without waiting for 4 KiB.
//
// Line syntax accepted (documented in docs/protocol.md): lines end in "\r\n"
// or a bare "\n"; fields are separated by one or more spaces (leading and
// trailing spaces are ignored, so MetaQ's `stats  <opaque>` works); command
// names are case-insensitive; an empty line is ignored (so the Enter a telnet
// user types after a put's data is harmless).
//
// The zero value is ready to use. A Parser serves one connection and is not
// safe for concurrent use.
type Parser struct {
	// MaxMessageSize bounds the data of put and sync; 0 means
	// DefaultMaxMessageSize. A larger length is fatal.
	MaxMessageSize int
	// RetainData is the largest data buffer (of a put or mput split across
	// reads) kept for the next command; 0 means 16 KiB. A larger one is
	// dropped after use. A caller that keeps big buffers gives them back
	// with ReleaseData when the connection goes quiet (the broker does, on
	// its read buffer's shrink timer): a busy batch producer then reuses
	// one buffer instead of allocating (and zeroing) one per frame.
	RetainData int

	state   uint8
	opPhase uint8 // where the current line's first token scan is: opStart, opIn, opDone

	hdrN    int // bytes of an unfinished line held in hdr
	lineN   int // length of the saved line in hdr (data/skip states)
	dataLen int // announced data length of the current put/sync
	need    int // data bytes still to read or skip

	nf    int // fields on the line (may exceed MaxFields)
	spans [MaxFields]span
	ix    fieldIx
	args  [MaxFields][]byte
	data  []byte
	cmd   Command
	// putOnly: the fields of cmd fastPut does not set are zero (it set
	// cmd last), so the next fastPut sets its own fields only instead of
	// clearing all ~330 bytes of it (~7 ns per put, BenchmarkParsePut100).
	putOnly bool
	errv    Error
	failed  error // sticky fatal error or ErrQuit

	hdr []byte // MaxLineLen bytes, allocated the first time a line is split

	slowOnly bool // tests: never take the put fast path (fastput.go)
}

// Handler receives each parsed command. The Command (and every slice in it)
// is valid only until the handler returns, and the handler must not modify
// it (the parser reuses it: Parser.putOnly). A non-nil error stops Parse, which
// returns it; the parser stays at the next command boundary.
type Handler func(c *Command) error

type span struct{ s, e uint16 }

// fieldIx records which field feeds each named byte-slice field of Command
// (0 = none; field 0 is the command name).
type fieldIx struct {
	topic, group, txKey, tags, where, item, key, user uint8
}

const (
	stLine uint8 = iota
	stData
	stSkip
)

const (
	opStart uint8 = iota // nothing but spaces seen on this line
	opIn                 // inside the command name
	opDone               // past the command name
)

// maxRetainedData is the default of RetainData: the largest data buffer a
// Parser keeps between commands; a bigger one (a large message split across
// reads) is dropped after use so that idle connections do not pin
// megabytes each.
const maxRetainedData = 16 << 10

func (p *Parser) retainData() int {
	if p.RetainData > 0 {
		return p.RetainData
	}
	return maxRetainedData
}

// RetainsData reports whether the parser holds a data buffer larger than
// the default 16 KiB between commands (see RetainData).
func (p *Parser) RetainsData() bool { return cap(p.data) > maxRetainedData }

// ReleaseData drops a data buffer larger than the default 16 KiB unless a
// command's data is being read into it.
func (p *Parser) ReleaseData() {
	if p.state != stData && cap(p.data) > maxRetainedData {
		p.data = nil
	}
}

// lineAction is what processLine decided.
type lineAction uint8

const (
	actIgnore  lineAction = iota // blank line
	actDeliver                   // complete command (or error) without data
	actData                      // put/sync: dataLen bytes follow (skipped when cmd.Err != nil)
)

// Pending reports whether a command is partially read (an unfinished header
// line or data): a connection closing now cuts a request in half.
func (p *Parser) Pending() bool {
	return p.state != stLine || p.hdrN > 0
}

// PartialData describes a command whose data block is being read across
// reads (Parser.Partial): a put, mput or sync, or the handles of an ack,
// reject, release or extend.
type PartialData struct {
	Op       Op    // the command the data belongs to
	Len      int   // announced data length
	Received int   // bytes of it read so far
	Buffered bool  // the data is kept (false: the data of a bad request, skipped)
	Opaque   int32 // the request's opaque
}

// Partial reports the command whose data block is in progress, if any.
// The broker uses it to budget buffered data and to time out commands whose
// data stops arriving.
func (p *Parser) Partial() (PartialData, bool) {
	switch p.state {
	case stData, stSkip:
		return PartialData{Op: p.cmd.Op, Len: p.dataLen, Received: p.dataLen - p.need, Buffered: p.state == stData, Opaque: p.cmd.Opaque}, true
	}
	return PartialData{}, false
}

// GrowData makes room for the whole data block in progress at once (one
// allocation of its announced length instead of growing with the bytes
// received). The broker calls it once it has reserved that length from its
// put-data budget, so the buffer it accounts for is the only one: growing
// by doubling would also leave up to the same amount again as garbage.
func (p *Parser) GrowData() {
	if p.state != stData || cap(p.data) >= p.dataLen {
		return
	}
	nb := make([]byte, len(p.data), p.dataLen)
	copy(nb, p.data)
	p.data = nb
}

// Reset forgets any partial command and a sticky error.
func (p *Parser) Reset() {
	maxMsg, retain, data, hdr, slow := p.MaxMessageSize, p.RetainData, p.data, p.hdr, p.slowOnly
	*p = Parser{MaxMessageSize: maxMsg, RetainData: retain, hdr: hdr, slowOnly: slow}
	if cap(data) <= p.retainData() {
		p.data = data[:0]
	}
}

func (p *Parser) maxMessageSize() int {
	if p.MaxMessageSize > 0 {
		return p.MaxMessageSize
	}
	return DefaultMaxMessageSize
}

// Parse consumes buf and calls h for every complete command in it. Data of a
// put that is whole inside buf is passed as a sub-slice (no copy); otherwise
// it is accumulated into a reusable per-parser buffer. Parse returns:
//   - nil when buf was consumed (a partial command is kept for the next call);
//   - a *Error with Fatal set when the stream can no longer be framed: the
//     caller replies `result 400 <len> <Opaque>\r\n<Msg>` and closes;
//   - ErrQuit after delivering a `quit`;
//   - the handler's error, if it returned one.
//
// Commands before the failure point have been delivered. A fatal error and
// ErrQuit are sticky.
func (p *Parser) Parse(buf []byte, h Handler) error {
	if p.failed != nil {
		return p.failed
	}
	i := 0
	for i < len(buf) {
		switch p.state {
		case stLine:
			if p.hdrN == 0 && p.opPhase == opStart && !p.slowOnly {
				n, ok, err := p.fastPut(buf[i:], h) // fastput.go
				if ok {
					i += n
					if err != nil {
						return err
					}
					continue
				}
			}
			allowed := MaxLineLen - p.hdrN // >= 1
			w := buf[i:]
			if len(w) > allowed {
				w = w[:allowed]
			}
			if p.opPhase != opDone {
				if err := p.scanOp(w); err != nil {
					return err
				}
			}
			j := bytes.IndexByte(w, '\n')
			if j < 0 {
				if len(w) == allowed {
					return p.fatal("command line longer than 4096 bytes", DefaultOpaque, false)
				}
				p.hdrN += copy(p.hdrBuf()[p.hdrN:], w)
				return nil
			}
			line, inHdr := w[:j], p.hdrN > 0
			if inHdr { // the line started in an earlier read
				n := p.hdrN + copy(p.hdr[p.hdrN:], line)
				line = p.hdr[:n]
			}
			line = trimCR(line) // once: processLine, saveLine and deliver all see the bare line
			i += j + 1
			p.hdrN = 0
			p.opPhase = opStart

			act, err := p.processLine(line)
			if err != nil {
				return err
			}
			switch act {
			case actIgnore:
				continue
			case actDeliver:
				if err := p.deliver(line, h); err != nil {
					return err
				}
				continue
			}
			// actData
			n := p.dataLen
			if rest := len(buf) - i; rest >= n {
				if p.cmd.Err == nil {
					p.cmd.Data = buf[i : i+n : i+n]
					p.checkData()
				}
				i += n
				if err := p.deliver(line, h); err != nil {
					return err
				}
				continue
			}
			// The data continues in a later read: keep the header line.
			p.saveLine(line, inHdr)
			p.need = n
			if p.cmd.Err != nil {
				p.state = stSkip
			} else {
				p.state = stData
				p.data = p.data[:0]
			}

		case stData:
			k := min(p.need, len(buf)-i)
			p.appendData(buf[i : i+k])
			i += k
			p.need -= k
			if p.need == 0 {
				p.cmd.Data = p.data[:p.dataLen:p.dataLen]
				p.checkData()
				err := p.deliver(p.hdr[:p.lineN], h)
				if cap(p.data) > p.retainData() {
					p.data = nil
				}
				if err != nil {
					return err
				}
			}

		case stSkip:
			k := min(p.need, len(buf)-i)
			i += k
			p.need -= k
			if p.need == 0 {
				if err := p.deliver(p.hdr[:p.lineN], h); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scanOp checks the first token of a line byte by byte as it arrives.
func (p *Parser) scanOp(w []byte) error {
	for _, c := range w {
		switch {
		case c == ' ':
			if p.opPhase == opIn {
				p.opPhase = opDone
				return nil
			}
		case c == '\n' || c == '\r':
			p.opPhase = opDone
			return nil
		case c < 0x21 || c > 0x7e:
			return p.fatal("binary data where a command was expected", DefaultOpaque, false)
		default:
			p.opPhase = opIn
		}
	}
	return nil
}

func (p *Parser) fatal(msg string, opaque int32, has bool) error {
	e := &Error{Code: StatusBadRequest, Msg: msg, Opaque: opaque, HasOpaque: has, Fatal: true}
	p.failed = e
	return e
}

func (p *Parser) hdrBuf() []byte {
	if p.hdr == nil {
		p.hdr = make([]byte, MaxLineLen)
	}
	return p.hdr
}

// saveLine keeps the header line of a put/sync whose data continues in a
// later read; inHdr reports that it is in hdr already.
func (p *Parser) saveLine(line []byte, inHdr bool) {
	if !inHdr {
		copy(p.hdrBuf(), line)
	}
	p.lineN = len(line)
}

// appendData appends b to p.data, growing it with the bytes received and
// never beyond dataLen.
func (p *Parser) appendData(b []byte) {
	if len(b) == 0 {
		return
	}
	if cap(p.data)-len(p.data) < len(b) {
		c := max(2*cap(p.data), len(p.data)+len(b), min(p.dataLen, 4096))
		c = min(c, p.dataLen)
		nb := make([]byte, len(p.data), c)
		copy(nb, p.data)
		p.data = nb
	}
	p.data = append(p.data, b...)
}

// checkData verifies the checksum of a complete put or sync.
func (p *Parser) checkData() {
	c := &p.cmd
	if !c.HasChecksum || c.Checksum == -1 {
		return
	}
	if sum := MessageChecksum(c.Data); sum != c.Checksum {
		c.Data = nil
		p.bad("checksum mismatch: data has " + strconv.Itoa(int(sum)) +
			", header says " + strconv.Itoa(int(c.Checksum)))
	}
}

// deliver binds the byte-slice fields to line (without its line terminator)
// and calls h.
func (p *Parser) deliver(line []byte, h Handler) error {
	c := &p.cmd
	c.Line = line
	if c.Err != nil || c.Op == OpTransaction || c.Op == OpSync {
		n := min(p.nf, MaxFields)
		for k := 1; k < n; k++ {
			p.args[k] = line[p.spans[k].s:p.spans[k].e:p.spans[k].e]
		}
		c.Args = p.args[1:n:n]
	}
	if ix := p.ix; c.Err == nil {
		c.Topic = p.field(line, ix.topic)
		c.Group = p.field(line, ix.group)
		c.TxKey = p.field(line, ix.txKey)
		c.Tags = p.field(line, ix.tags)
		c.Where = p.field(line, ix.where)
		c.Item = p.field(line, ix.item)
		c.Key = p.field(line, ix.key)
		c.User = p.field(line, ix.user)
	}
	p.state = stLine
	err := h(c)
	// The command is valid only during h: drop the data reference, so that a
	// large put's buffer (released below) is not kept alive by p.cmd.
	c.Data = nil
	if err != nil {
		return err
	}
	if c.Op == OpQuit && c.Err == nil {
		p.failed = ErrQuit
		return ErrQuit
	}
	return nil
}

func (p *Parser) field(line []byte, k uint8) []byte {
	if k == 0 {
		return nil
	}
	sp := p.spans[k]
	return line[sp.s:sp.e:sp.e]
}

// f returns field k of the line being processed.
func (p *Parser) f(line []byte, k int) []byte { return line[p.spans[k].s:p.spans[k].e] }

// bad records a non-fatal error on the current command (the first one wins).
func (p *Parser) bad(msg string) {
	if p.cmd.Err != nil {
		return
	}
	p.errv = Error{Code: StatusBadRequest, Msg: msg, Opaque: p.cmd.Opaque, HasOpaque: p.cmd.HasOpaque}
	p.cmd.Err = &p.errv
}

// processLine splits a complete header line (without its line terminator)
// and validates it.
func (p *Parser) processLine(line []byte) (lineAction, error) {
	// Split on runs of spaces. Control bytes are caught later: names and
	// numbers reject them, raw fields are checked by checkRaw.
	nf := 0
	for k := 0; k < len(line); {
		if line[k] == ' ' {
			k++
			continue
		}
		e := k + 1
		for e < len(line) && line[e] != ' ' {
			e++
		}
		if nf < MaxFields {
			p.spans[nf] = span{uint16(k), uint16(e)}
		}
		nf++
		k = e
	}
	p.nf = nf
	if nf == 0 {
		return actIgnore, nil
	}
	p.cmd = Command{Opaque: DefaultOpaque, Checksum: -1}
	p.putOnly = false
	p.ix = fieldIx{}

	name := p.f(line, 0)
	act := actDeliver
	switch {
	case eqFold(name, "put"):
		a, err := p.parsePut(line, nf, OpPut)
		if err != nil {
			return 0, err
		}
		act = a
	case eqFold(name, "mput"):
		a, err := p.parseBatchPut(line, nf)
		if err != nil {
			return 0, err
		}
		act = a
	case eqFold(name, "get"):
		p.parseGet(line, nf)
	case eqFold(name, "offset"):
		p.parseOffset(line, nf)
	case eqFold(name, "stats"):
		p.parseStats(line, nf)
	case eqFold(name, "version"):
		p.cmd.Op = OpVersion
		switch nf {
		case 1:
		case 2:
			p.opaqueAt(line, 1)
		default:
			p.wrongCount(line, nf, "version [<opaque>]")
		}
	case eqFold(name, "quit"):
		p.cmd.Op = OpQuit // extra fields are ignored, as MetaQ does
		return actDeliver, nil
	case eqFold(name, "transaction"):
		p.cmd.Op = OpTransaction
		if nf < 5 || nf > 7 {
			p.wrongCount(line, nf, "transaction <txKey> <sessionId> <type> [<timeoutS>] [<uq>] <opaque>")
		} else {
			p.opaqueAt(line, nf-1)
			p.ix.txKey = 1
		}
	case eqFold(name, "sync"):
		a, err := p.parsePut(line, nf, OpSync)
		if err != nil {
			return 0, err
		}
		act = a
	case eqFold(name, "seek"):
		p.parseSeek(line, nf)
	case eqFold(name, "query"):
		p.parseQuery(line, nf)
	case eqFold(name, "retry"):
		p.parseRetry(line, nf)
	case eqFold(name, "pop"):
		p.parsePop(line, nf)
	case eqFold(name, "ack"), eqFold(name, "release"), eqFold(name, "reject"), eqFold(name, "extend"):
		a, err := p.parseFinish(line, nf, name)
		if err != nil {
			return 0, err
		}
		act = a
	case eqFold(name, "txend"):
		p.parseTxEnd(line, nf)
	case eqFold(name, "producer"):
		p.parseProducer(line, nf)
	case eqFold(name, "replicate"):
		p.parseReplicate(line, nf)
	case eqFold(name, "auth"):
		p.parseAuth(line, nf)
	case eqFold(name, "trace"):
		p.parseTrace(line, nf) // traceparse.go
	default:
		p.cmd.Op = OpUnknown
		p.lastOpaque(line, nf)
		p.bad("unknown command " + quoteField(name))
	}
	if p.cmd.Err == nil {
		p.checkRaw(line, nf)
	}
	return act, nil
}

// checkRaw rejects control bytes in the fields that are not validated as a
// name or a number.
func (p *Parser) checkRaw(line []byte, nf int) {
	if p.cmd.Op == OpTransaction {
		for k := 1; k < nf; k++ {
			if hasCtl(p.f(line, k)) {
				p.bad("control character in command line")
				return
			}
		}
		return
	}
	for _, k := range [...]uint8{p.ix.txKey, p.ix.tags, p.ix.where, p.ix.item, p.ix.key} {
		if k != 0 && hasCtl(p.f(line, int(k))) {
			p.bad("control character in command line")
			return
		}
	}
}

func hasCtl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// opaqueAt reads the opaque from field k.
func (p *Parser) opaqueAt(line []byte, k int) {
	b := p.f(line, k)
	v, ok := parseInt32(b)
	if !ok {
		p.bad("invalid opaque " + quoteField(b))
		return
	}
	p.cmd.Opaque, p.cmd.HasOpaque = v, true
}

// lastOpaque takes the last field as the opaque when it is an integer; used
// when the field count is wrong so that the client can still match the 400.
func (p *Parser) lastOpaque(line []byte, nf int) {
	if nf < 2 || nf > MaxFields {
		return
	}
	if v, ok := parseInt32(p.f(line, nf-1)); ok {
		p.cmd.Opaque, p.cmd.HasOpaque = v, true
	}
}

func (p *Parser) wrongCount(line []byte, nf int, usage string) {
	p.lastOpaque(line, nf)
	p.bad("wrong number of fields for " + p.cmd.Op.String() + ": " + strconv.Itoa(nf) + ", usage: " + usage)
}

// nameAt validates field k as a topic or group name and returns k for the
// matching fieldIx entry, or 0 (no field) when it is invalid.
func (p *Parser) nameAt(line []byte, k uint8, what string) uint8 {
	if b := p.f(line, int(k)); !ValidNameBytes(b) {
		p.bad("invalid " + what + " name " + quoteField(b))
		return 0
	}
	return k
}

// num parses field k as a decimal integer in [lo, hi].
func (p *Parser) num(line []byte, k int, what string, lo, hi int64) int64 {
	b := p.f(line, k)
	v, ok := parseInt64(b)
	if !ok || v < lo || v > hi {
		p.numErr(b, what, ok, v, lo, hi)
		return 0
	}
	return v
}

// numErr is the cold path of num.
func (p *Parser) numErr(b []byte, what string, ok bool, v, lo, hi int64) {
	switch {
	case !ok:
		p.bad("invalid " + what + " " + quoteField(b) + ": not a decimal integer")
	case v < lo:
		p.bad("invalid " + what + " " + quoteField(b) + ": must be >= " + strconv.FormatInt(lo, 10))
	default:
		p.bad("invalid " + what + " " + quoteField(b) + ": must be <= " + strconv.FormatInt(hi, 10))
	}
}

const (
	minI32 = -1 << 31
	maxI32 = 1<<31 - 1
	maxI64 = 1<<63 - 1
)

// parsePut handles put and sync, the two commands that carry data:
//
//	put  <topic> <partition> <len> <flag> [<checksum>] [<txKey>] <opaque>
//	sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>
func (p *Parser) parsePut(line []byte, nf int, op Op) (lineAction, error) {
	c := &p.cmd
	c.Op = op
	okCount := nf >= 6 && nf <= 8
	if op == OpSync {
		okCount = nf == 7 || nf == 8
	}
	if okCount {
		if v, ok := parseInt32(p.f(line, nf-1)); ok {
			c.Opaque, c.HasOpaque = v, true
		}
	}
	if nf < 4 {
		return 0, p.fatal(op.String()+" without a data length: the stream cannot be framed", c.Opaque, c.HasOpaque)
	}
	lb := p.f(line, 3)
	n, ok := parseInt64(lb)
	if !ok || n < 0 {
		return 0, p.fatal("invalid data length "+quoteField(lb)+": the stream cannot be framed", c.Opaque, c.HasOpaque)
	}
	if max := p.maxMessageSize(); n > int64(max) {
		return 0, p.fatal("data length "+strconv.FormatInt(n, 10)+" exceeds maxMessageSize "+strconv.Itoa(max), c.Opaque, c.HasOpaque)
	}
	p.dataLen = int(n)

	// Framing is known: anything else wrong skips the data and answers 400.
	if !okCount {
		if op == OpSync {
			p.wrongCount(line, nf, "sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>")
		} else {
			p.wrongCount(line, nf, "put <topic> <partition> <len> <flag> [<checksum>] [<txKey>] <opaque>")
		}
		return actData, nil
	}
	if !c.HasOpaque {
		p.opaqueAt(line, nf-1)
	}
	p.ix.topic = p.nameAt(line, 1, "topic")
	c.Partition = int32(p.num(line, 2, "partition", -1, maxI32))
	c.Flag = int32(p.num(line, 4, "flag", minI32, maxI32))
	ck := 0 // field holding the checksum, if any
	if op == OpSync {
		c.MsgID = p.num(line, 5, "msgId", 0, maxI64)
		if nf == 8 {
			ck = 6
		}
	} else {
		switch nf {
		case 7: // checksum or txKey: MetaQ looks at the first character
			if b := p.f(line, 5); b[0] == '-' || (b[0] >= '0' && b[0] <= '9') {
				ck = 5
			} else {
				p.ix.txKey = 5
			}
		case 8:
			ck = 5
			p.ix.txKey = 6
		}
	}
	if ck > 0 {
		b := p.f(line, ck)
		v, ok := parseInt32(b)
		if !ok || v < -1 {
			p.bad("invalid checksum " + quoteField(b) + ": want CRC32(data)&0x7FFFFFFF or -1")
		}
		c.Checksum, c.HasChecksum = v, true
	}
	return actData, nil
}

// get <topic> <group> <partition> <offset> <maxSize> <opaque> [<maxWaitMs> [<tags> [<where>]]]
func (p *Parser) parseGet(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpGet
	if nf < 7 || nf > 10 {
		p.wrongCount(line, nf, "get <topic> <group> <partition> <offset> <maxSize> <opaque> [<maxWaitMs> [<tags> [<where>]]]")
		return
	}
	p.opaqueAt(line, 6)
	p.queuePosition(line)
	c.MaxSize = int32(p.num(line, 5, "maxSize", 1, maxI32))
	if nf >= 8 {
		c.MaxWaitMs = p.num(line, 7, "maxWaitMs", 0, maxI32) // as pop's: the broker multiplies it into a time.Duration
	}
	if nf >= 9 {
		p.ix.tags = 8
	}
	if nf == 10 {
		p.ix.where = 9 // URL-escaped filter expression (protocol/filter)
	}
}

// queuePosition reads the fields get and offset share:
// <topic> <group> <partition> <offset> (fields 1 to 4).
func (p *Parser) queuePosition(line []byte) {
	c := &p.cmd
	p.ix.topic = p.nameAt(line, 1, "topic")
	p.ix.group = p.nameAt(line, 2, "group")
	c.Partition = int32(p.num(line, 3, "partition", 0, maxI32))
	c.Offset = p.num(line, 4, "offset", 0, maxI64)
}

// offset <topic> <group> <partition> <offset> <opaque>
func (p *Parser) parseOffset(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpOffset
	if nf != 6 {
		p.wrongCount(line, nf, "offset <topic> <group> <partition> <offset> <opaque>")
		return
	}
	p.opaqueAt(line, 5)
	p.queuePosition(line)
}

// stats [<item>] [<opaque>]. With a single field: an integer is the opaque
// (MetaQ's Java client sends `stats  <opaque>` for "no item"), anything else
// is the item.
func (p *Parser) parseStats(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpStats
	switch nf {
	case 1:
	case 2:
		if v, ok := parseInt32(p.f(line, 1)); ok {
			c.Opaque, c.HasOpaque = v, true
		} else {
			p.ix.item = 1
		}
	case 3:
		p.opaqueAt(line, 2)
		p.ix.item = 1
	default:
		p.wrongCount(line, nf, "stats [<item>] [<opaque>]")
	}
}

// seek <topic> <partition> <timestampMs> <opaque>
func (p *Parser) parseSeek(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpSeek
	if nf != 5 {
		p.wrongCount(line, nf, "seek <topic> <partition> <timestampMs> <opaque>")
		return
	}
	p.opaqueAt(line, 4)
	p.ix.topic = p.nameAt(line, 1, "topic")
	c.Partition = int32(p.num(line, 2, "partition", 0, maxI32))
	c.Timestamp = p.num(line, 3, "timestamp", 0, maxI64)
}

// query id <msgId> <opaque> | query key <topic> <key> <maxNum> <opaque>
func (p *Parser) parseQuery(line []byte, nf int) {
	c := &p.cmd
	var sub []byte
	if nf >= 2 {
		sub = p.f(line, 1)
	}
	switch {
	case eqFold(sub, "id"):
		c.Op = OpQueryID
		if nf != 4 {
			p.wrongCount(line, nf, "query id <msgId> <opaque>")
			return
		}
		p.opaqueAt(line, 3)
		c.MsgID = p.num(line, 2, "msgId", 0, maxI64)
	case eqFold(sub, "key"):
		c.Op = OpQueryKey
		if nf != 6 {
			p.wrongCount(line, nf, "query key <topic> <key> <maxNum> <opaque>")
			return
		}
		p.opaqueAt(line, 5)
		p.ix.topic = p.nameAt(line, 2, "topic")
		p.ix.key = 3
		c.MaxNum = int32(p.num(line, 4, "maxNum", 1, maxI32))
	default:
		c.Op = OpUnknown
		p.lastOpaque(line, nf)
		p.bad("unknown query type " + quoteField(sub) + ", usage: query id <msgId> <opaque> | query key <topic> <key> <maxNum> <opaque>")
	}
}

// eqFold reports whether b equals the lower-case ASCII word s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i]|0x20 != s[i] {
			return false
		}
	}
	return true
}

// trimCR drops the '\r' of a "\r\n" line end from a line cut before its '\n'.
func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}

// quoteField renders a field for an error message (quoted, escaped, cut).
func quoteField(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
