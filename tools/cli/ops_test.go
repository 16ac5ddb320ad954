package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// When every ZooKeeper server of the connect string refuses the connection, every command that
// needs ZooKeeper exits 4 at once, saying so, instead of waiting --connect-timeout (an hour
// here: a command that waited would be cut by the test's context and exit 130).
func TestZooKeeperRefusedFailsFast(t *testing.T) {
	zk := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/chroot", zktest.FreePort(t), zktest.FreePort(t), zktest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"brokers"},
		{"topics", "list"},
		{"topics", "describe", "t"},
		{"groups", "list"},
		{"groups", "describe", "g"},
		{"offsets", "reset", "-g", "g", "-t", "t", "--to", "earliest"},
		{"produce", "-t", "t", "-m", "x"},
		{"consume", "-t", "t", "--count", "1"},
		{"consume", "-t", "t", "-g", "g", "--count", "1"},
		{"query", "key", "t", "k"},
		{"query", "id", "281474976710656"},
		{"stats", "0"},
		{"bench", "produce", "--duration", "1s"},
	} {
		args = append(args, "--connect-timeout", "1h")
		_, errs, code := runCLI(t, ctx, zk, "", args...)
		if code != ExitUnavailable || !strings.Contains(errs, "refused") {
			t.Errorf("metaq %s with nothing listening: exit %d, want %d and a message saying the servers refused\nstderr: %s",
				strings.Join(args, " "), code, ExitUnavailable, errs)
		}
	}
}

// offsets reset: a group that does not exist is not found (exit 3, and it is not created)
// unless --create; the refusal while consumers run names each consumer once; produce with an
// empty input exits 1.
func TestOffsetsResetAndProduceEdgeCases(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"edge": 2}, false)
	c.mustRun("produce", "-t", "edge", "-m", "a", "-m", "b", "--quiet")

	for _, args := range [][]string{
		{"offsets", "reset", "-g", "nogroup", "-t", "edge", "--to", "earliest"},
		{"offsets", "reset", "-g", "nogroup", "-t", "edge", "--to", "latest", "--dry-run"},
	} {
		_, errs, code := c.run(args...)
		if code != ExitNotFound || !strings.Contains(errs, "nogroup not found") || !strings.Contains(errs, "--create") {
			t.Errorf("metaq %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), code, ExitNotFound, errs)
		}
	}
	if _, errs, code := c.run("groups", "describe", "nogroup"); code != ExitNotFound {
		t.Fatalf("groups describe nogroup after a refused reset: exit %d (%s); the group was created", code, errs)
	}
	out := c.mustRun("offsets", "reset", "-g", "nogroup", "-t", "edge", "--to", "latest", "--create", "--json")
	var res struct {
		Changes []offsetChange `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Changes) != 2 {
		t.Fatalf("offsets reset --create: %v\n%s", err, out)
	}
	var d groupDetail
	if err := json.Unmarshal([]byte(c.mustRun("groups", "describe", "nogroup", "--json")), &d); err != nil || len(d.Partitions) != 2 {
		t.Fatalf("groups describe after reset --create: %v %+v", err, d)
	}

	// A live consumer owning both partitions: listed once, with what it owns.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, ctx, c.zk, "", "consume", "-t", "edge", "-g", "live")
		done <- code
	}()
	var node string
	zktest.Eventually(t, 20*time.Second, func() bool {
		out, _, code := c.run("groups", "describe", "live", "--json")
		var d groupDetail
		if code != 0 || json.Unmarshal([]byte(out), &d) != nil || len(d.Consumers) != 1 || len(d.Partitions) != 2 {
			return false
		}
		node = d.Consumers[0].Node
		return d.Partitions[0].Owner != "" && d.Partitions[1].Owner != ""
	}, "the live consumer did not register and own both partitions")
	_, errs, code := c.run("offsets", "reset", "-g", "live", "-t", "edge", "--to", "earliest")
	if code != ExitRefused || strings.Count(errs, node) != 1 || !strings.Contains(errs, node+" (owner of 0-0, 0-1)") {
		t.Errorf("reset with a live consumer: exit %d, want %d and %s named once with its partitions\nstderr: %s", code, ExitRefused, node, errs)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("interrupted group consumer: exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the consumer did not stop")
	}

	// Nothing to send: exit 1, whether stdin or a file is empty.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"produce", "-t", "edge"}, {"produce", "-t", "edge", "--file", empty, "--quiet"}} {
		_, errs, code := c.runIn("", args...)
		if code != ExitFailure || !strings.Contains(errs, "nothing sent") {
			t.Errorf("metaq %s with an empty input: exit %d, want %d\nstderr: %s", strings.Join(args, " "), code, ExitFailure, errs)
		}
	}
}

// Shell completion suggests the cluster's topic and group names and broker ids, read from
// ZooKeeper (through cobra's hidden __complete command, as the shell scripts call it).
func TestCompletionFromZooKeeper(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"orders": 1, "logs": 1}, false)
	c.mustRun("offsets", "reset", "-g", "billing", "-t", "orders", "--to", "earliest", "--create")
	complete := func(args ...string) []string {
		t.Helper()
		out := c.mustRun(append([]string{"__complete"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) == 0 || lines[len(lines)-1] != ":4" { // ShellCompDirectiveNoFileComp
			t.Fatalf("__complete %s: %q", strings.Join(args, " "), out)
		}
		return lines[:len(lines)-1]
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "describe", ""}, "logs,orders"},
		{[]string{"topics", "describe", "or"}, "orders"},
		{[]string{"topics", "describe", "orders", ""}, ""},
		{[]string{"produce", "--topic", ""}, "logs,orders"},
		{[]string{"consume", "-t", "l"}, "logs"},
		{[]string{"query", "key", ""}, "logs,orders"},
		{[]string{"groups", "describe", ""}, "billing"},
		{[]string{"consume", "-t", "orders", "--group", ""}, "billing"},
		{[]string{"offsets", "reset", "-g", "b"}, "billing"},
		{[]string{"stats", ""}, "0\t" + c.brokers[0].Addr},
	} {
		if got := strings.Join(complete(tc.args...), ","); got != tc.want {
			t.Errorf("__complete %s = %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	// ZooKeeper away: nothing suggested, no error, no wait for --connect-timeout.
	out, errs, code := runCLI(t, context.Background(), fmt.Sprintf("127.0.0.1:%d", zktest.FreePort(t)), "", "__complete", "topics", "describe", "")
	if code != 0 || strings.TrimSpace(out) != ":4" {
		t.Errorf("__complete without ZooKeeper: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
