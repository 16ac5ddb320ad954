package broker_test

import "testing"

// mput is a publish for the ACL, like put: allowed where the user may
// publish, 403 elsewhere, and nothing stored when refused.
func TestBatchPutACL(t *testing.T) {
	b := runSecure(t, false, "", nil)
	c := b.Dial()
	want(t, c, "mput orders.eu 1 1 6 1\r\n1 0\r\nx", 403) // not authenticated
	login(t, c, "alice", "pw-alice")
	want(t, c, "mput orders.eu 1 2 12 2\r\n1 0\r\nx1 0\r\ny", 200)
	want(t, c, "mput test 0 1 6 3\r\n1 0\r\nx", 403) // alice may not publish to test
	if n := b.Store.MaxOffset("test", 0); n != 0 {
		t.Fatalf("test has %d messages", n)
	}
	if n := b.Store.MaxOffset("orders.eu", 1); n != 2 {
		t.Fatalf("orders.eu/1 has %d messages, want 2", n)
	}
}
