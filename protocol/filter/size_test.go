package filter

import (
	"runtime"
	"strings"
	"testing"
)

// The worst case for memory is the longest IN list: the broker's
// per-connection cache bound (broker/where.go) assumes at most ~150 bytes
// allocated per byte of source (slice growth included).
func TestCompiledSizeBound(t *testing.T) {
	src := "a IN (" + strings.Repeat("'x',", (MaxLen-20)/4) + "'x')"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := MustCompile(src)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(src)); per > 150 {
		t.Fatalf("compiling %d bytes allocated %.0f bytes per source byte", len(src), per)
	}
	src = strings.Repeat("a = 1 AND ", (MaxLen-10)/10) + "a = 1"
	runtime.ReadMemStats(&before)
	e = MustCompile(src)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(src)); per > 150 {
		t.Fatalf("compiling %d bytes allocated %.0f bytes per source byte", len(src), per)
	}
}
