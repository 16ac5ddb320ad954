package filter

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
)

// Expr is a compiled expression.
type Expr struct {
	src   string
	nodes []node
	root  int32
	props []*property
	// keys are the distinct properties-line keys the expression reads;
	// Match finds all of them in one pass over the line (slot i holds
	// keys[i]'s value). More than maxSlots: each reference looks its key up.
	keys [][]byte
	// sig is the condition on a record's property signature for the
	// expression to be true (signature.go); sigUseful: it can be false.
	sig       sigCond
	sigUseful bool
}

// maxSlots bounds the keys found in one pass.
const maxSlots = 8

// slots holds where the values of Expr.keys are in one message's
// properties (on the stack: small, so that zeroing it is cheap).
type slots struct {
	v     [maxSlots]span
	found uint8
}

type span struct{ off, n int32 }

func (sl *slots) set(s int, props, v []byte) {
	sl.v[s] = span{int32(cap(props) - cap(v)), int32(len(v))} // v aliases props
	sl.found |= 1 << s
}

// assignSlots numbers the distinct keys the expression reads (after parsing).
func (e *Expr) assignSlots() {
	for _, p := range e.props {
		p.slot = -1
		if p.field != fieldProps {
			continue
		}
		for i, k := range e.keys {
			if string(k) == string(p.key) {
				p.slot = i
			}
		}
		if p.slot < 0 {
			p.slot = len(e.keys)
			e.keys = append(e.keys, p.key)
		}
	}
	if len(e.keys) > maxSlots {
		e.keys = nil
		for _, p := range e.props {
			p.slot = -1
		}
	}
}

// scan fills sl with the first value of each of e.keys in props: one pass
// that stops once every key was found. A line without escapes (the usual
// case) is walked pair by pair with a prefix check per key and a
// vectorised skip to the next '&'.
func (e *Expr) scan(props []byte, sl *slots) {
	if bytes.IndexByte(props, '%') >= 0 || bytes.IndexByte(props, '+') >= 0 {
		e.scanEscaped(props, sl)
		return
	}
	want := uint8(1<<len(e.keys) - 1)
	for rest := props; ; {
		for s, key := range e.keys {
			n := len(key)
			if sl.found&(1<<s) != 0 || len(rest) < n || string(rest[:n]) != string(key) {
				continue
			}
			if n == len(rest) || rest[n] == '&' {
				sl.set(s, props, rest[n:n])
				break
			}
			if rest[n] == '=' {
				v := rest[n+1:]
				if k := bytes.IndexByte(v, '&'); k >= 0 {
					v = v[:k]
				}
				sl.set(s, props, v)
				break
			}
		}
		if sl.found == want {
			return
		}
		k := bytes.IndexByte(rest, '&')
		if k < 0 {
			return
		}
		rest = rest[k+1:]
	}
}

// scanEscaped is scan for a line that may hold escaped keys: a key is
// compared unescaped (as lookup does).
func (e *Expr) scanEscaped(props []byte, sl *slots) {
	want := uint8(1<<len(e.keys) - 1)
	for i := 0; i < len(props) && sl.found != want; {
		j, eq := i, -1
		for ; j < len(props); j++ {
			if c := props[j]; c == '&' {
				break
			} else if c == '=' && eq < 0 {
				eq = j
			}
		}
		k, v := props[i:j], props[j:j]
		if eq >= 0 {
			k, v = props[i:eq], props[eq+1:j]
		}
		i = j + 1
		if len(k) == 0 {
			continue
		}
		matched := false
		for s, key := range e.keys {
			if sl.found&(1<<s) == 0 && string(k) == string(key) {
				sl.set(s, props, v)
				matched = true
				break
			}
		}
		if !matched && needsUnescape(k, true) { // a key written escaped
			for s, key := range e.keys {
				if sl.found&(1<<s) == 0 && eqEscaped(k, true, key, false) {
					sl.set(s, props, v)
					break
				}
			}
		}
	}
}

