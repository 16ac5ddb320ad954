package protocol

import (
	"bytes"
	"strings"
)

// Properties are a URL query string (`tag=a&keys=o-1%20o-2&delay=3`). The
// broker stores them in the record verbatim; these helpers read them without
// allocating on the hot path (tag hashing in the dispatcher and on get).

// Well-known property keys.
const (
	PropTag        = "tag"
	PropKeys       = "keys"
	PropDelay      = "delay"
	PropRetryTopic = "retryTopic"
	PropBornTime   = "bornTime"
)

// NextProperty splits the first `key=value` pair off props: key and value
// are raw (still URL-escaped; value is nil when the pair has no '='), rest
// is what follows the '&'. Loop while len(props) > 0. It does not allocate.
func NextProperty(props []byte) (key, value, rest []byte) {
	pair := props
	if i := bytes.IndexByte(props, '&'); i >= 0 {
		pair, rest = props[:i], props[i+1:]
	}
	key = pair
	if i := bytes.IndexByte(pair, '='); i >= 0 {
		key, value = pair[:i], pair[i+1:]
	}
	return key, value, rest
}

// PropertyRaw returns the raw (still URL-escaped) value of key in props.
func PropertyRaw(props []byte, key string) ([]byte, bool) {
	for len(props) > 0 {
		var k, v []byte
		k, v, props = NextProperty(props)
		if string(k) == key {
			return v, true
		}
	}
	return nil, false
}

// Property returns the unescaped value of key in props ("" when absent).
func Property(props []byte, key string) string {
	raw, ok := PropertyRaw(props, key)
	if !ok {
		return ""
	}
	return Unescape(raw)
}

// Keys returns the message keys (the `keys` property split on spaces).
func Keys(props []byte) []string {
	v := Property(props, PropKeys)
	if v == "" {
		return nil
	}
	return strings.Fields(v)
}

// unhex returns the value of a hex digit or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// unescapeAt decodes the URL-escaped byte at raw[i] ('+' is a space, %XX a
// byte; a malformed escape is kept as is) and returns it with the index of
// the next one.
func unescapeAt(raw []byte, i int) (byte, int) {
	switch c := raw[i]; c {
	case '+':
		return ' ', i + 1
	case '%':
		if i+2 < len(raw) {
			if hi, lo := unhex(raw[i+1]), unhex(raw[i+2]); hi >= 0 && lo >= 0 {
				return byte(hi<<4 | lo), i + 3
			}
		}
		return c, i + 1
	default:
		return c, i + 1
	}
}

// Unescape decodes a URL-escaped property key or value ('+' is a space;
// malformed escapes are kept). It allocates only the returned string.
func Unescape(raw []byte) string {
	if bytes.IndexByte(raw, '%') < 0 && bytes.IndexByte(raw, '+') < 0 {
		return string(raw)
	}
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		var c byte
		c, i = unescapeAt(raw, i)
		b = append(b, c)
	}
	return string(b)
}

const hexDigits = "0123456789ABCDEF"

// AppendEscaped URL-escapes s for a properties line: RFC 3986 unreserved
// characters are kept, everything else (space included) becomes %XX.
func AppendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// TagHash is the 32-bit tag code stored in index units: FNV-1a over the tag's
// UTF-8 bytes, with 0 reserved for "no tag" (a hash of 0 becomes 1).
func TagHash(tag []byte) uint32 { return tagHash(tag) }

// TagHashString is TagHash for a string.
func TagHashString(tag string) uint32 { return tagHash(tag) }

func tagHash[T string | []byte](tag T) uint32 {
	if len(tag) == 0 {
		return 0
	}
	h := uint32(fnvOffset32)
	for i := 0; i < len(tag); i++ {
		h = fnvByte(h, tag[i])
	}
	return nonZeroTagHash(h)
}

// fnvByte is one FNV-1a step.
func fnvByte(h uint32, c byte) uint32 { return (h ^ uint32(c)) * fnvPrime32 }

// nonZeroTagHash maps a hash of 0 (reserved for "no tag") to 1.
func nonZeroTagHash(h uint32) uint32 {
	if h == 0 {
		return 1
	}
	return h
}

// PropsTagHash returns the TagHash of the unescaped `tag` property, or 0 when
// props carry no tag. It does not allocate.
func PropsTagHash(props []byte) uint32 {
	raw, ok := PropertyRaw(props, PropTag)
	if !ok || len(raw) == 0 {
		return 0
	}
	// raw is not empty, so at least one byte is hashed.
	h := uint32(fnvOffset32)
	for i := 0; i < len(raw); {
		var c byte
		c, i = unescapeAt(raw, i)
		h = fnvByte(h, c)
	}
	return nonZeroTagHash(h)
}

// TagFilter is a parsed subscription expression: `*` (everything) or
// `a||b||c`. The zero value and nil match everything.
type TagFilter struct {
	all    bool
	hashes []uint32
	tags   []string
	match  RecordMatcher // an expression on the whole record (recordmatch.go); nil = none
}

// ParseTagFilter parses `*`, "" (both: everything) or `a||b`.
func ParseTagFilter(expr string) *TagFilter {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return &TagFilter{all: true}
	}
	f := &TagFilter{}
	for _, t := range strings.Split(expr, "||") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if t == "*" {
			return &TagFilter{all: true}
		}
		f.tags = append(f.tags, t)
		f.hashes = append(f.hashes, TagHashString(t))
	}
	if len(f.tags) == 0 {
		f.all = true
	}
	return f
}

// All reports whether the filter matches every message.
func (f *TagFilter) All() bool { return f == nil || f.all && f.match == nil }

// MatchHash reports whether a unit's tag hash may match (hash collisions are
// possible; clients re-check the tag string).
func (f *TagFilter) MatchHash(h uint32) bool {
	if f == nil || f.all {
		return true
	}
	for _, x := range f.hashes {
		if x == h {
			return true
		}
	}
	return false
}

// MatchTag reports whether a tag string matches exactly.
func (f *TagFilter) MatchTag(tag string) bool {
	if f == nil || f.all {
		return true
	}
	for _, t := range f.tags {
		if t == tag {
			return true
		}
	}
	return false
}

// String renders the filter back to its expression.
func (f *TagFilter) String() string {
	if f == nil || f.all {
		return "*"
	}
	return strings.Join(f.tags, "||")
}
