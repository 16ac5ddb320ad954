package client

import (
	"sort"
	"time"
)

// Assign is MetaQ's balancing: partitions sorted by (broker id, partition)
// and consumers sorted by name; each consumer gets ⌊P/C⌋ consecutive
// partitions, and the first P mod C consumers one more. It returns me's
// share (nil when me is not among consumers). Neither input is modified.
func Assign(partitions []Partition, consumers []string, me string) []Partition {
	ps := append([]Partition(nil), partitions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Less(ps[j]) })
	cs := append([]string(nil), consumers...)
	sort.Strings(cs)
	pos := sort.SearchStrings(cs, me)
	if pos >= len(cs) || cs[pos] != me || len(ps) == 0 {
		return nil
	}
	per, extra := len(ps)/len(cs), len(ps)%len(cs)
	start := per*pos + min(pos, extra)
	n := per
	if pos < extra {
		n++
	}
	return ps[start : start+n : start+n]
}

// backoff is a capped exponential delay.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur <= 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }
