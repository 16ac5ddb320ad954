package protocol

// RecordMatcher decides on a whole encoded record (record.go's layout)
// whether a get delivers it: a compiled filter expression
// (protocol/filter.Expr). It must not allocate and must be safe for
// concurrent use; it only sees records that passed verification.
type RecordMatcher interface {
	MatchRecord(rec []byte) bool
}

// SignatureMatcher is a RecordMatcher that can also rule records out by
// the property signature their index unit holds (protocol/filter.Signature,
// docs/storage.md), without reading them. MaySignature must be true for
// every record MatchRecord accepts; UsesSignature false means it always is
// (nothing to gain from asking).
type SignatureMatcher interface {
	RecordMatcher
	UsesSignature() bool
	MaySignature(sig uint32) bool
}

// WithRecordMatcher returns a copy of f (nil: all tags) that also requires m
// to match. Readers apply the tag hash first (no commit-log read for a tag
// miss), then m on the record.
func (f *TagFilter) WithRecordMatcher(m RecordMatcher) *TagFilter {
	g := &TagFilter{all: true}
	if f != nil {
		c := *f
		g = &c
	}
	g.match = m
	return g
}

// RecordMatcher returns the record matcher (nil when there is none).
func (f *TagFilter) RecordMatcher() RecordMatcher {
	if f == nil {
		return nil
	}
	return f.match
}

// NewTagFilter returns a filter matching exactly these tags (an empty tag
// is a message without one). Unlike ParseTagFilter, tags are taken as they
// are: no `||` splitting, no trimming.
func NewTagFilter(tags []string) *TagFilter {
	f := &TagFilter{}
	for _, t := range tags {
		f.tags = append(f.tags, t)
		f.hashes = append(f.hashes, TagHashString(t))
	}
	return f
}
