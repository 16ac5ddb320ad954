package protocol

import (
	"bytes"
	"errors"
	"strconv"
)

// Batch put (metaq; docs/protocol.md, "mput"): many messages for one
// partition in one frame, stored with one append.
//
//	mput <topic> <partition> <count> <len> [<checksum>] <opaque>\r\n<block>
//
// <block> is exactly <len> bytes: <count> entries, each
//
//	<size> <flag>\r\n<data>
//
// where <data> is a put's data block of <size> bytes (properties line and
// attribute as for put) and "\r\n" may be a bare "\n". <checksum>, when
// present, is MessageChecksum(<block>) (or -1: do not verify). The reply is
// one result for the whole frame:
//
//	result 200 <len> <opaque>\r\n<partition> <firstOffset> <msgId_1> … <msgId_count>
//
// message i (from 1) has queue offset firstOffset+i-1: the batch is stored
// as one run, so its queue offsets are consecutive. Any error refuses the
// whole frame and stores nothing. MetaQ 1.x clients never send mput, so
// they never see it.

// MaxBatchCount bounds the messages of one mput frame (the frame's bytes are
// bounded by the parser's MaxMessageSize, like a put's data).
const MaxBatchCount = 10000

// maxEntryHeader bounds an entry's header line, "\r\n" included:
// 10 digits of size, a space, 11 characters of flag.
const maxEntryHeader = 32

// AppendBatchPutHeader appends the header line of an mput frame whose block
// is blockLen bytes; checksum ChecksumNone omits the checksum field.
func AppendBatchPutHeader(dst []byte, topic string, partition int32, count, blockLen int, checksum, opaque int32) []byte {
	dst = append(dst, "mput "...)
	dst = append(dst, topic...)
	dst = appendIntField(dst, int64(partition))
	dst = appendIntField(dst, int64(count))
	dst = appendIntField(dst, int64(blockLen))
	if checksum != ChecksumNone {
		dst = appendIntField(dst, int64(checksum))
	}
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendBatchEntry appends one entry of an mput block: `<size> <flag>\r\n`
// and d's data block.
func AppendBatchEntry(dst []byte, d *MessageData) []byte {
	dst = strconv.AppendInt(dst, int64(d.Len()), 10)
	dst = appendIntField(dst, int64(d.SendFlag()))
	dst = append(dst, '\r', '\n')
	return d.AppendTo(dst)
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
func NextBatchEntry(b []byte) (flag int32, data, rest []byte, err error) {
	w := b
	if len(w) > maxEntryHeader {
		w = w[:maxEntryHeader]
	}
	nl := bytes.IndexByte(w, '\n')
	if nl < 0 {
		return 0, nil, nil, errEntryHeader
	}
	line := trimCR(w[:nl])
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, nil, nil, errEntryHeader
	}
	size, ok1 := parseInt64(line[:sp])
	f, ok2 := parseInt32(line[sp+1:])
	if !ok1 || !ok2 || size < 0 {
		return 0, nil, nil, errEntryHeader
	}
	b = b[nl+1:]
	if size > int64(len(b)) {
		return 0, nil, nil, errEntrySize
	}
	return f, b[:size:size], b[size:], nil
}

// AppendBatchResultStart appends the start of an mput success body,
// `<partition> <firstOffset>`; AppendBatchResultID adds each message id.
func AppendBatchResultStart(dst []byte, partition int32, firstOffset int64) []byte {
	dst = strconv.AppendInt(dst, int64(partition), 10)
	return appendIntField(dst, firstOffset)
}

// AppendBatchResultID appends one message id to an mput success body.
func AppendBatchResultID(dst []byte, msgID int64) []byte { return appendIntField(dst, msgID) }

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

// parseBatchPut handles `mput <topic> <partition> <count> <len> [<checksum>] <opaque>`.
// The length field frames the stream, so a bad or oversized one is fatal as
// for put; everything else skips the block and answers 400.
func (p *Parser) parseBatchPut(line []byte, nf int) (lineAction, error) {
	c := &p.cmd
	c.Op = OpBatchPut
	okCount := nf == 6 || nf == 7
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
	if !okCount {
		p.wrongCount(line, nf, "mput <topic> <partition> <count> <len> [<checksum>] <opaque>")
		return actData, nil
	}
	if !c.HasOpaque {
		p.opaqueAt(line, nf-1)
	}
	p.ix.topic = p.nameAt(line, 1, "topic")
	c.Partition = int32(p.num(line, 2, "partition", -1, maxI32))
	c.Count = int32(p.num(line, 3, "count", 1, MaxBatchCount))
	if nf == 7 {
		b := p.f(line, 5)
		v, ok := parseInt32(b)
		if !ok || v < -1 {
			p.bad("invalid checksum " + quoteField(b) + ": want CRC32(block)&0x7FFFFFFF or -1")
		}
		c.Checksum, c.HasChecksum = v, true
	}
	return actData, nil
}
