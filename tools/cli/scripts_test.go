package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
