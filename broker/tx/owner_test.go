package tx

import (
	"path/filepath"
	"testing"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// prepareAs begins, fills and prepares the XA transaction key as user.
func prepareAs(t *testing.T, m *Manager, user, key string) {
	t.Helper()
	s := m.NewSession(nil)
	if _, err := m.CommandAs(s, user, key, "BEGIN", 0, ""); err != nil {
		t.Fatalf("BEGIN %s as %q: %v", key, user, err)
	}
	if _, err := m.Put(s, []byte(key), &store.Message{Topic: "t", Data: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	r, err := m.CommandAs(s, user, key, "PREPARE", 0, "")
	if err != nil || r.Body != "0" {
		t.Fatalf("PREPARE %s: %+v %v", key, r, err)
	}
	if r.Flush != nil {
		if err := r.Flush.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

func wantOwner(t *testing.T, m *Manager, key, user string, known, held bool) {
	t.Helper()
	if u, k, h := m.XAOwner([]byte(key)); u != user || k != known || h != held {
		t.Fatalf("XAOwner(%s) = %q known %v held %v, want %q %v %v", key, u, k, h, user, known, held)
	}
}

// The owner of an XA transaction (docs/security.md) was kept by the broker
// in memory only: after a restart (or a promotion) a prepared transaction
// had none, and its own transaction manager, unless an admin, could not
// finish it. Its prepare op records the owner now, and recovery restores it;
// a hostile user name does not break the op (ops are split on spaces).
func TestXAOwnerSurvivesRestart(t *testing.T) {
	const key, key2, key3 = "XID:1:0a:01:q", "XID:1:0b:01:q", "XID:1:0c:01:q"
	hostile := "eve 7 1 owner=root\r\nrollback XID:1:0a:01:q %zz+ü"
	dir := filepath.Join(t.TempDir(), "data")
	st, m := openTorn(t, dir)
	prepareAs(t, m, "alice@corp.example", key)
	prepareAs(t, m, hostile, key2)
	prepareAs(t, m, "", key3) // security off: no owner
	wantOwner(t, m, key, "alice@corp.example", true, true)
	wantOwner(t, m, key2, hostile, true, true)
	s := m.NewSession(nil)
	if _, err := m.CommandAs(s, "bob", key, "BEGIN", 0, ""); err != nil { // a no-op: the owner stays
		t.Fatal(err)
	}
	wantOwner(t, m, key, "alice@corp.example", true, true)
	closeTorn(t, st, m)

	st, m = openTorn(t, dir)
	if p := m.Prepared(""); len(p) != 3 {
		t.Fatalf("after restart prepared = %q, want 3", p)
	}
	wantOwner(t, m, key, "alice@corp.example", true, true)
	wantOwner(t, m, key2, hostile, true, true)
	wantOwner(t, m, key3, "", false, true)
	wantOwner(t, m, "XID:1:0d:01:q", "", false, false)
	// After a promotion (Recover rebuilds the table from the log) too.
	if err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, m, key, "alice@corp.example", true, true)
	wantOwner(t, m, key2, hostile, true, true)
	if _, err := m.Command(m.NewSession(nil), key, "ROLLBACK", 0, ""); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, m, key, "", false, false)
	closeTorn(t, st, m)
}

// A prepare op of an older broker has no owner= field: it still recovers,
// with its owner unknown (admins only).
func TestXAPrepareOpWithoutOwner(t *testing.T) {
	const key = "XID:1:0a:01:q"
	dir := filepath.Join(t.TempDir(), "data")
	st, m := openTorn(t, dir)
	res, err := st.Append(&store.Message{Topic: HalfTopic, SysFlag: protocol.SysFlagTxPrepared,
		Properties: halfProps(nil, "t", 0, "xid", key, nil), Data: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(&store.Message{Topic: OpTopic, Data: []byte("prepare " + key + " 0 1")}); err != nil || res.QueueOffset != 0 {
		t.Fatal(err, res.QueueOffset)
	}
	closeTorn(t, st, m)

	st, m = openTorn(t, dir)
	defer closeTorn(t, st, m)
	if p := m.Prepared(""); len(p) != 1 || p[0] != key {
		t.Fatalf("after restart prepared = %q, want [%q]", p, key)
	}
	wantOwner(t, m, key, "", false, true)
}

// The owner= field of a prepare op: escaped so that no user name can add a
// field or a line, and read back exactly; a malformed one is refused.
func TestPrepareOpOwner(t *testing.T) {
	for _, u := range []string{"alice", "a@b.c", "x y", "a=b", "%41", "+", "r\r\nrollback x", "ü\x00\xff", "owner=root"} {
		b := appendPrepareOp(nil, "XID:1:0a:01:q", 12, 3, u)
		if f := splitSpaces(b); len(f) != 5 {
			t.Errorf("owner %q: op %q has %d fields", u, b, len(f))
		}
		o, err := parseOp(b)
		if err != nil || o.verb != "prepare" || o.key != "XID:1:0a:01:q" || o.halfFrom != 12 || o.n != 3 || o.owner != u || !o.ownerKnown {
			t.Errorf("owner %q: op %q read back as %+v %v", u, b, o, err)
		}
	}
	if o, err := parseOp(appendPrepareOp(nil, "XID:1:0a:01:q", 12, 3, "")); err != nil || o.ownerKnown {
		t.Errorf("no owner: %+v %v", o, err)
	}
	for _, bad := range []string{"prepare x 1 2 owner=", "prepare x 1 2 owner", "prepare x 1 2 user=a", "prepare x 1 2 owner=a+b",
		"prepare x 1 2 owner=%4", "prepare x 1 2 owner=%4g", "prepare x 1 2 owner=a\x00", "prepare x 1 2 owner=a owner=b"} {
		if _, err := parseOp([]byte(bad)); err == nil {
			t.Errorf("parseOp(%q) accepted", bad)
		}
	}
}
