package store

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// countingMatcher counts the records an expression was evaluated on (read
// from the commit log), to show which ones the units alone ruled out.
type countingMatcher struct {
	*filter.Expr
	reads atomic.Int64
}

func (m *countingMatcher) MatchRecord(rec []byte) bool {
	m.reads.Add(1)
	return m.Expr.MatchRecord(rec)
}

// whereStream appends n records to w/0: most without a tag, properties
// drawn from values written in several ways (numbers with leading zeros,
// decimals, escapes), some tagged, some with no properties at all.
func whereStream(t *testing.T, s *Store, n int) [][]byte {
	props := make([][]byte, n)
	vals := []string{"0", "1", "00", "1.0", "%31", "x", "y%27z", "a+b", "15", "-0"}
	for i := range n {
		var p string
		switch {
		case i%13 == 0:
			p = "" // no properties: an unflagged unit
		case i%7 == 0:
			p = "tag=t" + fmt.Sprint(i%3) + "&bench=" + vals[i%len(vals)] // tagged: the tag hash stays
		default:
			p = "bench=" + vals[i%len(vals)] + "&n=" + fmt.Sprint(i%100)
			if i%5 == 0 {
				p += "&k%20x=" + vals[(i/5)%len(vals)]
			}
		}
		props[i] = []byte(p)
		mustAppend(t, s, &Message{Topic: "w", Properties: props[i], Data: []byte(fmt.Sprint("body-", i))})
	}
	waitReadable(t, s, "w", 0, int64(n))
	return props
}

// readWhere reads w/0 with expression e (through the counting matcher)
// and returns the queue offsets served; the read steps over filtered-out
// offsets exactly as a get does.
func readWhere(t *testing.T, s *Store, m *countingMatcher, tags string, maxBytes int) []int64 {
	t.Helper()
	f := protocol.ParseTagFilter(tags).WithRecordMatcher(m)
	var got []int64
	for off := int64(0); ; {
		r, err := s.Read("w", 0, off, maxBytes, f)
		if err != nil {
			t.Fatal(err)
		}
		switch r.Status {
		case ReadFound:
			for _, b := range r.Bufs {
				it := protocol.NewRecordIterator(b)
				for it.Next() {
					got = append(got, it.Record().QueueOffset)
				}
			}
		case ReadFiltered:
		case ReadNoMessage:
			r.Release()
			return got
		default:
			t.Fatalf("status %v at %d", r.Status, off)
		}
		if r.NextOffset <= off {
			t.Fatalf("read at %d did not move (next %d)", off, r.NextOffset)
		}
		off = r.NextOffset
		r.Release()
	}
}

