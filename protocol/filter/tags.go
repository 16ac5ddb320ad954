package filter

import "github.com/metaqgo/metaq/protocol"

// Tags returns the tags one of which a message must carry for the
// expression to be true, when the expression says so: a top-level AND
// conjunct `tag = 'x'` or `tag IN ('x', 'y')` (TAGS alike). The broker then
// skips other messages by the index unit's tag hash, without reading the
// record, before evaluating the expression on the rest (hashes may
// collide; the expression decides). ok is false when the expression does
// not pin the tag.
func (e *Expr) Tags() (tags []string, ok bool) {
	if e == nil {
		return nil, false
	}
	return e.tagsOf(e.root)
}

func (e *Expr) tagsOf(i int32) ([]string, bool) {
	n := &e.nodes[i]
	switch n.op {
	case opAnd:
		if t, ok := e.tagsOf(n.a); ok {
			return t, true
		}
		return e.tagsOf(n.b)
	case opCmp:
		if n.cmp == cmpEq && isTagProp(n.x.prop) && n.y.prop == nil && n.y.lit.k == kStr {
			return []string{string(n.y.lit.s)}, true
		}
		if n.cmp == cmpEq && isTagProp(n.y.prop) && n.x.prop == nil && n.x.lit.k == kStr {
			return []string{string(n.x.lit.s)}, true
		}
	case opIn:
		if n.neg || !isTagProp(n.x.prop) {
			return nil, false
		}
		tags := make([]string, 0, len(n.list))
		for _, v := range n.list {
			if v.k != kStr {
				return nil, false // a number may equal a tag written differently ('01' vs 1)
			}
			tags = append(tags, string(v.s))
		}
		return tags, true
	}
	return nil, false
}

func isTagProp(p *property) bool {
	return p != nil && p.field == fieldProps && string(p.key) == protocol.PropTag
}
