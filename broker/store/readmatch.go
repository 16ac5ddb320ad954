package store

import "github.com/metaqgo/metaq/protocol"

// Expression filters (protocol.RecordMatcher) need the record itself, not
// just its index unit: Read looks at each candidate the tag hash let through
// here and skips it when the expression does not match (the offset still
// moves, as for a tag miss). The matcher sees a record whose header agrees
// with its unit (size, magic, partition, offset, topic); the CRC is checked
// only for records that are served (appendRecord), as a tag miss is skipped
// without reading the record at all.

// A matcher that also implements protocol.SignatureMatcher (a compiled
// expression) is first asked about the property signature a unit may hold
// (index.go): units it rules out are skipped like tag misses, without
// reading the record.

// signatureMatcher returns m as a SignatureMatcher when checking signatures
// can skip records (nil otherwise).
func signatureMatcher(m protocol.RecordMatcher) protocol.SignatureMatcher {
	if sm, ok := m.(protocol.SignatureMatcher); ok && sm.UsesSignature() {
		return sm
	}
	return nil
}

// recordPeek holds the segment of the last record a matcher looked at, so a
// scan acquires each segment once. release must be called when the scan
// ends.
type recordPeek struct{ g *segment }

func (k *recordPeek) release() {
	if k.g != nil {
		k.g.release()
		k.g = nil
	}
}

// peekMatch checks the header of the record at phys (unit q of p) and
// reports whether m matches it. Errors are appendRecord's: errBelowMin when
// retention removed it, the others when the unit is damaged (Read repairs
// the index from the commit log, repair.go).
func (s *Store) peekMatch(k *recordPeek, p *partition, q, phys int64, size int, m protocol.RecordMatcher) (bool, error) {
	g := k.g
	if g == nil || phys < g.base || phys+int64(size) > g.end() {
		k.release()
		if phys < s.clog.minPos() {
			return false, errBelowMin
		}
		if g = s.clog.acquireSegment(phys); g == nil {
			if phys < s.clog.minPos() {
				return false, errBelowMin
			}
			return false, errUnitOutside
		}
		k.g = g
	}
	off := phys - g.base
	if off+int64(size) > g.size {
		return false, errUnitPastSegment
	}
	rec := g.data[off : off+int64(size)]
	if !headerMatches(rec, p, q) {
		return false, errRecordMismatch
	}
	return m.MatchRecord(rec), nil
}
