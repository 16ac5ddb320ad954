package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// scripts/broker.sh start on a running broker: a no-op while the broker runs the current
// bin/metaq; once bin/metaq was rebuilt with changes it says so, and with BROKER_RESTART_STALE=1
// (what scripts/quickstart.sh sets) restarts the broker on the new binary.
func TestBrokerScriptRestartsStaleBinary(t *testing.T) {
	script, err := filepath.Abs("../../scripts/broker.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "metaq")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(metaqBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	install := func(b []byte) { // as build_metaq does: a new file moved over the old one
		t.Helper()
		if err := os.WriteFile(bin+".tmp", b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			t.Fatal(err)
		}
	}
	install(orig)
	ini, _ := writeINI(t, dir, false, "", 0, "")
	runDir := filepath.Join(dir, "run")
	run := func(env ...string) string {
		t.Helper()
		cmd := exec.Command("bash", script, "start", ini)
		cmd.Env = append(os.Environ(), append([]string{"RUN_DIR=" + runDir, "METAQ_BIN=" + bin, "BROKER_STOP_TIMEOUT=30"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("broker.sh start %v: %v\n%s", env, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		cmd := exec.Command("bash", script, "stop", ini)
		cmd.Env = append(os.Environ(), "RUN_DIR="+runDir, "METAQ_BIN="+bin, "BROKER_STOP_TIMEOUT=30")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("broker.sh stop: %v\n%s", err, out)
		}
	})
	pid := func() int {
		t.Helper()
		return brokerScriptPid(t, runDir)
	}

	run()
	first := pid()
	if out := run("BROKER_RESTART_STALE=1"); !strings.Contains(out, "already running") || pid() != first {
		t.Fatalf("second start with the same binary: pid %d → %d\n%s", first, pid(), out)
	}

	// A rebuilt binary (different bytes; trailing bytes do not change what an ELF file runs).
	install(append(append([]byte(nil), orig...), "rebuilt"...))
	if out := run(); !strings.Contains(out, "older") || !strings.Contains(out, "restart") || pid() != first {
		t.Fatalf("start after a rebuild, without BROKER_RESTART_STALE: pid %d → %d, want a warning and the same broker\n%s", first, pid(), out)
	}
	out := run("BROKER_RESTART_STALE=1")
	second := pid()
	if second == first || !strings.Contains(out, "restarting") || !strings.Contains(out, "broker started") {
		t.Fatalf("start after a rebuild with BROKER_RESTART_STALE=1: pid %d → %d, want a restart\n%s", first, second, out)
	}
	if out := run(); !strings.Contains(out, "already running") || pid() != second {
		t.Fatalf("start after the restart: pid %d → %d\n%s", second, pid(), out)
	}
}

// brokerScriptPid is the pid scripts/broker.sh recorded in runDir (RUN_DIR) for its one broker.
func brokerScriptPid(t *testing.T, runDir string) int {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(runDir, "broker-*.pid"))
	if len(matches) != 1 {
		t.Fatalf("pid files %v", matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// scripts/broker.sh stop on a broker stopped with SIGSTOP (a paused process, as zk.sh pause makes
// ZooKeeper) stops it gracefully: the SIGTERM is followed by SIGCONT, so the broker handles it
// and removes its abort marker, rather than waiting out BROKER_STOP_TIMEOUT and being SIGKILLed
// (the next start then ran crash recovery).
func TestBrokerScriptStopsAPausedBroker(t *testing.T) {
	script, err := filepath.Abs("../../scripts/broker.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ini, _ := writeINI(t, dir, false, "", 0, "")
	env := append(os.Environ(), "RUN_DIR="+filepath.Join(dir, "run"), "METAQ_BIN="+metaqBinary(t), "BROKER_STOP_TIMEOUT=20")
	sh := func(cmd string) (string, error) {
		c := exec.Command("bash", script, cmd, ini)
		c.Env = env
		out, err := c.CombinedOutput()
		return string(out), err
	}
	if out, err := sh("start"); err != nil {
		t.Fatalf("broker.sh start: %v\n%s", err, out)
	}
	pid := brokerScriptPid(t, filepath.Join(dir, "run"))
	t.Cleanup(func() { // a failure on the way leaves no broker behind (broker.sh checks its pid file)
		if t.Failed() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_, _ = sh("stop")
		}
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	out, err := sh("stop")
	if err != nil || strings.Contains(out, "SIGKILL") || !strings.Contains(out, "stopped") {
		t.Fatalf("broker.sh stop of a paused broker: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "abort")); !os.IsNotExist(err) {
		t.Fatalf("abort marker after broker.sh stop: %v (not a graceful stop)", err)
	}
}

// scripts/cluster.sh down, run without the ZK_PORT that "up" was given, stops the ZooKeeper that
// up started: the port up used is recorded with the cluster. down looked for it on 2181 ("not
// running"), dropped its note that up had started ZooKeeper, and left it running for good.
func TestClusterScriptDownStopsItsZooKeeper(t *testing.T) {
	script, err := filepath.Abs("../../scripts/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	zkScript := filepath.Join(filepath.Dir(script), "zk.sh")
	dir := t.TempDir()
	zkPort, base := strconv.Itoa(zktest.FreePort(t)), strconv.Itoa(zktest.FreePort(t))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZK_") && !strings.HasPrefix(kv, "BASE_PORT=") && !strings.HasPrefix(kv, "CLUSTER_DIR=") {
			env = append(env, kv)
		}
	}
	// ZooKeeper's directory is the default, run/zk-<port> in the project, as for an operator: with
	// an explicit ZK_DIR, zk.sh finds the server by its pid file whatever the port.
	env = append(env, "CLUSTER_DIR="+filepath.Join(dir, "cluster"), "METAQ_BIN="+metaqBinary(t))
	run := func(script string, extra []string, args ...string) (string, int) {
		t.Helper()
		c := exec.Command("bash", append([]string{script}, args...)...)
		c.Env = append(append([]string(nil), env...), extra...)
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return string(out), c.ProcessState.ExitCode()
	}
	withPorts := []string{"ZK_PORT=" + zkPort, "BASE_PORT=" + base}
	t.Cleanup(func() {
		run(script, withPorts, "down")
		run(zkScript, withPorts, "stop")
		os.RemoveAll(filepath.Join(filepath.Dir(filepath.Dir(script)), "run", "zk-"+zkPort))
	})
	if out, code := run(script, withPorts, "up", "1"); code != 0 {
		t.Fatalf("cluster.sh up 1: exit %d\n%s", code, out)
	}
	if out, code := run(script, nil, "down"); code != 0 {
		t.Fatalf("cluster.sh down: exit %d\n%s", code, out)
	}
	if out, code := run(zkScript, []string{"ZK_PORT=" + zkPort}, "status"); code != 3 {
		t.Fatalf("ZooKeeper on %s after cluster.sh down: zk.sh status exit %d, want 3 (not running)\n%s", zkPort, code, out)
	}
}