// A filtered read serves exactly the records the expression selects,
// whether the units hold signatures or not; with signatures it reads far
// fewer records from the commit log.
func TestReadWhereSignatures(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	const n = 3000
	props := whereStream(t, s, n)
	exprs := []struct{ tags, expr string }{
		{"*", "bench = 0"},
		{"*", "bench = '1'"},
		{"*", "bench = 1 AND n < 50"},
		{"*", "bench IN ('x', 'a b', 15) OR \"k x\" = 'y''z'"},
		{"*", "NOT (bench = 0) AND n = 7"},
		{"*", "bench IS NULL"},
		{"*", "tag IS NULL AND bench = -0"},
		{"t1", "bench = 'x'"},
		{"*", "TAGS = 't2' AND bench = 1"},
		{"*", "FALSE"},
	}
	rec := func(i int) []byte {
		r := &protocol.Record{Topic: []byte("w"), Properties: props[i]}
		b := make([]byte, protocol.RecordSize(1, len(props[i]), 0))
		protocol.EncodeRecord(b, r)
		return b
	}
	check := func(label string) (reads, served int64) {
		for _, x := range exprs {
			e := filter.MustCompile(x.expr)
			tf := protocol.ParseTagFilter(x.tags)
			var want []int64
			for i := range n {
				r := rec(i)
				if tf.MatchTag(protocol.Property(props[i], protocol.PropTag)) && e.MatchRecord(r) {
					want = append(want, int64(i))
				}
			}
			for _, maxBytes := range []int{1, 4096, 1 << 20} {
				m := &countingMatcher{Expr: e}
				got := readWhere(t, s, m, x.tags, maxBytes)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: %q (tags %s, maxBytes %d): got %d offsets %v…, want %d %v…", label, x.expr, x.tags, maxBytes,
						len(got), got[:min(len(got), 10)], len(want), want[:min(len(want), 10)])
				}
				if maxBytes == 1<<20 && x.expr == "bench = 0" {
					reads, served = m.reads.Load(), int64(len(got))
				}
			}
		}
		return reads, served
	}
	reads, served := check("signatures")
	// Most of the records bench = 0 skips never leave the index: reads are
	// the served ones, the tagged and property-less ones (no signature),
	// and Bloom false positives.
	unflagged := int64(0)
	for _, pr := range props {
		if len(pr) == 0 || protocol.PropsTagHash(pr) != 0 {
			unflagged++
		}
	}
	if served == 0 || reads > served+unflagged+n/20 {
		t.Fatalf("bench = 0 read %d records from the log to serve %d of %d (%d without a signature)", reads, served, n, unflagged)
	}

	// The units as an older broker wrote them (tag hash only, no flag):
	// the same answers, every candidate read from the log.
	p := s.partition("w", 0, false)
	units := make([]byte, n*unitSize)
	found := make([]bool, n)
	if _, nf, err := s.scanPartition(p, 0, s.clog.visibleLimit(), 0, n, units, found); err != nil || nf != n {
		t.Fatalf("scan: %d units, %v", nf, err)
	}
	for i := range n {
		u := units[i*unitSize:]
		phys, size, tag := getUnit(u)
		putUnit(u, phys, size, tag)
	}
	if err := s.writeRepairedUnits(p, 0, units, found); err != nil {
		t.Fatal(err)
	}
	if reads, _ := check("no signatures"); reads < int64(n)*9/10 {
		t.Fatalf("without signatures bench = 0 read only %d of %d records", reads, n)
	}
}

// The units the dispatcher writes and those an index repair rebuilds from
// the commit log are the same bytes (signatures included), and a record
// without a tag but with properties gets a flagged signature.
func TestUnitSignaturesDispatchAndRepair(t *testing.T) {
	s := mustOpen(t, testConfig(t, ""))
	defer mustClose(t, s)
	const n = 500
	props := whereStream(t, s, n)
	p := s.partition("w", 0, false)
	dispatched := make([]byte, n*unitSize)
	for q := 0; q < n; {
		nb, err := s.readUnits(p, int64(q), dispatched[q*unitSize:])
		if err != nil {
			t.Fatal(err)
		}
		q += nb / unitSize
	}
	units := make([]byte, n*unitSize)
	found := make([]bool, n)
	if _, nf, err := s.scanPartition(p, 0, s.clog.visibleLimit(), 0, n, units, found); err != nil || nf != n {
		t.Fatalf("scan: %d units, %v", nf, err)
	}
	if !bytes.Equal(units, dispatched) {
		t.Fatal("repair rebuilds different units than the dispatcher wrote")
	}
	for i := range n {
		u := dispatched[i*unitSize:]
		sig, flagged := unitSignature(u)
		_, size, tag := getUnit(u)
		wantFlag := len(props[i]) > 0 && protocol.PropsTagHash(props[i]) == 0
		switch {
		case flagged != wantFlag:
			t.Fatalf("unit %d (%q): flagged %v", i, props[i], flagged)
		case flagged && (sig != filter.Signature(props[i]) || tag != 0):
			t.Fatalf("unit %d (%q): signature %x tag %x, want %x 0", i, props[i], sig, tag, filter.Signature(props[i]))
		case !flagged && tag != protocol.PropsTagHash(props[i]):
			t.Fatalf("unit %d: tag %x", i, tag)
		case int(size) != protocol.RecordSize(1, len(props[i]), len(fmt.Sprint("body-", i))):
			t.Fatalf("unit %d: size %d", i, size)
		}
	}
}