// raw is the raw value of property p (a properties-line key) in m.
func (e *Expr) raw(p *property, m *Message, sl *slots) ([]byte, bool) {
	if p.slot >= 0 && sl != nil {
		if sl.found&(1<<p.slot) == 0 {
			return nil, false
		}
		sp := sl.v[p.slot]
		return m.Props[sp.off : sp.off+sp.n : sp.off+sp.n], true
	}
	return lookup(m.Props, p.key)
}

// String returns the expression as written.
// A nil Expr is "".
func (e *Expr) String() string {
	if e == nil {
		return ""
	}
	return e.src
}

// Message is what an expression looks at: the raw properties line of a
// record (a URL query string) and the two header fields expressions may
// name.
type Message struct {
	Props          []byte
	BornTime       int64 // unix ms
	ReconsumeTimes int64
}

// Match reports whether m satisfies the expression; an unknown result (a
// comparison with a missing property) does not match. It does not allocate.
func (e *Expr) Match(m *Message) bool {
	if len(e.keys) < 2 { // no key, one key (a lookup is the scan), or more than maxSlots (keys dropped)
		return e.eval(e.root, m, nil) == yes
	}
	var sl slots
	e.scan(m.Props, &sl)
	return e.eval(e.root, m, &sl) == yes
}

// MatchRecord evaluates the expression against an encoded record (the
// commit log's and the wire's layout, protocol/record.go). A record too
// short to hold its properties does not match. It does not allocate.
func (e *Expr) MatchRecord(rec []byte) bool {
	if len(rec) < protocol.RecordOverhead {
		return false
	}
	be := binary.BigEndian
	m := Message{
		BornTime:       int64(be.Uint64(rec[protocol.OffBornTime:])),
		ReconsumeTimes: int64(be.Uint16(rec[protocol.OffReconsumeTimes:])),
	}
	at := protocol.OffTopicLen + 1 + int(rec[protocol.OffTopicLen])
	if at+2 > len(rec) {
		return false
	}
	n := int(be.Uint16(rec[at:]))
	if at+2+n > len(rec) {
		return false
	}
	m.Props = rec[at+2 : at+2+n]
	return e.Match(&m)
}

// tri is SQL's three-valued logic.
type tri uint8

const (
	no tri = iota
	yes
	unknown
)

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

type opcode uint8

const (
	opTrue opcode = iota
	opFalse
	opAnd
	opOr
	opNot
	opCmp
	opBetween
	opIn
	opIsNull
)

type cmpOp uint8

const (
	cmpEq cmpOp = iota
	cmpNe
	cmpLt
	cmpLe
	cmpGt
	cmpGe
)

// node is one condition; a and b index Expr.nodes.
type node struct {
	op      opcode
	cmp     cmpOp
	neg     bool
	a, b    int32
	x, y, z operand
	list    []value
	strList bool // IN: every literal of list is a string
}

// operand is a property reference (prop != nil) or a literal.
type operand struct {
	prop *property
	lit  value
}

type field uint8

const (
	fieldProps field = iota // a key of the properties line
	fieldBornTime
	fieldReconsumeTimes
)

// property is a name an expression refers to.
type property struct {
	name  string // as written
	key   []byte // the properties-line key it reads (fieldProps)
	field field
	slot  int // index in Expr.keys (-1: looked up)
}

// Names with a meaning of their own; any other name is a key of the
// properties line. RocketMQ's TAGS and KEYS are aliases of metaq's tag and
// keys properties.
var builtins = map[string]property{
	"TAGS":           {key: []byte(protocol.PropTag)},
	"KEYS":           {key: []byte(protocol.PropKeys)},
	"bornTime":       {field: fieldBornTime},
	"reconsumeTimes": {field: fieldReconsumeTimes},
}

func (e *Expr) property(name string) *property {
	for _, p := range e.props {
		if p.name == name {
			return p
		}
	}
	p, ok := builtins[name]
	if !ok {
		p = property{key: []byte(name)}
	}
	p.name = name
	e.props = append(e.props, &p)
	return &p
}

type kind uint8

const (
	kNull kind = iota
	kStr
	kNum
	kBool
)

