package ha

import (
	"strconv"
	"testing"
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
