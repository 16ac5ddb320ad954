package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// The data block of a put, as sent (docs/protocol.md §3, "The data block"):
//
//	[properties line '\n']   when flag bit 1 (FlagHasProperties) is set (metaq)
//	[attrLen(4, big-endian) attribute]   when flag bit 0 (FlagHasAttribute) is set (MetaQ)
//	payload
//
// The broker strips the properties line (SplitProperties) and stores the rest
// with bit 1 cleared, so what a consumer reads back is exactly MetaQ's
// [attribute]+payload. The put checksum covers the data as sent, properties
// line included.

// Errors of the data-block helpers.
var (
	ErrNoPropertiesEnd   = errors.New("protocol: flag bit 1 set but the data has no properties line ending in '\\n'")
	ErrPropertiesTooLong = errors.New("protocol: properties line longer than 65535 bytes")
	ErrBadProperties     = errors.New("protocol: control character in properties line")
	ErrBadAttribute      = errors.New("protocol: flag bit 0 set but the data has no valid attribute length")
)

// SplitProperties strips the properties line from a put's data when flag bit
// 1 is set: props is the line without its "\n" (and without a "\r" before
// it, for telnet users), rest is the data to store and newFlag is flag with
// bit 1 cleared. Without bit 1 it returns (nil, data, flag, nil). props and
// rest alias data. It does not allocate.
func SplitProperties(flag int32, data []byte) (props, rest []byte, newFlag int32, err error) {
	if flag&FlagHasProperties == 0 {
		return nil, data, flag, nil
	}
	w := data
	if len(w) > MaxPropertiesLen+2 { // line + "\r\n"
		w = w[:MaxPropertiesLen+2]
	}
	i := bytes.IndexByte(w, '\n')
	if i < 0 {
		if len(w) < len(data) {
			return nil, nil, flag, ErrPropertiesTooLong
		}
		return nil, nil, flag, ErrNoPropertiesEnd
	}
	props, rest = data[:i:i], data[i+1:]
	if n := len(props); n > 0 && props[n-1] == '\r' {
		props = props[: n-1 : n-1]
	}
	if len(props) > MaxPropertiesLen {
		return nil, nil, flag, ErrPropertiesTooLong
	}
	for _, c := range props {
		if c < 0x20 || c == 0x7f {
			return nil, nil, flag, ErrBadProperties
		}
	}
	return props, rest, flag &^ FlagHasProperties, nil
}

// AttributeOf splits a stored data block (properties already stripped) into
// MetaQ's attribute and the payload when flag bit 0 is set; otherwise it
// returns (nil, data, nil). Both alias data.
func AttributeOf(flag int32, data []byte) (attr, payload []byte, err error) {
	if flag&FlagHasAttribute == 0 {
		return nil, data, nil
	}
	if len(data) < 4 {
		return nil, nil, ErrBadAttribute
	}
	n := binary.BigEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-4) {
		return nil, nil, ErrBadAttribute
	}
	return data[4 : 4+n : 4+n], data[4+n:], nil
}

// MessageData is a put's data block in its pieces: a client checksums and
// writes it without assembling it first (AppendTo appends it straight into
// the connection's write buffer).
type MessageData struct {
	Flag    int32  // the message's flag; bits 0 and 1 are set from the pieces (SendFlag)
	Props   []byte // properties line without its '\n' (a URL query string); empty: none
	Attr    string // MetaQ's attribute, sent when HasAttr (possibly empty)
	HasAttr bool
	Payload []byte
}

// SendFlag is the flag to send: Flag with bit 1 set when there is a
// properties line and bit 0 when there is an attribute, cleared otherwise.
func (d *MessageData) SendFlag() int32 {
	f := d.Flag &^ (FlagHasProperties | FlagHasAttribute)
	if len(d.Props) > 0 {
		f |= FlagHasProperties
	}
	if d.HasAttr {
		f |= FlagHasAttribute
	}
	return f
}