// value is an evaluated operand. Strings read from a properties line are
// still URL-escaped (esc); literals are not.
type value struct {
	k     kind
	b     bool
	isInt bool // a number held exactly in i
	esc   bool
	i     int64
	f     float64
	s     []byte
}

func (e *Expr) eval(i int32, m *Message, sl *slots) tri {
	n := &e.nodes[i]
	switch n.op {
	case opTrue:
		return yes
	case opFalse:
		return no
	case opAnd:
		l := e.eval(n.a, m, sl)
		if l == no {
			return no
		}
		r := e.eval(n.b, m, sl)
		if r == no {
			return no
		}
		if l == yes && r == yes {
			return yes
		}
		return unknown
	case opOr:
		l := e.eval(n.a, m, sl)
		if l == yes {
			return yes
		}
		r := e.eval(n.b, m, sl)
		if r == yes {
			return yes
		}
		if l == no && r == no {
			return no
		}
		return unknown
	case opNot:
		return not(e.eval(n.a, m, sl))
	case opCmp:
		if p := n.x.prop; p != nil && n.y.prop == nil {
			if p.field == fieldProps {
				raw, ok := e.raw(p, m, sl)
				if !ok {
					return unknown
				}
				return cmpRawLit(n.cmp, raw, &n.y.lit)
			}
			if n.y.lit.isInt { // bornTime, reconsumeTimes against an integer
				return order(n.cmp, cmpInt(e.get(&n.x, m, sl).i, n.y.lit.i))
			}
		}
		return compare(n.cmp, e.get(&n.x, m, sl), e.get(&n.y, m, sl))
	case opBetween:
		var r tri
		if p := n.x.prop; p != nil && p.field == fieldProps && n.y.prop == nil && n.z.prop == nil {
			raw, ok := e.raw(p, m, sl)
			if !ok {
				return unknown
			}
			r = and(cmpRawLit(cmpGe, raw, &n.y.lit), cmpRawLit(cmpLe, raw, &n.z.lit))
		} else {
			x := e.get(&n.x, m, sl)
			r = and(compare(cmpGe, x, e.get(&n.y, m, sl)), compare(cmpLe, x, e.get(&n.z, m, sl)))
		}
		return negIf(n.neg, r)
	case opIn:
		// The value is a raw property (compared with cmpRawLit, or as bytes
		// when every literal is a string and it has no escapes) or any other
		// operand (compare).
		var raw []byte
		var x value
		isRaw := false
		if p := n.x.prop; p != nil && p.field == fieldProps {
			var ok bool
			if raw, ok = e.raw(p, m, sl); !ok {
				return unknown
			}
			isRaw = true
			if n.strList && !needsUnescape(raw, true) {
				r := no
				for j := range n.list {
					if string(raw) == string(n.list[j].s) {
						r = yes
						break
					}
				}
				return negIf(n.neg, r)
			}
		} else if x = e.get(&n.x, m, sl); x.k == kNull {
			return unknown
		}
		r := no
		for j := range n.list {
			var t tri
			if isRaw {
				t = cmpRawLit(cmpEq, raw, &n.list[j])
			} else {
				t = compare(cmpEq, x, n.list[j])
			}
			if t == yes {
				r = yes
				break
			}
			if t == unknown {
				r = unknown
			}
		}
		return negIf(n.neg, r)
	case opIsNull:
		return triOf((e.get(&n.x, m, sl).k == kNull) != n.neg)
	}
	return unknown
}

// negIf is not(t) for a NOT BETWEEN / NOT IN, t otherwise.
func negIf(neg bool, t tri) tri {
	if neg {
		return not(t)
	}
	return t
}

func not(t tri) tri {
	switch t {
	case yes:
		return no
	case no:
		return yes
	}
	return unknown
}

func and(l, r tri) tri {
	switch {
	case l == no || r == no:
		return no
	case l == yes && r == yes:
		return yes
	}
	return unknown
}

// get evaluates the operand x for m.
func (e *Expr) get(x *operand, m *Message, sl *slots) value {
	p := x.prop
	if p == nil {
		return x.lit
	}
	switch p.field {
	case fieldBornTime:
		return value{k: kNum, isInt: true, i: m.BornTime}
	case fieldReconsumeTimes:
		return value{k: kNum, isInt: true, i: m.ReconsumeTimes}
	}
	raw, ok := e.raw(p, m, sl)
	if !ok {
		return value{}
	}
	return value{k: kStr, esc: true, s: raw}
}

