package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// Online administration end to end against a real broker and ZooKeeper:
// create → produce → alter partitions → consumers rebalance → resend →
// groups delete → delete, and a server.ini reload.
func TestTopicAdminEndToEnd(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"other": 1}, false)
	b := c.brokers[0]
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: c.zk, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	parts := func(topic string) int {
		tp, err := zc.Partitions(ctx, topic, zkmeta.Subscribe)
		if err != nil {
			return -1
		}
		return len(tp.Partitions)
	}

	// The broker does not accept "flow" until it is created online.
	raw := b.Dial()
	raw.Send("put flow 0 1 0 1\r\nx")
	if r := raw.Reply(); r.Code != 500 {
		t.Fatalf("put before create: %+v", r)
	}
	if out, errs, code := c.run("topics", "create", "flow", "--partitions", "2", "--retention", "delete,72"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errs)
	}
	if _, _, code := c.run("topics", "create", "flow"); code != ExitRefused {
		t.Fatalf("second create: %d, want %d", code, ExitRefused)
	}
	zktest.Eventually(t, 20*time.Second, func() bool { return parts("flow") == 2 }, "flow registered with 2 partitions")

	p, err := client.NewProducer(client.Config{ZKConnect: c.zk, ZKRoot: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var first client.SendResult
	for i := 0; i < 6; i++ {
		r, err := p.Send(ctx, &client.Message{Topic: "flow", Body: []byte(fmt.Sprintf("m%d", i)), Keys: []string{"k" + fmt.Sprint(i)}})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i == 0 {
			first = r
		}
	}

	cons, err := client.NewConsumer(client.Config{ZKConnect: c.zk, ZKRoot: "/meta"}, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe("flow", "*", func(context.Context, *client.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			cons.Close()
		}
	}()
	zktest.Eventually(t, 30*time.Second, func() bool { return len(cons.Assigned()["flow"]) == 2 }, "consumer owns 2 partitions")

	if out, errs, code := c.run("topics", "alter", "flow", "--partitions", "4"); code != 0 {
		t.Fatalf("alter: %d %s %s", code, out, errs)
	}
	zktest.Eventually(t, 20*time.Second, func() bool { return parts("flow") == 4 }, "flow registered with 4 partitions")
	zktest.Eventually(t, 30*time.Second, func() bool { return len(cons.Assigned()["flow"]) == 4 }, "consumer rebalanced onto 4 partitions")
	raw.Send("put flow 3 1 0 2\r\ny")
	if r := raw.Reply(); r.Code != 200 {
		t.Fatalf("put to the new partition 3: %+v %s", r, r.Body)
	}

	// Resend one message by id.
	out, errs, code := c.run("messages", "resend", fmt.Sprint(first.MsgID), "--json")
	if code != 0 {
		t.Fatalf("resend: %d %s %s", code, out, errs)
	}
	var rs struct {
		NewMsgID int64 `json:"newMsgId"`
		Topic    string
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil || rs.NewMsgID == first.MsgID || rs.Topic != "flow" {
		t.Fatalf("resend: %v %s", err, out)
	}
	if out, _, code := c.run("query", "id", fmt.Sprint(rs.NewMsgID)); code != 0 || !strings.Contains(out, "m0") {
		t.Fatalf("query the resent message: %d %s", code, out)
	}

	// groups delete refuses a live group, then deletes it.
	if _, _, code := c.run("groups", "delete", "g1"); code != ExitRefused {
		t.Fatalf("groups delete with a live consumer: %d", code)
	}
	cons.Close()
	closed = true
	if out, errs, code := c.run("groups", "delete", "g1"); code != 0 {
		t.Fatalf("groups delete: %d %s %s", code, out, errs)
	}
	if ok, _ := zc.Exists(ctx, zc.Paths().Group("g1")); ok {
		t.Fatal("group g1 still in ZooKeeper")
	}

	if out, errs, code := c.run("topics", "delete", "flow"); code != 0 {
		t.Fatalf("delete: %d %s %s", code, out, errs)
	}
	zktest.Eventually(t, 20*time.Second, func() bool { return parts("flow") == 0 }, "flow unregistered")
	zktest.Eventually(t, 20*time.Second, func() bool {
		raw.Send("put flow 0 1 0 3\r\nz")
		return raw.Reply().Code == 500
	}, "puts to flow refused after delete")

	// Reload: a [topic=…] section added to server.ini is applied without a restart.
	ini, err := os.ReadFile(b.Config.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Config.Path, append(ini, "\n[topic=added]\nnumPartitions=3\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadTopics(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, func() bool { return parts("added") == 3 }, "added registered after reload")
	raw.Send("put added 2 1 0 4\r\nw")
	if r := raw.Reply(); r.Code != 200 {
		t.Fatalf("put to a reloaded topic: %+v %s", r, r.Body)
	}
}

// topics alter and delete check the topic name as create does (exit 2, before ZooKeeper is
// asked): an empty name made delete fail with ZooKeeper's "zk: invalid path" (exit 1), and a
// name with a slash was looked up below another node (exit 3, "no online configuration").
func TestTopicAdminRejectsBadNames(t *testing.T) {
	for _, cmd := range []string{"create", "alter", "delete"} {
		for _, name := range []string{"", "a/b", "..", "a b"} {
			args := []string{"topics", cmd, name}
			if cmd == "alter" {
				args = append(args, "--partitions", "2")
			}
			// Nothing listens on port 1: a command that asked ZooKeeper would exit 4.
			out, errs, code := runCLI(t, context.Background(), "127.0.0.1:1", "", args...)
			if code != ExitUsage || !strings.Contains(errs, "bad name") {
				t.Errorf("metaq topics %s %q: exit %d, want %d\n%s%s", cmd, name, code, ExitUsage, out, errs)
			}
		}
	}
}

// metaq broker reload signals only a metaq broker: --pid of another process (a mistyped pid, or
// one a broker on another machine reported through --server) exits 3 and leaves it alone. It
// sent SIGHUP to whatever process had the pid, which ends most of them.
func TestBrokerReloadRefusesOtherProcesses(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc: the process is not checked")
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	out, errs, code := runCLI(t, context.Background(), "", "", "broker", "reload", "--pid", strconv.Itoa(cmd.Process.Pid))
	if code != ExitNotFound || !strings.Contains(errs, "not a metaq broker") {
		t.Fatalf("broker reload --pid <sleep>: exit %d, want %d\n%s%s", code, ExitNotFound, out, errs)
	}
	select {
	case err := <-done:
		t.Fatalf("the process was signalled: %v", err)
	default:
	}
}

// metaq broker reload --pid of a process that does not exist (on this machine) exits 3 saying so.
func TestBrokerReloadNoSuchProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc: the process is not checked")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// The pid of a process that exited and was reaped (reused only after the pid space wraps).
	out, errs, code := runCLI(t, context.Background(), "", "", "broker", "reload", "--pid", strconv.Itoa(cmd.Process.Pid))
	if code != ExitNotFound || !strings.Contains(errs, "no process") {
		t.Fatalf("broker reload --pid <exited>: exit %d, want %d\n%s%s", code, ExitNotFound, out, errs)
	}
}