// Len is the size of the data block.
func (d *MessageData) Len() int {
	n := len(d.Payload)
	if len(d.Props) > 0 {
		n += len(d.Props) + 1
	}
	if d.HasAttr {
		n += 4 + len(d.Attr)
	}
	return n
}

var newline = []byte{'\n'}

// Checksum is MessageChecksum of the data block, computed over the pieces.
func (d *MessageData) Checksum() int32 {
	var crc uint32
	if len(d.Props) > 0 {
		crc = crc32.Update(crc, crc32.IEEETable, d.Props)
		crc = crc32.Update(crc, crc32.IEEETable, newline)
	}
	if d.HasAttr {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(d.Attr)))
		crc = crcBytes(crc, l[:])
		crc = crcBytes(crc, d.Attr)
	}
	crc = crc32.Update(crc, crc32.IEEETable, d.Payload)
	return int32(crc & 0x7FFFFFFF)
}

// crcBytes is crc32.Update(crc, IEEETable, []byte(s)) a byte at a time,
// without the conversion or the escape (Update's argument escapes to the
// heap: a string converted for it, or a stack array sliced for it, would be
// allocated). For the attribute and its length, a few bytes.
func crcBytes[T string | []byte](crc uint32, s T) uint32 {
	c := ^crc
	for i := 0; i < len(s); i++ {
		c = crc32.IEEETable[byte(c)^s[i]] ^ (c >> 8)
	}
	return ^c
}

// AppendTo appends the data block to dst.
func (d *MessageData) AppendTo(dst []byte) []byte {
	return appendMessageData(dst, d.Props, d.Attr, d.HasAttr, d.Payload)
}

// AppendPutMessage appends a whole put of d: header line (see
// AppendPutHeader for the forms) and data block. Pass d.Checksum() as
// checksum to have the broker verify the data, ChecksumNone for the 6-field
// form.
func AppendPutMessage(dst []byte, topic string, partition int32, d *MessageData, checksum int32, opaque int32) []byte {
	dst = AppendPutHeader(dst, topic, partition, d.Len(), d.SendFlag(), checksum, "", opaque)
	return d.AppendTo(dst)
}

// AppendMessageData appends a put data block to dst and returns it with the
// flag to send: bit 1 is set when props is not empty (props must be a URL
// query string without '\n', at most MaxPropertiesLen bytes), bit 0 when
// hasAttr (MetaQ's attribute, possibly empty). Other bits of flag are kept.
// (MessageData is the same block in pieces.)
func AppendMessageData(dst []byte, flag int32, props []byte, attr []byte, hasAttr bool, payload []byte) ([]byte, int32) {
	d := MessageData{Flag: flag, Props: props, HasAttr: hasAttr}
	return appendMessageData(dst, props, attr, hasAttr, payload), d.SendFlag()
}

func appendMessageData[A string | []byte](dst, props []byte, attr A, hasAttr bool, payload []byte) []byte {
	if len(props) > 0 {
		dst = append(dst, props...)
		dst = append(dst, '\n')
	}
	if hasAttr {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(attr)))
		dst = append(dst, attr...)
	}
	return append(dst, payload...)
}

// TagExprMatchHash reports whether a record whose tag hash is h may match the
// get command's tag expression (`*`, "" or `a||b`), with the semantics of
// ParseTagFilter, without allocating. Hash collisions are possible; clients
// re-check the tag string.
func TagExprMatchHash(expr []byte, h uint32) bool {
	expr = bytes.TrimSpace(expr)
	all := true
	for len(expr) > 0 {
		var t []byte
		if i := bytes.Index(expr, []byte("||")); i >= 0 {
			t, expr = expr[:i], expr[i+2:]
		} else {
			t, expr = expr, nil
		}
		t = bytes.TrimSpace(t)
		if len(t) == 0 {
			continue
		}
		if len(t) == 1 && t[0] == '*' {
			return true
		}
		all = false
		if TagHash(t) == h {
			return true
		}
	}
	return all
}
