package store

import (
	"testing"
	"unsafe"
)

// The partition's fields are grouped by cache line (index.go): line 0 the
// appender's, lines 1–2 the dispatcher's per-unit fields, and the struct is
// exactly 320 bytes so that the allocator's size class aligns it to a line.
func TestPartitionLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is laid out for 64-bit platforms")
	}
	var p partition
	if n := unsafe.Sizeof(p); n != 320 {
		t.Fatalf("partition is %d bytes, want 320", n)
	}
	line := func(off uintptr) uintptr { return off / 64 }
	if line(unsafe.Offsetof(p.topic)) != 0 || line(unsafe.Offsetof(p.next)+7) != 0 {
		t.Fatalf("the appender's fields leave line 0: topic@%d next@%d", unsafe.Offsetof(p.topic), unsafe.Offsetof(p.next))
	}
	for name, f := range map[string][2]uintptr{
		"indexed":   {unsafe.Offsetof(p.indexed), unsafe.Sizeof(p.indexed)},
		"pend":      {unsafe.Offsetof(p.pend), unsafe.Sizeof(p.pend)},
		"pendStart": {unsafe.Offsetof(p.pendStart), unsafe.Sizeof(p.pendStart)},
		"inBatch":   {unsafe.Offsetof(p.inBatch), unsafe.Sizeof(p.inBatch)},
		"first":     {unsafe.Offsetof(p.first), unsafe.Sizeof(p.first)},
		"waiting":   {unsafe.Offsetof(p.waiting), unsafe.Sizeof(p.waiting)},
		"tailMu":    {unsafe.Offsetof(p.tailMu), unsafe.Sizeof(p.tailMu)},
		"tail":      {unsafe.Offsetof(p.tail), unsafe.Sizeof(p.tail)},
		"tailNext":  {unsafe.Offsetof(p.tailNext), unsafe.Sizeof(p.tailNext)},
	} {
		if first, last := line(f[0]), line(f[0]+f[1]-1); first < 1 || last > 2 {
			t.Errorf("dispatcher field %s at %d (+%d) is outside lines 1–2", name, f[0], f[1])
		}
	}
	for range 8 {
		if a := uintptr(unsafe.Pointer(newPartition(&topicState{}, 0))); a%64 != 0 {
			t.Fatalf("a partition allocated at %#x, not on a cache line", a)
		}
	}
}
