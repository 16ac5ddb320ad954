package protocol

import (
	"bytes"
	"errors"
	"strconv"
)

// Batch put (metaq; docs/protocol.md, "mput"): many messages for one
// partition in one frame, stored with one append.
//
//	mput <topic> <partition> <count> <len> [<checksum>] [runs] <opaque>\r\n<block>
//
// <block> is exactly <len> bytes: <count> entries, each
//
//	<size> <flag>\r\n<data>
//
// where <data> is a put's data block of <size> bytes (properties line and
// attribute as for put) and "\r\n" may be a bare "\n". <checksum>, when
// present, is MessageChecksum(<block>) (or -1: do not verify). The reply is
// one result for the whole frame; without `runs` it lists every id:
//
//	result 200 <len> <opaque>\r\n<partition> <firstOffset> <msgId_1> … <msgId_count>
//
// with the word `runs` (the compact form, what metaq's client sends) it
// gives the first id and the records' sizes as runs:
//
//	result 200 <len> <opaque>\r\n<partition> <firstOffset> <msgId_1> <size>[x<n>] …
//
// A frame is stored as one run of consecutive records in one segment, so
// msgId_(i+1) = msgId_i + size_i; `<size>x<n>` stands for n records of
// size bytes (`<size>` alone for one), and the runs' counts add up to
// <count>. Either way message i (from 1) has queue offset
// firstOffset+i-1: its queue offsets are consecutive too. Any error refuses
// the whole frame and stores nothing. MetaQ 1.x clients never send mput,
// so they never see it.

// MaxBatchCount bounds the messages of one mput frame (the frame's bytes are
// bounded by the parser's MaxMessageSize, like a put's data).
const MaxBatchCount = 10000

// MinBatchEntry is the size of the smallest entry of an mput block
// (`0 0\n`): a frame announcing more than <len>/MinBatchEntry entries is
// refused from its header.
const MinBatchEntry = 4

// AppendBatchPutHeader appends the header line of an mput frame whose block
// is blockLen bytes, asking for the reply that lists every id; checksum
// ChecksumNone omits the checksum field.
func AppendBatchPutHeader(dst []byte, topic string, partition int32, count, blockLen int, checksum, opaque int32) []byte {
	return appendBatchPutHeader(dst, topic, partition, count, blockLen, checksum, false, opaque)
}

// AppendBatchPutRunsHeader is AppendBatchPutHeader asking for the compact
// reply (`runs`, ParseBatchPutRuns).
func AppendBatchPutRunsHeader(dst []byte, topic string, partition int32, count, blockLen int, checksum, opaque int32) []byte {
	return appendBatchPutHeader(dst, topic, partition, count, blockLen, checksum, true, opaque)
}

func appendBatchPutHeader(dst []byte, topic string, partition int32, count, blockLen int, checksum int32, runs bool, opaque int32) []byte {
	dst = append(dst, "mput "...)
	dst = append(dst, topic...)
	dst = appendIntField(dst, int64(partition))
	dst = appendIntField(dst, int64(count))
	dst = appendIntField(dst, int64(blockLen))
	if checksum != ChecksumNone {
		dst = appendIntField(dst, int64(checksum))
	}
	if runs {
		dst = append(dst, " runs"...)
	}
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendBatchEntry appends one entry of an mput block: `<size> <flag>\r\n`
// and d's data block.
func AppendBatchEntry(dst []byte, d *MessageData) []byte {
	dst = AppendBatchEntryHeader(dst, d.Len(), d.SendFlag())
	return d.AppendTo(dst)
}

// AppendBatchEntryHeader appends an entry's header line, `<size> <flag>\r\n`
// (size >= 0).
func AppendBatchEntryHeader(dst []byte, size int, flag int32) []byte {
	var b [64]byte
	i := putIntBack(&b, len(b)-2, int64(flag))
	b[len(b)-2], b[len(b)-1] = '\r', '\n'
	i--
	b[i] = ' '
	i = putIntBack(&b, i, int64(size))
	return append(dst, b[i:]...)
}

// BatchEntryLen is the size AppendBatchEntry adds for d.
func BatchEntryLen(d *MessageData) int {
	n := d.Len()
	return intLen(int64(n)) + 1 + intLen(int64(d.SendFlag())) + 2 + n
}

var (
	errEntryHeader = errors.New("bad mput entry header: want `<size> <flag>` ended by \\n")
	errEntrySize   = errors.New("mput entry size runs past the end of the block")
)

// NextBatchEntry splits the first entry off an mput block: its flag, its
// data (a sub-slice of b) and the rest of the block. It does not allocate.
// The header line is bounded: plain decimal numbers, the size at most 10
// digits, the flag an int32 (a leading '-' allowed), at most 25 bytes.
func NextBatchEntry(b []byte) (flag int32, data, rest []byte, err error) {
	// One pass over the header: size digits, one space, flag, [\r]\n.
	i, size := 0, int64(0)
	for ; i < len(b) && i <= 10; i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		size = size*10 + int64(d)
	}
	if i == 0 || i > 10 || i >= len(b) || b[i] != ' ' {
		return 0, nil, nil, errEntryHeader
	}
	i++
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	j, f := i, int64(0)
	for ; i < len(b) && i-j <= 10; i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		f = f*10 + int64(d)
	}
	if i == j || i-j > 10 {
		return 0, nil, nil, errEntryHeader
	}
	if neg {
		f = -f
	}
	if f < -1<<31 || f > 1<<31-1 {
		return 0, nil, nil, errEntryHeader
	}
	if i < len(b) && b[i] == '\r' {
		i++
	}
	if i >= len(b) || b[i] != '\n' {
		return 0, nil, nil, errEntryHeader
	}
	b = b[i+1:]
	if size > int64(len(b)) {
		return 0, nil, nil, errEntrySize
	}
	return int32(f), b[:size:size], b[size:], nil
}

