package tx

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
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

// A new transaction key must be printable ASCII: the wire passes any byte
// but ' ' and control bytes, and a key with a Unicode space (U+00A0, U+0085,
// U+2000…) was split by the parse of its %TX_OP% records, so a prepared
// transaction answered PREPARE=0 was gone after a restart. BEGIN refuses
// such a key (400); a prepare op an older broker wrote with one is read back
// whole, and the transaction can still be committed.
func TestPreparedXAKeyWithUnicodeSpace(t *testing.T) {
	const key = "XID:1:0a:01:host\u00a0one"
	for _, k := range []string{key, "XID:1:0a:01:h\u00f4te", "XID:1:0a:01:host\u0085", "TX:s\u2000:1", "XID:1:0a:01:q\x7f"} {
		_, m := openManager(t, Config{})
		var br *BadRequest
		if _, err := m.Command(m.NewSession(nil), k, "BEGIN", 0, ""); !errors.As(err, &br) {
			t.Errorf("BEGIN %q: %v, want a BadRequest", k, err)
		}
	}
	if o, err := parseOp(appendOp(nil, "prepare", key, 7, 1)); err != nil || o.key != key || o.halfFrom != 7 || o.n != 1 {
		t.Fatalf("prepare op of %q read back as %+v %v", key, o, err)
	}

	// The records of a prepare an older broker answered for that key.
	dir := filepath.Join(t.TempDir(), "data")
	st, m := openTorn(t, dir)
	res, err := st.Append(&store.Message{Topic: HalfTopic, SysFlag: protocol.SysFlagTxPrepared,
		Properties: halfProps(nil, "t", 0, "xid", key, nil), Data: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(&store.Message{Topic: OpTopic, Data: appendOp(nil, "prepare", key, res.QueueOffset, 1)}); err != nil {
		t.Fatal(err)
	}
	closeTorn(t, st, m)

	st, m = openTorn(t, dir)
	defer closeTorn(t, st, m)
	if p := m.Prepared(""); len(p) != 1 || p[0] != key {
		t.Fatalf("after restart prepared = %q, want [%q]", p, key)
	}
	r, err := m.Command(m.NewSession(nil), key, "COMMIT_TWO_PHASE", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Flush != nil {
		if err := r.Flush.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); st.MaxOffset("t", 0) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the committed message is not readable")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An hend op names the half messages it finishes, in order, and the run of
// real messages that follows it.
func TestEndOpRoundTrip(t *testing.T) {
	items := []endItem{
		{h: &half{id: 281474976710858}, req: &EndReq{}, a: Commit},
		{h: &half{id: 12}, req: &EndReq{}, a: Rollback},
		{h: &half{id: 99}, req: &EndReq{Err: ErrNotFound}, a: Commit}, // left out
		{h: &half{id: 0}, req: &EndReq{}, a: Commit},
	}
	b := appendEndOp(nil, 300, 100, items)
	if string(b) != "hend 300 100 +281474976710858 -12 +0" {
		t.Fatalf("%q", b)
	}
	o, err := parseOp(b)
	want := []endID{{281474976710858, true}, {12, false}, {0, true}}
	if err != nil || o.verb != "hend" || o.runBytes != 300 || o.lastBytes != 100 || !reflect.DeepEqual(o.ends, want) {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err := parseOp([]byte("hend 0 0 -7")); err != nil || len(o.ends) != 1 || o.ends[0].commit {
		t.Fatalf("rollback only: %+v %v", o, err)
	}
	for _, bad := range []string{"hend", "hend 1 1", "hend 300 100", "hend 300 100 -1", "hend 0 0 +1", "hend 100 300 +1",
		"hend 300 0 +1", "hend 0 5 -1", "hend 300 100 1", "hend 300 100 +x", "hend 300 100 +-1", "hend -1 -1 -1", "hend 300 100 +"} {
		if _, err := parseOp([]byte(bad)); err == nil {
			t.Errorf("parseOp(%q) accepted", bad)
		}
	}
}

func TestPropsHelpers(t *testing.T) {
	for in, want := range map[string]string{
		"tx=half&pgroup=g&tag=a": "&pgroup=g&tag=a",
		"tag=a&tx=half":          "&tag=a",
		"tx=half":                "",
		"a=1&&tx&b=2":            "&a=1&b=2",
		"":                       "",
	} {
		if got := string(appendPropsWithout(nil, []byte(in), "tx")); got != want {
			t.Errorf("appendPropsWithout(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"tx=half": true, "a=1&tx=": true, "atx=1": false, "tx": false, "a=tx=1": false, "": false, "tx=": true} {
		if got := hasProp([]byte(in), "tx"); got != want {
			t.Errorf("hasProp(%q) = %v", in, got)
		}
	}
	for in, want := range map[string]bool{"delay=3": true, "a=1&deliverAt=5": true, "tag=a": false, "": false} {
		if got := MayDelay([]byte(in)); got != want {
			t.Errorf("MayDelay(%q) = %v", in, got)
		}
	}
	for in, want := range map[string]string{"tx=half&pgroup=g": "g", "pgroup=g&tx=half": "g", "tx=half": ""} {
		if g, ok := HalfGroupRaw([]byte(in)); !ok || string(g) != want {
			t.Errorf("HalfGroupRaw(%q) = %q %v", in, g, ok)
		}
	}
	for _, in := range []string{"", "pgroup=g", "tx=full&pgroup=g", "tx=half&tx=no"} {
		if _, ok := HalfGroupRaw([]byte(in)); ok {
			t.Errorf("HalfGroupRaw(%q) took it for a half message", in)
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
	f.Add([]byte("prepare XID:1:0a:01:q 12 3 owner=alice%40corp"))
	f.Add([]byte("commit XID:1:0a:01:q 12 3 0 300 100"))
	f.Add([]byte("XID:1:0a:01:q"))
	f.Add([]byte("TX:s:1"))
	f.Add([]byte("hend 300 100 +281474976710858 -12 +40"))
	f.Add([]byte("hend 0 0 -12"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHalfProps(b); err == nil && h.topic == "" {
			t.Fatal("accepted an empty topic")
		}
		if o, err := parseOp(b); err == nil && (o.verb == "" || strings.ContainsAny(o.key, " \t\r\n")) {
			t.Fatalf("bad op accepted: %+v", o)
		}
		_, _, _ = ParseKey(b)
		_ = withoutProp(b, "tx")
		_ = appendPropsWithout(nil, b, "tx")
		_, _ = HalfGroup(b)
		_ = hasProp(b, "tx")
	})
}
