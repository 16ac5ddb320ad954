package broker

import (
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// Filter expressions on get (docs/protocol.md, "Expression filters"). A get
// names its expression in its last field, URL-escaped; consumers repeat the
// same one on every get, so each connection keeps what it compiled, bounded
// in entries and in expression bytes so that memory does not grow with what
// a client sends.
//
// A compiled expression takes at most ~150 bytes per byte of source
// (protocol/filter's TestCompiledSizeBound), so 16 KiB of source bounds a
// connection's cache to ~2.4 MiB; consumers send one or two short
// expressions.
const (
	maxWhereEntries = 16
	maxWhereBytes   = 16 << 10
)

// whereCache maps a get's raw (escaped) where field to its compiled filter,
// combined with the tag expression it came with. Reader goroutine only; a
// parked get keeps its own pointer to the (immutable) filter.
type whereCache struct {
	m     map[string]whereEntry
	bytes int
}

type whereEntry struct {
	tags string // the raw tags field the filter was combined with
	f    *protocol.TagFilter
}

// getFilter returns the filter for a get's tags and where fields, or the
// text of a 400 reply when the expression does not compile.
func (c *conn) getFilter(tags, where []byte) (*protocol.TagFilter, string) {
	if len(where) == 0 {
		return c.tagFilter(tags), ""
	}
	w := &c.wheres
	if e, ok := w.m[string(where)]; ok && e.tags == string(tags) {
		return e.f, ""
	}
	expr, err := filter.Compile(protocol.Unescape(where))
	if err != nil {
		c.log.Debug("bad filter expression", "err", err)
		return nil, err.Error()
	}
	base := c.tagFilter(tags)
	if t, ok := expr.Tags(); ok && base.All() {
		base = protocol.NewTagFilter(t) // skip other tags by the index unit, unread
	}
	f := base.WithRecordMatcher(expr)
	if w.m == nil || len(w.m) >= maxWhereEntries || w.bytes+len(where) > maxWhereBytes {
		w.m, w.bytes = make(map[string]whereEntry), 0
	}
	if _, ok := w.m[string(where)]; !ok {
		w.bytes += len(where)
	}
	w.m[string(where)] = whereEntry{tags: string(tags), f: f}
	return f, ""
}