// AppendBatchResultStart appends the start of an mput success body,
// `<partition> <firstOffset>`; AppendBatchResultID adds each message id.
func AppendBatchResultStart(dst []byte, partition int32, firstOffset int64) []byte {
	dst = strconv.AppendInt(dst, int64(partition), 10)
	return appendIntField(dst, firstOffset)
}

// AppendBatchResultID appends one message id to an mput success body.
func AppendBatchResultID(dst []byte, msgID int64) []byte { return appendIntField(dst, msgID) }

// AppendBatchRunsStart appends the start of a compact (`runs`) mput
// success body, `<partition> <firstOffset> <firstMsgId>`; AppendBatchRun
// adds each run of n records of size bytes.
func AppendBatchRunsStart(dst []byte, partition int32, firstOffset, firstID int64) []byte {
	dst = AppendBatchResultStart(dst, partition, firstOffset)
	return appendIntField(dst, firstID)
}

// AppendBatchRun appends one run, ` <size>` or ` <size>x<n>` (n >= 1).
func AppendBatchRun(dst []byte, size, n int) []byte {
	dst = appendIntField(dst, int64(size))
	if n > 1 {
		dst = append(dst, 'x')
		dst = strconv.AppendUint(dst, uint64(n), 10)
	}
	return dst
}

// ParseBatchPutRuns parses a compact (`runs`) mput success body for a frame
// of count messages into the partition, the first queue offset and the
// message ids (appended to ids[:0]). The runs must account for exactly
// count records.
func ParseBatchPutRuns(body []byte, count int, ids []int64) (partition int32, firstOffset int64, out []int64, err error) {
	out = ids[:0]
	bad := func(why string) error {
		return errors.New("protocol: bad mput runs result " + strconv.Quote(string(clip128(body))) +
			": " + why + " (want `<partition> <firstOffset> <firstMsgId> <size>[x<n>]…` for " + strconv.Itoa(count) + " messages)")
	}
	if n := len(body); n > 0 && body[n-1] == ' ' {
		return 0, 0, out, bad("trailing space")
	}
	rest := body
	field := func() []byte {
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			tok := rest
			rest = nil
			return tok
		}
		tok := rest[:i]
		rest = rest[i+1:]
		return tok
	}
	var ok bool
	if partition, ok = parseInt32(field()); !ok {
		return 0, 0, out, bad("partition")
	}
	if firstOffset, ok = parseInt64(field()); !ok || firstOffset < 0 {
		return 0, 0, out, bad("first offset")
	}
	id, ok := parseInt64(field())
	if !ok || id < 0 {
		return 0, 0, out, bad("first id")
	}
	for len(rest) > 0 {
		tok := field()
		n := int64(1)
		if x := bytes.IndexByte(tok, 'x'); x >= 0 {
			if n, ok = parseInt64(tok[x+1:]); !ok || n < 1 {
				return 0, 0, out, bad("run length")
			}
			tok = tok[:x]
		}
		size, ok := parseInt64(tok)
		if !ok || size < RecordOverhead || size > 1<<40 {
			return 0, 0, out, bad("record size")
		}
		if n > int64(count-len(out)) {
			return 0, 0, out, bad("more records than messages")
		}
		for ; n > 0; n-- {
			out = append(out, id)
			id += size
		}
	}
	if len(out) != count {
		return 0, 0, out, bad("fewer records than messages")
	}
	return partition, firstOffset, out, nil
}

