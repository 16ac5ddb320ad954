package broker_test

// Bypasses of the ACLs docs/security.md promises, found by a security
// review; each test failed on the code before its fix. Users (usersFile):
// alice publish/subscribe orders.*, groups billing-*; bob publish *,
// nothing else; root admin.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// TestTraceNeedsIdentity: docs/security.md: with anonymous=none only auth,
// version and quit are served before auth; `trace on` was answered 200.
func TestTraceNeedsIdentity(t *testing.T) {
	b := runSecure(t, false, "", nil)
	c := b.Dial()
	c.Send("trace on 1\r\n")
	if r := c.Reply(); r.Code != 403 {
		t.Fatalf("unauthenticated `trace on`: %d %q, want 403", r.Code, strings.TrimSpace(string(r.Body)))
	}
	login(t, c, "bob", "pw bob+")
	want(t, c, "trace on 2\r\n", 200)
}

// TestHalfPutNeedsGroup: a half message (tx=half&pgroup=G) makes the
// connection a producer of G (tx.PutHalf → registerLocked, the target of
// G's check requests) and records G, but authorize checked only the topic:
// bob, refused `producer billing-1`, got the same through a half put.
func TestHalfPutNeedsGroup(t *testing.T) {
	b := runSecure(t, false, "", nil)
	bob := b.Dial()
	login(t, bob, "bob", "pw bob+")
	want(t, bob, "producer billing-1 1\r\n", 403)
	body := "tx=half&pgroup=billing-1\nx"
	bob.Send(fmt.Sprintf("put test 0 %d %d 2\r\n%s", len(body), protocol.FlagHasProperties, body))
	if r := bob.Reply(); r.Code != 403 {
		t.Fatalf("half put as producer group billing-1 by bob (no right on the group): %d %q, want 403", r.Code, r.Body)
	}
	if n := b.Store.MaxOffset("%TX_HALF%", 0); n != 0 {
		t.Fatalf("%%TX_HALF%% holds %d records after the refused half put", n)
	}
	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	a.Send(fmt.Sprintf("put orders.eu 0 %d %d 3\r\n%s", len(body), protocol.FlagHasProperties, body))
	if r := a.Reply(); r.Code != 200 {
		t.Fatalf("alice's half put of group billing-1: %d %q, want 200", r.Code, r.Body)
	}
}

// dlqRecords reads %DLQ%<group> as c (its records, waiting for the first).
func dlqRecords(t *testing.T, c *brokertest.Client, group string) []protocol.Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c.Send("get %DLQ%" + group + " " + group + " 0 0 65536 40\r\n")
		if g := c.Reply(); g.Code == 200 {
			return brokertest.Records(t, g.Body)
		}
	}
	t.Fatalf("nothing in %%DLQ%%%s", group)
	return nil
}

// TestRetryNeedsSubscribeOnTopic: `retry <group> <msgId> -1` checked only
// the group, and the delay service copies ANY message id into
// %DLQ%<group>, which the group's user may read: alice (no right on topic
// test) read root's message in test. A retry now needs subscribe on the
// message's original topic; other system topics are for admins.
func TestRetryNeedsSubscribeOnTopic(t *testing.T) {
	b := runSecure(t, false, "", nil)
	root := b.Dial()
	login(t, root, "root", "pw-root")
	id, _, _ := root.Put("test", 0, "top-secret", 1)

	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	want(t, a, "get test billing-1 0 0 65536 2\r\n", 403) // alice cannot read test directly
	r := want(t, a, fmt.Sprintf("retry billing-1 %d -1 3\r\n", id), 403)
	if !strings.Contains(string(r.Body), "subscribe") {
		t.Errorf("refused retry: %q, want the reason", r.Body)
	}

	// Her own topic's message goes to her DLQ; retried from there, the
	// topic its retryTopic names (orders.eu) is the one checked.
	own, _, _ := a.Put("orders.eu", 0, "mine", 4)
	want(t, a, fmt.Sprintf("retry billing-1 %d -1 5\r\n", own), 200)
	recs := dlqRecords(t, a, "billing-1")
	if len(recs) != 1 || string(recs[0].Data) != "mine" {
		t.Fatalf("%%DLQ%%billing-1: %+v, want alice's message only", recs)
	}
	want(t, a, fmt.Sprintf("retry billing-1 %d -1 6\r\n", recs[0].MsgID), 200)

	// A dead letter of another group (root put it there), and any other
	// system topic's record: admins only.
	want(t, root, fmt.Sprintf("retry billing-2 %d -1 7\r\n", own), 200)
	other := dlqRecords(t, root, "billing-2")[0].MsgID
	want(t, a, fmt.Sprintf("retry billing-1 %d -1 8\r\n", other), 403)
	want(t, root, fmt.Sprintf("retry billing-1 %d -1 9\r\n", id), 200) // an admin may
	want(t, a, fmt.Sprintf("retry billing-1 %d -1 10\r\n", int64(1)<<60), 404)
}

