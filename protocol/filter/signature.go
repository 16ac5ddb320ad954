package filter

import (
	"math"

	"github.com/metaqgo/metaq/protocol"
)

// Property signatures: a 32-bit Bloom filter of a record's properties, kept
// in its index unit (broker/store, docs/storage.md) so that a get with an
// expression can skip most records the expression cannot select without
// reading them from the commit log. For every key=value pair of the
// properties line, with key and value URL-unescaped and k = fnv64a(key):
//
//	presence  k ^ sigPresence                           the key occurs
//	string    fnv64a continued from k over 0x00 value   key = 'value'
//	number    k ^ sigNumber ^ float64bits(v)*sigMul     key = v, when value reads as a number
//
// each sets two bits of the signature: bits 59-63 and 54-58 of the element
// times sigMix pick them. A pair without '=' is a key with an empty value. The number
// is what the evaluator reads (toNum), as a float64 with -0 written as 0:
// two numbers the evaluator finds equal (integers exactly, or as floats)
// have the same bits. The format is part of the on-disk index: changing it
// needs a new unit flag.
//
// An expression derives from its tree a necessary condition on the
// signature (MaySignature): false only when no record with that signature
// can make the expression true. Every comparison with a property needs the
// property to be present (a missing one makes it unknown); an equality with
// a literal, or an IN list, needs one of its values; AND, OR and NOT
// combine the conditions (NOT through the condition for being false). The
// condition is kept as a disjunction of at most maxSigTerms bit masks; a
// larger one is weakened to the bits all its terms share, which is still
// necessary.

// Signature returns the property signature of a properties line. It does
// not allocate.
func Signature(props []byte) uint32 {
	var sig uint32
	for i := 0; i < len(props); {
		j, eq, esc := i, -1, false
		for ; j < len(props); j++ {
			switch props[j] {
			case '&':
				goto pair
			case '=':
				if eq < 0 {
					eq = j
				}
			case '%', '+':
				esc = true
			}
		}
	pair:
		k, v := props[i:j], props[j:j]
		if eq >= 0 {
			k, v = props[i:eq], props[eq+1:j]
		}
		i = j + 1
		if len(k) == 0 {
			continue
		}
		hk := hashBytes(fnvOffset64, k, esc)
		sig |= sigBits(hk ^ sigPresence)
		sig |= sigBits(hashBytes(fnvAdd(hk, 0), v, esc))
		if n, ok := plainInt(v); ok {
			sig |= sigBits(numElement(hk, float64(n))) // what toNum reads, without its detour
		} else if len(v) > 0 && maybeNumber(v[0]) {
			x := value{k: kStr, esc: true, s: v}
			if toNum(&x) {
				sig |= sigBits(numElement(hk, x.float()))
			}
		}
	}
	return sig
}

// maybeNumber reports whether a value starting with c may read as a number
// (toNum would fail otherwise; '%' may be an escaped digit).
func maybeNumber(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '.' || c == '%'
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211

	sigPresence = 0xc2b2ae3d27d4eb4f
	sigNumber   = 0x27d4eb2f165667c5
	sigMul      = 0x165667b19e3779f9
	sigMix      = 0x9e3779b97f4a7c15
)

func fnvAdd(h uint64, c byte) uint64 { return (h ^ uint64(c)) * fnvPrime64 }

// hashBytes adds s to h, URL-unescaped when esc (s may hold escapes).
func hashBytes(h uint64, s []byte, esc bool) uint64 {
	if !esc {
		for _, c := range s {
			h = (h ^ uint64(c)) * fnvPrime64
		}
		return h
	}
	for i := 0; i < len(s); {
		var c byte
		c, i = protocol.UnescapeAt(s, i)
		h = fnvAdd(h, c)
	}
	return h
}

// numElement is the number element of key hash hk for value f.
func numElement(hk uint64, f float64) uint64 {
	if f == 0 {
		f = 0 // -0 == 0
	}
	return hk ^ sigNumber ^ math.Float64bits(f)*sigMul
}

// sigBits is the two signature bits of element h: the top bits of a
// multiplication, which depend on every bit of h.
func sigBits(h uint64) uint32 {
	m := h * sigMix
	return 1<<(m>>59) | 1<<(m>>54&31)
}

// maxSigTerms bounds the masks of a signature condition.
const maxSigTerms = 8

// sigCond is a disjunction of masks: a signature satisfies it when it holds
// every bit of one of them. A mask of 0 is always satisfied; an empty
// condition never is.
type sigCond []uint32

var sigAlways = sigCond{0}

func (c sigCond) always() bool {
	for _, m := range c {
		if m == 0 {
			return true
		}
	}
	return false
}

// weaken keeps c within maxSigTerms.
func (c sigCond) weaken() sigCond {
	if len(c) <= maxSigTerms {
		return c
	}
	m := c[0]
	for _, x := range c[1:] {
		m &= x
	}
	return sigCond{m}
}

