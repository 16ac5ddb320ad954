package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func TestProduceDelayedAndDLQCommands(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"d": 1}, false)
	at := strconv.FormatInt(time.Now().Add(time.Second).UnixMilli(), 10)
	for _, args := range [][]string{{"--delay", "500ms"}, {"--delay-level", "1"}, {"--deliver-at", at}} {
		out := c.mustRun(append([]string{"produce", "-t", "d", "-m", "later " + args[0], "--json"}, args...)...)
		if s := jsonLines[sentRow](t, out); len(s) != 1 || s[0].Offset != -1 {
			t.Fatalf("produce %v: %s", args, out)
		}
	}
	if _, _, code := c.run("produce", "-t", "d", "-m", "x", "--delay", "1s", "--delay-level", "2"); code != ExitUsage {
		t.Fatalf("two delay flags: exit %d", code)
	}
	if _, _, code := c.run("produce", "-t", "d", "-m", "x", "--deliver-at", "tomorrow"); code != ExitUsage {
		t.Fatalf("bad --deliver-at: exit %d", code)
	}
	messages := func() int64 {
		out, _, code := c.run("topics", "describe", "d", "--json")
		var d topicDetail
		if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
			return -1
		}
		return d.Messages
	}
	zktest.Eventually(t, 30*time.Second, func() bool { return messages() == 3 }, "3 delayed messages delivered")
	// The timer's pending count is a snapshot it publishes after each round,
	// so right after the last delivery it may still count it: wait for the
	// stats to agree (a deadline on a hung timer, not a timing assertion).
	var out string
	statsOK := func() bool {
		out = c.mustRun("delayed", "stats", "--json")
		var rows []delayedRow
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 1 && rows[0].Error == "" && rows[0].Delivered == 3 && rows[0].Pending == 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for !statsOK() {
		if time.Now().After(deadline) {
			t.Fatalf("delayed stats: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := c.mustRun("delayed", "stats"); !strings.Contains(out, "PENDING") {
		t.Fatalf("delayed stats table: %s", out)
	}

	// A dead letter, given back by a consumer of group g.
	sent, dl := deadLetter(t, c, "handler%20failed", "--tag", "p")
	if dl[0].Topic != "d" || dl[0].Reason != "handler failed" || dl[0].OrigMsgID != strconv.FormatInt(sent[0].MsgID, 10) || dl[0].Tag != "p" {
		t.Fatalf("dead letter %+v", dl[0])
	}
	if out := c.mustRun("dlq", "list", "-g", "g"); !strings.Contains(out, "handler failed") {
		t.Fatalf("dlq list table: %s", out)
	}
	if _, _, code := c.run("dlq", "resend", "-g", "g"); code != ExitUsage {
		t.Fatalf("resend without --msg-id/--all: exit %d", code)
	}
	c.mustRun("dlq", "resend", "-g", "g", "--msg-id", strconv.FormatInt(dl[0].MsgID, 10))
	zktest.Eventually(t, 20*time.Second, func() bool { return messages() == 5 }, "the dead letter is back on d")
	// Resent once: --all now finds it marked and sends nothing.
	var again map[string]int
	if out := c.mustRun("dlq", "resend", "-g", "g", "--all", "--json"); json.Unmarshal([]byte(out), &again) != nil ||
		again["resent"] != 0 || again["alreadyResent"] != 1 {
		t.Fatalf("second resend: %s", out)
	}
	if n := messages(); n != 5 {
		t.Fatalf("%d messages on d after a second resend, want 5", n)
	}
	// System topics are hidden unless --all.
	if out := c.mustRun("topics"); strings.Contains(out, "%DLQ%") {
		t.Fatalf("topics lists system topics: %s", out)
	}
	zktest.Eventually(t, 20*time.Second, func() bool {
		out, _, _ := c.run("topics", "--all")
		return strings.Contains(out, "%DLQ%g")
	}, "topics --all lists %%DLQ%%g")
}

// dlq resend --msg-id with an id that names no dead letter of the group fails (exit 3, the id
// on stderr) and resends nothing, also when another --msg-id names one: it resent the others and
// exited 0, so a mistyped id went unnoticed by a script.
func TestDLQResendUnknownID(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"d": 1}, false)
	_, dl := deadLetter(t, c, "failed")
	id := strconv.FormatInt(dl[0].MsgID, 10)
	out, errs, code := c.run("dlq", "resend", "-g", "g", "--msg-id", id, "--msg-id", "12345")
	if code != ExitNotFound || !strings.Contains(errs, "12345") {
		t.Fatalf("resend with an unknown id: exit %d, want %d\n%s%s", code, ExitNotFound, out, errs)
	}
	// Nothing was resent: the known one goes now, once.
	var r map[string]int
	if out := c.mustRun("dlq", "resend", "-g", "g", "--msg-id", id, "--json"); json.Unmarshal([]byte(out), &r) != nil || r["resent"] != 1 {
		t.Fatalf("resend of the known id after the failed one: %s", out)
	}
}

// deadLetter produces "poison" on topic d (with produceArgs), has group g give it back to the
// broker with reason (escaped as on the wire) and no retry left, and waits until dlq list shows
// it: the message as produced, and the dead letters listed (one).
func deadLetter(t *testing.T, c *cluster, reason string, produceArgs ...string) ([]sentRow, []dlqRow) {
	t.Helper()
	out := c.mustRun(append([]string{"produce", "-t", "d", "-m", "poison", "--json"}, produceArgs...)...)
	sent := jsonLines[sentRow](t, out)
	cl := c.brokers[0].Dial()
	cl.Send(fmt.Sprintf("retry g %d -1 5 %s\r\n", sent[0].MsgID, reason))
	if r := cl.Reply(); r.Code != 200 {
		t.Fatalf("retry: %d %s", r.Code, r.Body)
	}
	var dl []dlqRow
	zktest.Eventually(t, 20*time.Second, func() bool {
		out, _, code := c.run("dlq", "list", "-g", "g", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &dl) == nil && len(dl) == 1
	}, "one dead letter listed")
	return sent, dl
}