// TestResendNeedsPublishOnTopic: `retry <group> <dlqId> -2` (resend a dead
// letter) appended to the dead letter's original topic with only the group
// checked: alice (no publish right on test) resent into test a dead letter
// of her group whose original topic is test. A resend now needs publish on
// that topic.
func TestResendNeedsPublishOnTopic(t *testing.T) {
	b := runSecure(t, false, "", nil)
	root := b.Dial()
	login(t, root, "root", "pw-root")
	id, _, _ := root.Put("test", 0, "pay 100", 1)
	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	want(t, a, "put test 0 3 0 2\r\nnew", 403) // alice may not publish to test
	want(t, root, fmt.Sprintf("retry billing-1 %d -1 3\r\n", id), 200)
	dlq := dlqRecords(t, a, "billing-1")[0].MsgID
	a.Send(fmt.Sprintf("retry billing-1 %d -2 5\r\n", dlq))
	r := a.Reply()
	if n := b.Store.MaxOffset("test", 0); r.Code != 403 || n != 1 {
		t.Fatalf("alice's resend into test: %d %q, want 403; test now holds %d messages (was 1)", r.Code, r.Body, n)
	}

	// Her own topic's dead letter she may resend.
	own, _, _ := a.Put("orders.eu", 0, "mine", 6)
	want(t, a, fmt.Sprintf("retry billing-1 %d -1 7\r\n", own), 200)
	var mine int64 = -1
	for deadline := time.Now().Add(10 * time.Second); mine < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, rec := range dlqRecords(t, a, "billing-1") {
			if string(rec.Data) == "mine" {
				mine = rec.MsgID
			}
		}
	}
	want(t, a, fmt.Sprintf("retry billing-1 %d -2 8\r\n", mine), 200)
	want(t, root, fmt.Sprintf("retry billing-1 %d -2 9\r\n", dlq), 200) // an admin may
}

