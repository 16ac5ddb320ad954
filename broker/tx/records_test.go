package tx

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		kind Kind
		uq   string
		ok   bool
	}{
		{"null", KindNull, "", true},
		{"TX:10.0.0.5-1380000000000-1:1", KindLocal, "", true},
		{"TX:s:-3", KindLocal, "", true},
		{"TX:s", 0, "", false},
		{"TX::1", 0, "", false},
		{"TX:s:x", 0, "", false},
		{"TX:a:b:1", 0, "", false},
		{"XID:1:0a0b:01:XAMessageProducer-host1", KindXA, "XAMessageProducer-host1", true},
		{"XID:1::ff:q", KindXA, "q", true}, // an empty gtrid is valid hex
		{"XID:1:0A:01:q", 0, "", false},    // uppercase
		{"XID:1:0a0:01:q", 0, "", false},   // odd length
		{"XID:x:0a:01:q", 0, "", false},
		{"XID:1:0a:01", 0, "", false},
		{"tx:s:1", 0, "", false},
		{"", 0, "", false},
	} {
		kind, uq, err := ParseKey([]byte(tc.key))
		if (err == nil) != tc.ok || kind != tc.kind || uq != tc.uq {
			t.Errorf("ParseKey(%q) = %v %q %v", tc.key, kind, uq, err)
		}
	}
}

func TestHalfPropsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		topic, key, val string
		own             string
	}{
		{"orders", "pg", "order-service", "tx=half&pgroup=order-service&tag=a"},
		{"%RETRY%g", "xid", "XID:1:0a:01:u q&=", ""},
		{"t", "pg", "g", "keys=a%20b"},
	} {
		p := halfProps(nil, tc.topic, 7, tc.key, tc.val, []byte(tc.own))
		h, err := parseHalfProps(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		want := halfMeta{topic: tc.topic, partition: 7}
		if tc.key == "pg" {
			want.group = tc.val
		} else {
			want.xid = tc.val
		}
		if h.topic != want.topic || h.partition != 7 || h.group != want.group || h.xid != want.xid || string(h.own) != tc.own {
			t.Fatalf("%q: %+v", p, h)
		}
	}
	for _, bad := range []string{"", "rt=a", "rt=a&rp=1", "rp=1&rt=a&pg=g", "rt=a&rp=-1&pg=g", "rt=&rp=1&pg=g", "rt=a&rp=1&zz=g", "rt=a&rp=x&pg=g"} {
		if _, err := parseHalfProps([]byte(bad)); err == nil {
			t.Errorf("parseHalfProps(%q) accepted", bad)
		}
	}
}

func TestOpsRoundTrip(t *testing.T) {
	for _, o := range []op{{verb: "prepare", key: "XID:1:0a:01:q", halfFrom: 12, n: 3}, {verb: "commit", key: "XID:1:0a:01:q"},
		{verb: "hrollback", key: "281474976710858"}} {
		got, err := parseOp(appendOp(nil, o.verb, o.key, o.halfFrom, o.n))
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("%+v: %+v %v", o, got, err)
		}
	}
	c := op{verb: "commit", key: "XID:1:0a:01:q", halfFrom: 12, n: 3, from: 1, runBytes: 300, lastBytes: 100, runKnown: true}
	if got, err := parseOp(appendCommitOp(nil, &c)); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("%+v: %+v %v", c, got, err)
	}
	for _, bad := range []string{"", "prepare x", "prepare x 1", "prepare x -1 2", "prepare x 1 0", "commit", "commit a b", "bogus a",
		"commit x 1 2 3 4", "commit x 1 2 2 300 100", "commit x 1 2 0 100 300", "commit x 1 2 0 300 0", "commit x 1 2 0 300 -5"} {
		if _, err := parseOp([]byte(bad)); err == nil {
			t.Errorf("parseOp(%q) accepted", bad)
		}
	}
}

func TestWithoutProp(t *testing.T) {
	for in, want := range map[string]string{
		"tx=half&pgroup=g&tag=a": "pgroup=g&tag=a",
		"tag=a&tx=half":          "tag=a",
		"tx=half":                "",
		"a=1&&tx&b=2":            "a=1&b=2",
	} {
		if got := string(withoutProp([]byte(in), "tx")); got != want {
			t.Errorf("withoutProp(%q) = %q, want %q", in, got, want)
		}
	}
}

// The decoders of what recovery reads never panic, whatever the bytes.
func FuzzRecords(f *testing.F) {
	f.Add([]byte("rt=orders&rp=1&pg=g&tag=a"))
	f.Add([]byte("prepare XID:1:0a:01:q 12 3"))
	f.Add([]byte("commit XID:1:0a:01:q 12 3 0 300 100"))
	f.Add([]byte("XID:1:0a:01:q"))
	f.Add([]byte("TX:s:1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHalfProps(b); err == nil && h.topic == "" {
			t.Fatal("accepted an empty topic")
		}
		if o, err := parseOp(b); err == nil && (o.verb == "" || strings.ContainsAny(o.key, " \t\r\n")) {
			t.Fatalf("bad op accepted: %+v", o)
		}
		_, _, _ = ParseKey(b)
		_ = withoutProp(b, "tx")
		_, _ = HalfGroup(b)
	})
}
