package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// metaq tx list shows a prepared XA transaction and the pending half
// messages; tx commit / rollback complete them by hand.
func TestTxCommand(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := b.Dial()
	const xid = "XID:1:0a:01:uq1"
	c.Send("transaction " + xid + " s BEGIN uq1 1\r\nput test 0 2 0 " + xid + " 2\r\nm1transaction " + xid + " s PREPARE uq1 3\r\n")
	for i := 0; i < 3; i++ {
		if r := c.Reply(); r.Code != 200 {
			t.Fatalf("setup reply %d: %d %q", i, r.Code, r.Body)
		}
	}
	body := "tx=half&pgroup=g\nh1"
	c.Send(fmt.Sprintf("put test 1 %d 2 4\r\n%s", len(body), body))
	r := c.Reply()
	halfID := strings.Fields(string(r.Body))[0]

	out, errOut, code := runCLI(t, ctx, "", "", "tx", "list", "--broker", b.Addr)
	if code != 0 || !strings.Contains(out, xid) || !strings.Contains(out, b.Addr) || !strings.Contains(out, " 1") {
		t.Fatalf("tx list: %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, ctx, "", "", "tx", "commit", xid, "--broker", b.Addr)
	if code != 0 || !strings.Contains(out, "committed") {
		t.Fatalf("tx commit: %d\n%s\n%s", code, out, errOut)
	}
	_, _, code = runCLI(t, ctx, "", "", "tx", "commit", xid, "--broker", b.Addr)
	if code != ExitNotFound {
		t.Fatalf("second tx commit: exit %d, want %d", code, ExitNotFound)
	}
	out, errOut, code = runCLI(t, ctx, "", "", "tx", "rollback", halfID, "--broker", b.Addr)
	if code != 0 || !strings.Contains(out, "rolled back") {
		t.Fatalf("tx rollback: %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = runCLI(t, ctx, "", "", "--json", "tx", "list", "--broker", b.Addr)
	if code != 0 || !strings.Contains(out, `"prepared": null`) || !strings.Contains(out, `"pendingHalf": 0`) {
		t.Fatalf("tx list after: %d %s", code, out)
	}
	c.Send("get test g 0 0 65536 9\r\n")
	if recs := brokertest.Records(t, c.Reply().Body); len(recs) != 1 || string(recs[0].Data) != "m1" {
		t.Fatalf("records %+v", recs)
	}
}
