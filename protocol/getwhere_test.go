package protocol

import "testing"

// AppendGetWhere's line parses back to the same fields, the expression
// one URL-escaped field.
func TestAppendGetWhereRoundTrip(t *testing.T) {
	for _, tc := range []struct{ tags, where, wantTags string }{
		{"", "TAGS IN ('paid','refunded') AND amount > 100", "*"},
		{"paid||x", "name = 'O''Brien & co' OR n <= -1.5e3", "paid||x"},
		{"*", "a = 'tab\\there+plus%'", "*"},
	} {
		line := AppendGetWhere(nil, "orders", "g", 3, 17, 1024, -5, 0, tc.tags, tc.where)
		var got *Command
		var p Parser
		if err := p.Parse(line, func(c *Command) error {
			cc := *c
			cc.Tags, cc.Where = append([]byte(nil), c.Tags...), append([]byte(nil), c.Where...)
			got = &cc
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Err != nil || got.Op != OpGet || got.Partition != 3 || got.Offset != 17 || got.Opaque != -5 ||
			string(got.Tags) != tc.wantTags || Unescape(got.Where) != tc.where {
			t.Fatalf("%q parsed as %+v", line, got)
		}
	}
	if a, b := AppendGetWhere(nil, "t", "g", 0, 0, 1, 1, 5, "x", ""), AppendGet(nil, "t", "g", 0, 0, 1, 1, 5, "x"); string(a) != string(b) {
		t.Fatalf("empty where: %q, want %q", a, b)
	}
}