func sigOr(a, b sigCond) sigCond {
	if a.always() || b.always() {
		return sigAlways
	}
	return append(append(sigCond{}, a...), b...).weaken()
}

func sigAnd(a, b sigCond) sigCond {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	if len(a)*len(b) > maxSigTerms {
		a, b = sigCond{a.common()}, sigCond{b.common()}
	}
	var c sigCond
	for _, x := range a {
		for _, y := range b {
			c = append(c, x|y)
		}
	}
	return c
}

// common is the bits every term of c holds (c not empty).
func (c sigCond) common() uint32 {
	m := c[0]
	for _, x := range c[1:] {
		m &= x
	}
	return m
}

// keyUsable reports whether a property can be found in a signature: keys
// that are empty or hold '=', '&', '%' or '+' are looked up in ways a
// signature does not model (a prefix match of the escaped line), so they
// require nothing.
func keyUsable(p *property) bool {
	if p == nil || p.field != fieldProps || len(p.key) == 0 {
		return false
	}
	for _, c := range p.key {
		switch c {
		case '=', '&', '%', '+':
			return false
		}
	}
	return true
}

// presence is the mask of the key's presence element (0: none usable).
func presence(p *property) uint32 {
	if !keyUsable(p) {
		return 0
	}
	return sigBits(hashBytes(fnvOffset64, p.key, false) ^ sigPresence)
}

// eqMask is the mask that `p = lit` needs besides presence; ok is false
// when the literal cannot be told from the signature (a boolean).
func eqMask(p *property, lit *value) (uint32, bool) {
	if !keyUsable(p) {
		return 0, false
	}
	hk := hashBytes(fnvOffset64, p.key, false)
	switch lit.k {
	case kStr:
		return sigBits(hashBytes(fnvAdd(hk, 0), lit.s, false)), true
	case kNum:
		return sigBits(numElement(hk, lit.float())), true
	}
	return 0, false
}

// present is the mask every property operand of n needs.
func (n *node) present() uint32 {
	var m uint32
	for _, x := range [...]*operand{&n.x, &n.y, &n.z} {
		m |= presence(x.prop)
	}
	return m
}

// sigConds returns the conditions for node i to be true and to be false.
func (e *Expr) sigConds(i int32) (t, f sigCond) {
	n := &e.nodes[i]
	switch n.op {
	case opTrue:
		return sigAlways, nil
	case opFalse:
		return nil, sigAlways
	case opAnd:
		at, af := e.sigConds(n.a)
		bt, bf := e.sigConds(n.b)
		return sigAnd(at, bt), sigOr(af, bf)
	case opOr:
		at, af := e.sigConds(n.a)
		bt, bf := e.sigConds(n.b)
		return sigOr(at, bt), sigAnd(af, bf)
	case opNot:
		at, af := e.sigConds(n.a)
		return af, at
	case opIsNull:
		p := sigCond{presence(n.x.prop)}
		if n.neg { // IS NOT NULL: true needs the key
			return p, sigAlways
		}
		return sigAlways, p
	case opCmp:
		p := n.present()
		if n.cmp == cmpEq {
			if m, ok := e.eqOf(n.x.prop, n.y.prop, &n.y.lit); ok {
				return sigCond{p | m}, sigCond{p}
			}
			if m, ok := e.eqOf(n.y.prop, n.x.prop, &n.x.lit); ok {
				return sigCond{p | m}, sigCond{p}
			}
		}
		return sigCond{p}, sigCond{p}
	case opBetween:
		p := n.present()
		return sigCond{p}, sigCond{p}
	case opIn:
		p := n.present()
		var any sigCond
		for j := range n.list {
			m, ok := e.eqOf(n.x.prop, nil, &n.list[j])
			if !ok {
				any = sigAlways
				break
			}
			any = append(any, p|m)
		}
		any = any.weaken()
		if n.neg {
			return sigCond{p}, any
		}
		return any, sigCond{p}
	}
	return sigAlways, sigAlways
}

// eqOf is the mask for property a equal to a literal (b must be no
// property).
func (e *Expr) eqOf(a, b *property, lit *value) (uint32, bool) {
	if a == nil || b != nil {
		return 0, false
	}
	return eqMask(a, lit)
}

// compileSignature fills e.sig (after parsing).
func (e *Expr) compileSignature() {
	t, _ := e.sigConds(e.root) // empty: never true, every signature fails
	e.sig, e.sigUseful = t, !t.always()
}

// UsesSignature reports whether MaySignature can ever be false, i.e.
// whether checking signatures can skip records.
func (e *Expr) UsesSignature() bool { return e != nil && e.sigUseful }

// MaySignature reports whether a record whose properties have signature
// sig may satisfy the expression; false means it certainly does not. It
// does not allocate.
func (e *Expr) MaySignature(sig uint32) bool {
	if !e.sigUseful {
		return true
	}
	for _, m := range e.sig {
		if sig&m == m {
			return true
		}
	}
	return false
}