// TestTxEndNeedsGroup: txend needed only an identity, and the transaction
// table finishes any pending half message by id, whoever's it is: bob (no
// group, no subscribe) rolled back alice's half message of group
// billing-1. Ending a half message now needs its producer group, a commit
// also publish on its topic.
func TestTxEndNeedsGroup(t *testing.T) {
	b := runSecure(t, false, "", nil)
	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	half := func(opaque int) int64 {
		body := "tx=half&pgroup=billing-1\npayload"
		a.Send(fmt.Sprintf("put orders.eu 0 %d %d %d\r\n%s", len(body), protocol.FlagHasProperties, opaque, body))
		r := a.Reply()
		if r.Code != 200 {
			t.Fatalf("alice's half put: %d %q", r.Code, r.Body)
		}
		id, _, _, err := protocol.ParsePutResult(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := half(1)

	bob := b.Dial()
	login(t, bob, "bob", "pw bob+")
	want(t, bob, "producer billing-1 1\r\n", 403) // bob is no producer of billing-1
	for i, act := range []string{"rollback", "commit", "unknown"} {
		if r := want(t, bob, fmt.Sprintf("txend %d %s %d\r\n", id, act, 2+i), 403); !strings.Contains(string(r.Body), "group") {
			t.Errorf("bob's txend %s: %q, want the reason", act, r.Body)
		}
	}
	// Refusals in a batch keep their places among the replies.
	bob.Send(fmt.Sprintf("version 5\r\ntxend %d rollback 6\r\ntxend %d rollback 7\r\nversion 8\r\n", id, int64(1)<<60))
	for _, w := range []struct {
		code   int
		opaque int32
	}{{200, 5}, {403, 6}, {404, 7}, {200, 8}} {
		if r := bob.Reply(); r.Code != w.code || r.Opaque != w.opaque {
			t.Fatalf("batch: %d %q opaque %d, want %d opaque %d", r.Code, r.Body, r.Opaque, w.code, w.opaque)
		}
	}
	plain, _, _ := bob.Put("test", 0, "plain", 9)
	want(t, bob, fmt.Sprintf("txend %d commit 9\r\n", plain), 404) // not a half message

	want(t, a, fmt.Sprintf("txend %d commit 10\r\n", id), 200) // still alice's to end
	root := b.Dial()
	login(t, root, "root", "pw-root")
	want(t, root, fmt.Sprintf("txend %d rollback 11\r\n", half(12)), 200) // an admin may (metaq tx rollback)

	// root's half message of billing-1 to test: alice, a producer of the
	// group, may roll it back but not commit it into test.
	body := "tx=half&pgroup=billing-1\nx"
	root.Send(fmt.Sprintf("put test 0 %d %d 13\r\n%s", len(body), protocol.FlagHasProperties, body))
	r := root.Reply()
	rid, _, _, err := protocol.ParsePutResult(r.Body)
	if r.Code != 200 || err != nil {
		t.Fatalf("root's half put: %d %q", r.Code, r.Body)
	}
	if r := want(t, a, fmt.Sprintf("txend %d commit 14\r\n", rid), 403); !strings.Contains(string(r.Body), "publish") {
		t.Errorf("alice's commit into test: %q, want the reason", r.Body)
	}
	want(t, a, fmt.Sprintf("txend %d rollback 15\r\n", rid), 200)
}

// TestPreAuthPutHoldsNoBudget: with anonymous=none an unauthenticated
// client could announce a put of maxMessageSize and trickle its data: the
// connection reserved the whole length from the broker-wide put budget
// before the put was authorized (authorize runs once the data is
// complete), so a few such connections held maxPendingPutBytes for
// putDataTimeoutMs each and stalled every authenticated producer whose put
// spans reads. Now such a put is refused on its first read.
func TestPreAuthPutHoldsNoBudget(t *testing.T) {
	dir := t.TempDir()
	users := usersFile(t, dir)
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"orders.*": 1, "test": 1},
		ExtraINI: "maxPendingPutBytes=600000\nputDataTimeoutMs=10000\n\n[security]\nusersFile=" + users + "\nanonymous=none\n"})
	root := b.Dial()
	login(t, root, "root", "pw-root")
	stat := func(key string) int64 {
		root.Send("stats 99\r\n")
		list, err := protocol.ParseStats(root.Reply().Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if s.Key == key {
				v, _ := strconv.ParseInt(s.Value, 10, 64)
				return v
			}
		}
		t.Fatalf("no %s in stats", key)
		return 0
	}

	evil := b.Dial() // never authenticates
	evil.Send("put test 0 500000 0 1\r\n" + strings.Repeat("x", 1000))
	// Before, the put was buffered and answered 400 after putDataTimeoutMs.
	if r, err := evil.TryReply(30 * time.Second); err != nil || r.Code != 403 {
		t.Fatalf("unauthenticated put of 500000 bytes spanning reads: %d %q %v, want 403 at once", r.Code, r.Body, err)
	}
	evil.ExpectClosed(10 * time.Second)
	small := b.Dial() // a small one spanning reads is answered 403, the connection kept
	small.Send("put test 0 2000 0 2\r\n" + strings.Repeat("x", 1000))
	time.Sleep(50 * time.Millisecond)
	small.Send(strings.Repeat("x", 1000))
	if r := small.Reply(); r.Code != 403 || r.Opaque != 2 {
		t.Fatalf("unauthenticated put of 2000 bytes: %d %q, want 403", r.Code, r.Body)
	}
	want(t, small, "version 3\r\n", 200) // the connection stays

	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	data := strings.Repeat("y", 200000)
	a.Send("put orders.eu 0 200000 0 2\r\n" + data[:1000])
	for deadline := time.Now().Add(10 * time.Second); stat("put_buffer_bytes") != 200000; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's put holds no reservation: put_buffer_bytes %d", stat("put_buffer_bytes"))
		}
	}
	a.Send(data[1000:])
	if r, err := a.TryReply(30 * time.Second); err != nil || r.Code != 200 {
		t.Fatalf("alice's authenticated put: %d %q %v", r.Code, r.Body, err)
	}
	if n := stat("put_buffer_waits"); n != 0 {
		t.Fatalf("put_buffer_waits %d: an authenticated put waited for budget", n)
	}
}

