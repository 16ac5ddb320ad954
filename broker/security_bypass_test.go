package broker_test

// Bypasses of the ACLs docs/security.md promises, found by a security
// review; each test failed on the code before its fix. Users (usersFile):
// alice publish/subscribe orders.*, groups billing-*; bob publish *,
// nothing else; root admin.

import (
	"strings"
	"testing"
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
