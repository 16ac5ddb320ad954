package protocol

// The put fast path: one pass over the common put, in the style of
// nats-server's parser, which switches on each byte as it arrives instead of
// splitting the line first.
//
// A producer's pipelined puts are almost all the same shape,
//
//	put <topic> <partition> <len> <flag> [<checksum>] <opaque>\r\n<data>
//
// with the line and the data whole in the read buffer. The general path
// looks at such a put several times: the first-token scan, the search for
// the line end, the split into field spans, the name check and five integer
// parses over those spans, then the binding of every named field; ~240 ns of
// the ~1.2–1.6 µs of broker CPU an async put costs (BenchmarkParsePut100,
// bench/README.md). fastPut reads the line once, left to right: the name
// characters are checked as the topic is scanned, each integer is
// accumulated as its digits go by, the separators and the line end are
// checked where they must be, and the Command is filled directly.
//
// It only ever accepts what the general path accepts with the same result,
// and it gives up (returns ok false, having consumed and changed nothing)
// on anything else: a line split across reads or data not yet whole in the
// buffer, extra spaces, a txKey, an integer with more than 10 digits or out
// of its field's range, a data length over MaxMessageSize, a checksum that
// does not match, a name that is not valid. The general path then handles
// the put and produces the exact error or partial-read state it always did.
// FuzzFastPut checks both paths deliver the same command for any line.

// fastPut parses and delivers one put at the start of b, if it is in the
// common shape and whole (line and data). It returns the bytes consumed and
// ok; when ok is false nothing was consumed. err is the handler's error.
func (p *Parser) fastPut(b []byte, h Handler) (n int, ok bool, err error) {
	// "put " (any case, as the general path allows) and at least one byte
	// of each field.
	if len(b) < len("put t 0 0 0 0\n") || b[0]|0x20 != 'p' || b[1]|0x20 != 'u' || b[2]|0x20 != 't' || b[3] != ' ' {
		return 0, false, nil
	}
	j := 4
	ts := j
	for j < len(b) && nameChar[b[j]] {
		j++
	}
	te := j
	if tl := te - ts; te >= len(b) || b[te] != ' ' || tl == 0 || tl > MaxNameLen || (b[ts] == '.' && (tl == 1 || (tl == 2 && b[ts+1] == '.'))) {
		return 0, false, nil
	}
	var part, dlen, flag, f5, f6 int64
	if part, j, ok = fastInt(b, j+1, ' '); !ok || j >= len(b) || part < -1 || part > maxI32 {
		return 0, false, nil
	}
	if dlen, j, ok = fastInt(b, j, ' '); !ok || j >= len(b) || dlen < 0 || dlen > int64(p.maxMessageSize()) {
		return 0, false, nil
	}
	if flag, j, ok = fastInt(b, j, ' '); !ok || j >= len(b) || flag < minI32 || flag > maxI32 {
		return 0, false, nil
	}
	// The fifth field is the opaque (6 fields) or the checksum (7 fields,
	// a number there: MetaQ looks at the first character).
	if f5, j, ok = fastInt(b, j, 0); !ok || j >= len(b) || f5 < minI32 || f5 > maxI32 {
		return 0, false, nil
	}
	hasCk := b[j] == ' '
	if hasCk {
		if f6, j, ok = fastInt(b, j+1, 0); !ok || j >= len(b) || f6 < minI32 || f6 > maxI32 || f5 < -1 {
			return 0, false, nil
		}
	}
	// The line end: "\r\n" or "\n".
	le := j
	switch {
	case b[j] == '\n':
	case b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n':
		j++
	default:
		return 0, false, nil
	}
	ds := j + 1
	if int64(len(b)-ds) < dlen {
		return 0, false, nil // the data continues in a later read
	}
	de := ds + int(dlen)
	data := b[ds:de:de]
	if hasCk && f5 != -1 && MessageChecksum(data) != int32(f5) {
		return 0, false, nil // the general path answers the mismatch
	}
	c := &p.cmd
	if !p.putOnly { // the general path filled other fields: clear them once
		*c = Command{}
		p.putOnly = true
	}
	// Every field a put sets, so that c equals
	// Command{Op: OpPut, Opaque: …, HasOpaque: true, Checksum: …,
	// HasChecksum: …, Partition: …, Flag: …, Line: …, Topic: …, Data: …}.
	c.Op, c.Opaque, c.HasOpaque, c.Checksum, c.HasChecksum = OpPut, int32(f5), true, -1, false
	if hasCk {
		c.Opaque, c.Checksum, c.HasChecksum = int32(f6), int32(f5), true
	}
	c.Partition, c.Flag = int32(part), int32(flag)
	p.ix = fieldIx{}
	p.dataLen = int(dlen)
	c.Line = b[:le:le]
	c.Topic = b[ts:te:te]
	c.Data = data
	err = h(c)
	c.Data = nil // as deliver: a large buffer is not kept alive by p.cmd
	return de, true, err
}

// fastInt reads an integer starting at b[j] (an optional '-', then 1 to 10
// digits) that must end at a space (or, with end 0, at a space or a line
// end). It returns the value and the index just past the space (end ' ') or
// of the byte that ended it (end 0).
func fastInt(b []byte, j int, end byte) (int64, int, bool) {
	neg := j < len(b) && b[j] == '-'
	if neg {
		j++
	}
	s := j
	var v int64
	for j < len(b) && j-s <= 10 {
		d := b[j] - '0'
		if d > 9 {
			break
		}
		v = v*10 + int64(d)
		j++
	}
	if j == s || j-s > 10 || j >= len(b) {
		return 0, j, false
	}
	if neg {
		v = -v
	}
	switch c := b[j]; {
	case end == ' ':
		if c != ' ' {
			return 0, j, false
		}
		return v, j + 1, true
	case c == ' ' || c == '\r' || c == '\n':
		return v, j, true
	}
	return 0, j, false
}