// TestXANeedsOwner: `transaction <xid> …` needed only an identity, and XA
// transactions are broker-wide by xid: any user could put into, prepare,
// commit or roll back another user's XA transaction. Now only the user who
// began it (on any connection: a transaction manager reconnecting) or an
// admin may. The owner was kept in memory only, so after a restart a
// prepared transaction had none and its own (non-admin) transaction manager
// could not commit it: the owner is in its prepare record now.
func TestXANeedsOwner(t *testing.T) {
	b := runSecure(t, false, "", nil)
	const xid, xid2 = "XID:1:0a0b:01:tm-host1", "XID:1:0a0c:01:tm-host1"
	a := b.Dial()
	login(t, a, "alice", "pw-alice")
	begin := func(key string, op int) {
		want(t, a, fmt.Sprintf("transaction %s s1 BEGIN 60 tm-host1 %d\r\n", key, op), 200)
		want(t, a, fmt.Sprintf("put orders.eu 0 3 0 -1 %s %d\r\nabc", key, op+1), 200)
		if r := want(t, a, fmt.Sprintf("transaction %s s1 PREPARE tm-host1 %d\r\n", key, op+2), 200); string(r.Body) != "0" {
			t.Fatalf("PREPARE %s voted %q", key, r.Body)
		}
	}
	begin(xid, 1)

	bob := b.Dial()
	login(t, bob, "bob", "pw bob+")
	for i, typ := range []string{"BEGIN 60 tm-host1", "PREPARE", "COMMIT_ONE_PHASE", "COMMIT_TWO_PHASE", "ROLLBACK"} {
		if r := want(t, bob, fmt.Sprintf("transaction %s s9 %s %d\r\n", xid, typ, 10+i), 403); !strings.Contains(string(r.Body), "another user") {
			t.Errorf("bob's %s of alice's transaction: %q, want the reason", typ, r.Body)
		}
	}
	want(t, bob, fmt.Sprintf("put orders.eu 0 3 0 -1 %s 20\r\nbad", xid), 403)

	// alice's transaction manager, reconnected, commits it.
	a2 := b.Dial()
	login(t, a2, "alice", "pw-alice")
	want(t, a2, fmt.Sprintf("transaction %s s2 COMMIT_TWO_PHASE tm-host1 21\r\n", xid), 200)
	r := want(t, a2, "get orders.eu billing-1 0 0 65536 22\r\n", 200)
	if recs := brokertest.Records(t, r.Body); len(recs) != 1 || string(recs[0].Data) != "abc" {
		t.Fatalf("orders.eu after the commit: %+v", recs)
	}
	// A prepared transaction keeps its owner across a restart (its prepare
	// record names it): alice's transaction manager commits it, bob still
	// cannot, and a BEGIN does not claim it.
	begin(xid2, 30)
	b.restart(t)
	a, bob = b.Dial(), b.Dial()
	login(t, a, "alice", "pw-alice")
	login(t, bob, "bob", "pw bob+")
	for i, typ := range []string{"BEGIN 60 tm-host1", "COMMIT_TWO_PHASE", "ROLLBACK"} {
		if r := want(t, bob, fmt.Sprintf("transaction %s s9 %s %d\r\n", xid2, typ, 40+i), 403); !strings.Contains(string(r.Body), "another user") {
			t.Errorf("bob's %s of alice's transaction after a restart: %q, want the reason", typ, r.Body)
		}
	}
	want(t, a, fmt.Sprintf("transaction %s s1 COMMIT_TWO_PHASE tm-host1 43\r\n", xid2), 200)
	r = want(t, a, "get orders.eu billing-1 0 1 65536 44\r\n", 200)
	if recs := brokertest.Records(t, r.Body); len(recs) != 1 || string(recs[0].Data) != "abc" {
		t.Fatalf("orders.eu after the commit of %s: %+v", xid2, recs)
	}
}

// TestXAOwnerlessPreparedIsAdminOnly: a transaction prepared with no
// recorded owner (with security off, as by an older broker, whose prepare
// records name none) is admin only once [security] is on, and a BEGIN does
// not claim it.
func TestXAOwnerlessPreparedIsAdminOnly(t *testing.T) {
	const xid = "XID:1:0a0d:01:tm-host1"
	dir := t.TempDir()
	opts := brokertest.Options{Dir: dir, Topics: map[string]int{"orders.*": 2}}
	plain := brokertest.RunBroker(t, opts)
	c := plain.Dial()
	want(t, c, fmt.Sprintf("transaction %s s1 BEGIN 60 tm-host1 1\r\n", xid), 200)
	want(t, c, fmt.Sprintf("put orders.eu 0 3 0 -1 %s 2\r\nabc", xid), 200)
	want(t, c, fmt.Sprintf("transaction %s s1 PREPARE tm-host1 3\r\n", xid), 200)
	plain.Stop()

	users := usersFile(t, dir)
	opts.ExtraINI = "\n[security]\nusersFile=" + users + "\nanonymous=none\n"
	b := brokertest.RunBroker(t, opts)
	a, bob := b.Dial(), b.Dial()
	login(t, a, "alice", "pw-alice")
	login(t, bob, "bob", "pw bob+")
	want(t, bob, fmt.Sprintf("transaction %s s9 BEGIN 60 tm-host1 4\r\n", xid), 403)
	if r := want(t, a, fmt.Sprintf("transaction %s s1 COMMIT_TWO_PHASE tm-host1 5\r\n", xid), 403); !strings.Contains(string(r.Body), "admin") {
		t.Errorf("ownerless commit: %q, want the reason", r.Body)
	}
	root := b.Dial()
	login(t, root, "root", "pw-root")
	want(t, root, fmt.Sprintf("transaction %s s3 ROLLBACK tm-host1 6\r\n", xid), 200)
}
