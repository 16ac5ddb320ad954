package ha

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/metaqgo/metaq/broker/store"
)

func TestParseEpochData(t *testing.T) {
	for _, c := range []struct {
		in       string
		e, start int64
		ok       bool
	}{
		{"epoch=3", 3, -1, true},
		{"epoch=12 start=4096", 12, 4096, true},
		{"epoch=1 start=0", 1, 0, true},
		{"epoch=0", 0, 0, false},
		{"epoch=-2", 0, 0, false},
		{"epoch=2 start=-1", 0, 0, false},
		{"epoch=2 begin=5", 0, 0, false},
		{"epoch=2 start=", 0, 0, false},
		{"epoch=", 0, 0, false},
		{"epoch", 0, 0, false},
		{"", 0, 0, false},
	} {
		e, start, ok := parseEpochData([]byte(c.in))
		if ok != c.ok || ok && (e != c.e || start != c.start) {
			t.Errorf("parseEpochData(%q) = %d, %d, %v; want %d, %d, %v", c.in, e, start, ok, c.e, c.start, c.ok)
		}
	}
}

// FuzzParseEpochData: never panics; what it accepts is a positive epoch and
// a start that is absent (-1) or non-negative, and it renders back to an
// input it accepts the same way.
func FuzzParseEpochData(f *testing.F) {
	for _, s := range []string{"epoch=3", "epoch=12 start=4096", "epoch=1 start=0", "epoch=2 start=-1", "epoch= start=", "epoch=9223372036854775807 start=9"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, start, ok := parseEpochData(b)
		if !ok {
			return
		}
		if e <= 0 || start < -1 {
			t.Fatalf("%q: epoch %d, start %d", b, e, start)
		}
		out := "epoch=" + strconv.FormatInt(e, 10)
		if start >= 0 {
			out += " start=" + strconv.FormatInt(start, 10)
		}
		if e2, s2, ok2 := parseEpochData([]byte(out)); !ok2 || e2 != e || s2 != start {
			t.Fatalf("%q → %q parsed as %d, %d, %v", b, out, e2, s2, ok2)
		}
	})
}

// The epoch history of a slave is read past its read limit (the %HA% index
// stops there): an epoch record the master has not acknowledged yet is found
// by the scan of the log's tail, once and only once whatever the limit.
func TestReadEpochsPastReadLimit(t *testing.T) {
	open := func(replica bool) *store.Store {
		st, err := store.Open(store.Config{Dir: t.TempDir(), BrokerID: 1, SegmentSize: 64 << 10, UnflushThreshold: 1,
			Replica: replica, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	m, r := open(false), open(true)
	put := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := m.Append(&store.Message{Topic: "t", Data: make([]byte, 500)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(100) // rolls a segment
	e1, err := writeEpoch(m, 1, -1)
	if err != nil {
		t.Fatal(err)
	}
	put(100)
	e2, err := writeEpoch(m, 2, m.WritePos())
	if err != nil {
		t.Fatal(err)
	}
	put(10)
	for pos := int64(0); ; {
		c, ok, err := m.ReadRaw(pos, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := r.AppendRaw(c.Pos, c.Buf); err != nil {
			t.Fatal(err)
		}
		pos = c.Next
		c.Release()
	}
	if _, err := r.SyncRaw(); err != nil {
		t.Fatal(err)
	}
	for _, lim := range []int64{0, e1, e1 + 1, e2, e2 + 1, r.WritePos()} {
		r.RaiseReadLimit(lim)
		es, err := readEpochs(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 2 || es[0] != (epochRec{1, e1}) || es[1] != (epochRec{2, e2}) {
			t.Fatalf("read limit %d (indexed %d): epochs %v, want [{1 %d} {2 %d}]", lim, r.IndexedPos(), es, e1, e2)
		}
	}
}
