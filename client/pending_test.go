package client

import "testing"

// The pending table keys calls by opaque in a ring twice the window: lookups
// check the opaque, so a late reply for a slot reused by a newer call is
// dropped; expiry and failure take what they must.
func TestPendingTable(t *testing.T) {
	tb := newPendingTable(4) // 64 slots
	if len(tb.slots) != 64 {
		t.Fatalf("%d slots", len(tb.slots))
	}
	if n := len(newPendingTable(1000).slots); n != 2048 {
		t.Fatalf("window 1000: %d slots", n)
	}
	a := &call{opaque: 3, deadline: 100}
	b := &call{opaque: 3 + 64, deadline: 0} // same slot as a
	c := &call{opaque: -5, deadline: 50}    // negative opaques map into the ring too
	tb.put(a)
	if !tb.busy(3+64) || tb.get(3+64) != nil || tb.take(3+64) != nil || tb.len() != 1 {
		t.Fatal("another opaque in a taken slot")
	}
	if tb.get(3) != a || tb.take(3) != a || tb.take(3) != nil || tb.len() != 0 || tb.busy(3) {
		t.Fatal("take")
	}
	tb.put(b)
	tb.put(c)
	tb.put(pendingCall(7, 200))
	got := tb.takeExpired(nil, 100)
	if len(got) != 1 || got[0] != c || tb.len() != 2 {
		t.Fatalf("expired %v, %d left", got, tb.len())
	}
	if all := tb.takeAll(nil); len(all) != 2 || tb.len() != 0 || tb.busy(7) || tb.busy(3) {
		t.Fatalf("takeAll %v, %d left", all, tb.len())
	}
}

func pendingCall(op int32, deadline int64) *call { return &call{opaque: op, deadline: deadline} }
