package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// metaq health: every registered broker answers (exit 0, --json), a broker
// that does not answer fails it (exit 1), an impossible disk threshold too.
func TestHealthCommand(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"orders": 1}, false)
	out, stderr, code := c.run("health", "--json")
	if code != 0 {
		t.Fatalf("health: %d\n%s%s", code, out, stderr)
	}
	var rep healthReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Healthy {
		t.Fatalf("health --json: %v %+v", err, rep)
	}
	answers := 0
	for _, ch := range rep.Checks {
		if ch.Check == "answers" && ch.OK {
			answers++
		}
	}
	if answers != 2 {
		t.Fatalf("%d brokers answered, want 2: %+v", answers, rep)
	}
	if out, _, code := c.run("health", "--server", c.brokers[0].Addr, "--min-disk-free", "100"); code != 1 || !strings.Contains(out, "FAIL disk") {
		t.Fatalf("health with an impossible disk threshold: %d\n%s", code, out)
	}
	c.brokers[1].Stop()
	if out, _, code := c.run("health", "--server", c.brokers[0].Addr+","+c.brokers[1].Addr); code != 1 || !strings.Contains(out, "FAIL answers") {
		t.Fatalf("health with a stopped broker: %d\n%s", code, out)
	}
	if out, _, code := c.run("health", "--server", c.brokers[0].Addr); code != 0 || !strings.Contains(out, "OK   answers") {
		t.Fatalf("health of the live broker: %d\n%s", code, out)
	}
}

// metaq health with no broker registered in ZooKeeper fails its "brokers" check: exit 1, as its
// help and docs/observability.md say (the help said 4).
func TestHealthNoBrokerRegistered(t *testing.T) {
	out, errs, code := runCLI(t, context.Background(), zktest.Server(t), "", "health")
	if code != ExitFailure || !strings.Contains(out, "FAIL brokers") {
		t.Fatalf("health without brokers: exit %d, want %d\n%s%s", code, ExitFailure, out, errs)
	}
}