// ParseBatchPutResult parses an mput success body into the partition, the
// first queue offset and the message ids (appended to ids[:0]).
func ParseBatchPutResult(body []byte, ids []int64) (partition int32, firstOffset int64, out []int64, err error) {
	out = ids[:0]
	bad := func() error {
		return errors.New("protocol: bad mput result " + strconv.Quote(string(clip128(body))) +
			": want `<partition> <firstOffset> <msgId>…`")
	}
	rest := body
	next := func() ([]byte, bool) {
		if len(rest) == 0 {
			return nil, false
		}
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			tok := rest
			rest = nil
			return tok, true
		}
		tok := rest[:i]
		rest = rest[i+1:]
		if len(rest) == 0 { // trailing space
			return nil, false
		}
		return tok, true
	}
	tp, ok := next()
	if !ok {
		return 0, 0, out, bad()
	}
	if partition, ok = parseInt32(tp); !ok {
		return 0, 0, out, bad()
	}
	to, ok := next()
	if !ok {
		return 0, 0, out, bad()
	}
	if firstOffset, ok = parseInt64(to); !ok {
		return 0, 0, out, bad()
	}
	for len(rest) > 0 {
		tok, ok := next()
		if !ok {
			return 0, 0, out, bad()
		}
		id, ok := parseInt64(tok)
		if !ok {
			return 0, 0, out, bad()
		}
		out = append(out, id)
	}
	return partition, firstOffset, out, nil
}

// parseBatchPut handles `mput <topic> <partition> <count> <len> [<checksum>] [runs] <opaque>`.
// The length field frames the stream, so a bad or oversized one is fatal as
// for put; everything else skips the block and answers 400.
func (p *Parser) parseBatchPut(line []byte, nf int) (lineAction, error) {
	c := &p.cmd
	c.Op = OpBatchPut
	okCount := nf >= 6 && nf <= 8
	if okCount {
		if v, ok := parseInt32(p.f(line, nf-1)); ok {
			c.Opaque, c.HasOpaque = v, true
		}
	}
	if nf < 5 {
		return 0, p.fatal("mput without a block length: the stream cannot be framed", c.Opaque, c.HasOpaque)
	}
	lb := p.f(line, 4)
	n, ok := parseInt64(lb)
	if !ok || n < 0 {
		return 0, p.fatal("invalid block length "+quoteField(lb)+": the stream cannot be framed", c.Opaque, c.HasOpaque)
	}
	if max := p.maxMessageSize(); n > int64(max) {
		return 0, p.fatal("mput block length "+strconv.FormatInt(n, 10)+" exceeds maxMessageSize "+strconv.Itoa(max), c.Opaque, c.HasOpaque)
	}
	p.dataLen = int(n)
	// The optional fields: 7 fields are a checksum or `runs`, 8 both.
	sumAt, runsAt := -1, -1
	switch nf {
	case 7:
		if string(p.f(line, 5)) == "runs" {
			runsAt = 5
		} else {
			sumAt = 5
		}
	case 8:
		sumAt, runsAt = 5, 6
	}
	if runsAt >= 0 && string(p.f(line, runsAt)) != "runs" {
		okCount = false
	}
	if !okCount {
		p.wrongCount(line, nf, "mput <topic> <partition> <count> <len> [<checksum>] [runs] <opaque>")
		return actData, nil
	}
	if !c.HasOpaque {
		p.opaqueAt(line, nf-1)
	}
	p.ix.topic = p.nameAt(line, 1, "topic")
	c.Partition = int32(p.num(line, 2, "partition", -1, maxI32))
	c.Count = int32(p.num(line, 3, "count", 1, MaxBatchCount))
	if int(c.Count) > p.dataLen/MinBatchEntry {
		// The broker sizes its scratch from the count: a 4-byte block must
		// not announce 10,000 messages.
		p.bad("mput of " + strconv.Itoa(int(c.Count)) + " messages in " + strconv.Itoa(p.dataLen) +
			" bytes: an entry takes at least " + strconv.Itoa(MinBatchEntry))
	}
	c.BatchRuns = runsAt >= 0
	if sumAt >= 0 {
		b := p.f(line, sumAt)
		v, ok := parseInt32(b)
		if !ok || v < -1 {
			p.bad("invalid checksum " + quoteField(b) + ": want CRC32(block)&0x7FFFFFFF or -1")
		}
		c.Checksum, c.HasChecksum = v, true
	}
	return actData, nil
}