// lookup returns the raw value of key in a properties line; keys are
// compared unescaped. One pass over the line: a key written plainly is
// recognized by its prefix, an escaped one (with '%' or '+') is unescaped
// for the comparison.
func lookup(props, key []byte) ([]byte, bool) {
	for i := 0; i < len(props); {
		if n := len(key); i+n <= len(props) && string(props[i:i+n]) == string(key) {
			switch {
			case i+n == len(props) || props[i+n] == '&':
				return props[i+n : i+n], true
			case props[i+n] == '=':
				v := props[i+n+1:]
				for j, c := range v {
					if c == '&' {
						return v[:j], true
					}
				}
				return v, true
			}
		}
		j, eq, esc := i, -1, false
		for ; j < len(props) && props[j] != '&'; j++ {
			if eq < 0 {
				switch props[j] {
				case '=':
					eq = j
				case '%', '+':
					esc = true
				}
			}
		}
		if esc {
			k, v := props[i:j], props[j:j]
			if eq >= 0 {
				k, v = props[i:eq], props[eq+1:j]
			}
			if eqEscaped(k, true, key, false) {
				return v, true
			}
		}
		i = j + 1
	}
	return nil, false
}

// eqEscaped compares a and b byte by byte after URL-unescaping those marked
// escaped.
func eqEscaped(a []byte, aEsc bool, b []byte, bEsc bool) bool {
	if !aEsc && !bEsc || !needsUnescape(a, aEsc) && !needsUnescape(b, bEsc) {
		return string(a) == string(b)
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ca, cb byte
		ca, i = next(a, i, aEsc)
		cb, j = next(b, j, bEsc)
		if ca != cb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

func needsUnescape(s []byte, esc bool) bool {
	if !esc {
		return false
	}
	for _, c := range s {
		if c == '%' || c == '+' {
			return true
		}
	}
	return false
}

func next(s []byte, i int, esc bool) (byte, int) {
	if !esc {
		return s[i], i + 1
	}
	return protocol.UnescapeAt(s, i)
}

// cmpRawLit compares a raw (escaped) property value with a literal.
func cmpRawLit(op cmpOp, raw []byte, lit *value) tri {
	switch {
	case lit.k == kStr && (op == cmpEq || op == cmpNe):
		return triOf(eqEscaped(raw, true, lit.s, false) == (op == cmpEq))
	case lit.k == kNum && lit.isInt:
		if i, ok := plainInt(raw); ok {
			return order(op, cmpInt(i, lit.i))
		}
	}
	return compare(op, value{k: kStr, esc: true, s: raw}, *lit)
}

// plainInt reads a decimal integer with at most 18 digits and no escapes
// (what numeric properties usually look like).
func plainInt(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func order(op cmpOp, c int) tri {
	switch op {
	case cmpEq:
		return triOf(c == 0)
	case cmpNe:
		return triOf(c != 0)
	case cmpLt:
		return triOf(c < 0)
	case cmpLe:
		return triOf(c <= 0)
	case cmpGt:
		return triOf(c > 0)
	}
	return triOf(c >= 0)
}

// compare applies a comparison with RocketMQ's conversions: a string
// compared with a number is read as a number, with a boolean as a boolean
// ("true", any case, is TRUE, anything else FALSE); strings order as
// numbers. A missing property or a failed conversion makes the result
// unknown.
func compare(op cmpOp, x, y value) tri {
	if x.k == kNull || y.k == kNull {
		return unknown
	}
	if x.k == kStr && y.k == kStr && (op == cmpEq || op == cmpNe) {
		return triOf(eqEscaped(x.s, x.esc, y.s, y.esc) == (op == cmpEq))
	}
	if x.k == kBool || y.k == kBool {
		if op != cmpEq && op != cmpNe {
			return unknown
		}
		xb, ok1 := toBool(x)
		yb, ok2 := toBool(y)
		if !ok1 || !ok2 {
			return unknown
		}
		return triOf((xb == yb) == (op == cmpEq))
	}
	if !toNum(&x) || !toNum(&y) {
		return unknown
	}
	if x.isInt && y.isInt {
		return order(op, cmpInt(x.i, y.i))
	}
	return order(op, cmpFloat(x.float(), y.float()))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (v value) float() float64 {
	if v.isInt {
		return float64(v.i)
	}
	return v.f
}

func toBool(v value) (bool, bool) {
	switch v.k {
	case kBool:
		return v.b, true
	case kStr:
		s := v.s
		if needsUnescape(s, v.esc) {
			var buf [8]byte
			s, _ = unescapeSmall(buf[:0], v)
		}
		return len(s) == 4 && (s[0]|0x20) == 't' && (s[1]|0x20) == 'r' && (s[2]|0x20) == 'u' && (s[3]|0x20) == 'e', true
	}
	return false, false
}

func toNum(v *value) bool {
	switch v.k {
	case kNum:
		return true
	case kStr:
		if v.esc && len(v.s) > 0 && v.s[0] == '+' { // an escaped space
			return false
		}
		n, ok := parseNumber(v.s)
		if !ok && needsUnescape(v.s, v.esc) {
			n, ok = slowNum(v)
		}
		*v = n
		return ok
	}
	return false
}

func slowNum(v *value) (value, bool) {
	var buf [64]byte
	s, ok := unescapeSmall(buf[:0], *v)
	if !ok || len(s) > 0 && s[0] == '+' {
		return value{}, false
	}
	return parseNumber(s)
}

// unescapeSmall unescapes a string value into buf (an empty slice with the
// capacity wanted); false when it does not fit (such a value is neither a
// number nor a boolean).
func unescapeSmall(buf []byte, v value) ([]byte, bool) {
	b := buf
	for i := 0; i < len(v.s); {
		if len(b) == cap(b) {
			return nil, false
		}
		var c byte
		c, i = protocol.UnescapeAt(v.s, i)
		b = append(b, c)
	}
	return b, true
}

// parseNumber reads an integer (exactly, when it fits int64) or a decimal
// number; surrounding spaces are not allowed. It does not allocate.
func parseNumber(s []byte) (value, bool) {
	if len(s) == 0 || len(s) > 64 {
		return value{}, false
	}
	i := 0
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		i++
	}
	if i == len(s) {
		return value{}, false
	}
	var u uint64
	j := i
	for ; j < len(s) && isDigit(s[j]); j++ {
		if u > (math.MaxUint64-9)/10 {
			u = math.MaxUint64 // too large for an integer: read as a float below
			continue
		}
		u = u*10 + uint64(s[j]-'0')
	}
	if j == len(s) && j > i {
		if !neg && u <= math.MaxInt64 {
			return value{k: kNum, isInt: true, i: int64(u)}, true
		}
		if neg && u <= 1<<63 {
			return value{k: kNum, isInt: true, i: -int64(u)}, true
		}
	}
	// Validate the decimal syntax first, so that ParseFloat never fails
	// (its errors allocate).
	digits := j - i
	if j < len(s) && s[j] == '.' {
		j++
		for ; j < len(s) && isDigit(s[j]); j++ {
			digits++
		}
	}
	if digits == 0 {
		return value{}, false
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		negExp := j < len(s) && s[j] == '-'
		if j < len(s) && (s[j] == '-' || s[j] == '+') {
			j++
		}
		e, n := 0, 0
		for ; j < len(s) && isDigit(s[j]); j++ {
			if e = e*10 + int(s[j]-'0'); e > 1000 {
				return value{}, false
			}
			n++
		}
		// Bounded so that ParseFloat cannot overflow (it would fail).
		if n == 0 || !negExp && e+digits > 300 {
			return value{}, false
		}
	}
	if j != len(s) {
		return value{}, false
	}
	f, err := strconv.ParseFloat(unsafe.String(&s[0], len(s)), 64)
	if err != nil || math.IsInf(f, 0) {
		return value{}, false
	}
	return value{k: kNum, f: f}, true
}
