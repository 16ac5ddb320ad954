package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// Two `metaq consume --shared` runs of one group read one partition:
// together they print every message once (each run acknowledges what it
// printed), and a third run finds nothing left.
func TestConsumeShared(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"solo": 1}})
	c := b.Dial()
	for i := 0; i < 20; i++ {
		c.Put("solo", 0, fmt.Sprintf("s%02d", i), int32(i))
	}
	var lines []string
	for _, count := range []string{"8", "12"} {
		out, errs, code := runCLI(t, context.Background(), "", "", "consume", "-t", "solo", "-g", "g", "--shared",
			"--broker", b.Addr, "--count", count, "--timeout", "60s", "--concurrency", "4")
		// A closing member releases what it did not print, once: nothing
		// reaches maxDeliveries (client.TestPushConsumerNoPopAfterClose).
		if d := b.PopService().Counters().DeadLettered.Load(); d != 0 {
			t.Fatalf("--count %s: %d message(s) dead-lettered (exit %d %s)", count, d, code, errs)
		}
		if code != 0 {
			t.Fatalf("consume --shared: exit %d %s", code, errs)
		}
		lines = append(lines, strings.Fields(out)...)
	}
	sort.Strings(lines)
	if len(lines) != 20 || lines[0] != "s00" || lines[19] != "s19" {
		t.Fatalf("printed %v", lines)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] {
			t.Fatalf("%s printed twice", lines[i])
		}
	}
	out, _, code := runCLI(t, context.Background(), "", "", "consume", "-t", "solo", "-g", "g", "--shared",
		"--broker", b.Addr, "--count", "1", "--timeout", "1s")
	if code != ExitTimeout || strings.TrimSpace(out) != "" {
		t.Fatalf("third run: exit %d out %q", code, out)
	}
	if _, _, code := runCLI(t, context.Background(), "", "", "consume", "-t", "solo", "--shared", "--broker", b.Addr); code == 0 {
		t.Fatal("--shared without --group accepted")
	}
}
