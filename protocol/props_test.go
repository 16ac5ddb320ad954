package protocol

import (
	"reflect"
	"testing"
)

func TestProperties(t *testing.T) {
	props := []byte("tag=paid&keys=o-1%20o-2&delay=3&x")
	if got := Property(props, "tag"); got != "paid" {
		t.Fatalf("tag=%q", got)
	}
	if got := Keys(props); !reflect.DeepEqual(got, []string{"o-1", "o-2"}) {
		t.Fatalf("keys=%q", got)
	}
	if got := Property(props, "delay"); got != "3" {
		t.Fatalf("delay=%q", got)
	}
	if _, ok := PropertyRaw(props, "x"); !ok {
		t.Fatal("bare key not found")
	}
	if _, ok := PropertyRaw(props, "nope"); ok {
		t.Fatal("missing key found")
	}
}

func TestTagHash(t *testing.T) {
	if TagHash(nil) != 0 || PropsTagHash([]byte("keys=a")) != 0 {
		t.Fatal("no tag must hash to 0")
	}
	if PropsTagHash([]byte("tag=a%20b")) != TagHashString("a b") {
		t.Fatal("escaped tag hashes differently")
	}
	if PropsTagHash([]byte("keys=k&tag=paid")) != TagHash([]byte("paid")) {
		t.Fatal("tag hash mismatch")
	}
	if n := testing.AllocsPerRun(100, func() { PropsTagHash([]byte("tag=a%20b&keys=x")) }); n != 0 {
		t.Fatalf("PropsTagHash allocates %v", n)
	}
}

func TestTagFilter(t *testing.T) {
	f := ParseTagFilter("paid||refunded")
	if f.All() || !f.MatchHash(TagHashString("paid")) || f.MatchHash(TagHashString("other")) || f.MatchHash(0) {
		t.Fatal("filter hash match")
	}
	if !f.MatchTag("refunded") || f.MatchTag("x") || f.String() != "paid||refunded" {
		t.Fatal("filter tag match")
	}
	if !ParseTagFilter("*").All() || !ParseTagFilter("").All() || !(*TagFilter)(nil).MatchHash(5) {
		t.Fatal("wildcard")
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a b&c=d", "ünï%+", "100%", "x+y"} {
		if got := Unescape(AppendEscaped(nil, s)); got != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
	}
	if got := Unescape([]byte("a+b%20c%zz%4")); got != "a b c%zz%4" {
		t.Fatalf("lenient unescape: %q", got)
	}
	if PropsTagHash([]byte("tag="+string(AppendEscaped(nil, "ä b")))) != TagHashString("ä b") {
		t.Fatal("escaped tag hashes differently")
	}
}
