package broker_test

// Bypasses of the ACLs docs/security.md promises, found by a security
// review; each test failed on the code before its fix. Users (usersFile):
// alice publish/subscribe orders.*, groups billing-*; bob publish *,
// nothing else; root admin.

import (
	"fmt"
	"strings"
	"testing"

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
