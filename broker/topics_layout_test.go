package broker

import (
	"testing"
	"unsafe"
)

// A put's fields of topicState are on one cache line, and the struct is
// 128 bytes so that it is allocated on a line boundary (topics.go).
func TestTopicStateLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("laid out for 64-bit platforms")
	}
	var ts topicState
	if n := unsafe.Sizeof(ts); n != 128 {
		t.Fatalf("topicState is %d bytes, want 128", n)
	}
	for name, f := range map[string][2]uintptr{
		"name":     {unsafe.Offsetof(ts.name), unsafe.Sizeof(ts.name)},
		"settings": {unsafe.Offsetof(ts.settings), unsafe.Sizeof(ts.settings)},
		"rr":       {unsafe.Offsetof(ts.rr), unsafe.Sizeof(ts.rr)},
		"notified": {unsafe.Offsetof(ts.notified), unsafe.Sizeof(ts.notified)},
		"ref":      {unsafe.Offsetof(ts.ref), unsafe.Sizeof(ts.ref)},
		"puts":     {unsafe.Offsetof(ts.puts), unsafe.Sizeof(ts.puts)},
		"putBytes": {unsafe.Offsetof(ts.putBytes), unsafe.Sizeof(ts.putBytes)},
	} {
		if f[0]+f[1] > 64 {
			t.Errorf("put field %s at %d (+%d) is outside line 0", name, f[0], f[1])
		}
	}
	var tt topicTable
	tt.init(acceptAll{})
	for i := range 8 {
		if a := uintptr(unsafe.Pointer(tt.get([]byte{'t', byte('a' + i)}))); a%64 != 0 {
			t.Fatalf("a topicState allocated at %#x, not on a cache line", a)
		}
	}
}

type acceptAll struct{}

func (acceptAll) Lookup(string) (TopicSettings, bool) {
	return TopicSettings{NumPartitions: 1, AcceptPublish: true}, true
}
