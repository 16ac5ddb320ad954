package zktest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Ensemble is a private replicated ZooKeeper ensemble of N members on loopback, run through
// `ZK_ENSEMBLE=N scripts/zk.sh` (docs/zookeeper.md, "An ensemble"). Members are numbered 1..N.
type Ensemble struct {
	N      int
	Ports  []int  // client port of member i at Ports[i-1]
	Dir    string // ZK_DIR: member i lives in Dir/node<i>
	script string
	env    []string
}

// StartEnsemble starts an n-member ensemble (tickTime 500ms unless METAQ_TEST_ZK_TICK_MS says
// otherwise; data in a temporary directory) and stops it when the test ends. Like StartZooKeeper
// it skips the test when Debian's zookeeper package is not installed and EnvVar is unset.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	if n < 2 {
		t.Fatalf("zktest: StartEnsemble(%d): an ensemble has at least 2 members", n)
	}
	script := requireZooKeeper(t)
	e := &Ensemble{N: n, Dir: t.TempDir(), script: script}
	ports := freePorts(t, 3*n)
	e.Ports = ports[:n]
	tick := os.Getenv("METAQ_TEST_ZK_TICK_MS")
	if tick == "" {
		tick = "500"
	}
	e.env = append(os.Environ(),
		"ZK_ENSEMBLE="+strconv.Itoa(n), "ZK_PORT="+strconv.Itoa(e.Ports[0]), "ZK_DIR="+e.Dir,
		"ZK_PORTS="+joinPorts(ports[:n]), "ZK_QUORUM_PORTS="+joinPorts(ports[n:2*n]),
		"ZK_ELECTION_PORTS="+joinPorts(ports[2*n:]),
		"ZK_TICK_MS="+tick, "ZK_FORCE_SYNC=no", "ZK_PREALLOC_KB=4096", "ZK_HEAP_MB=96",
		"ZK_STOP_TIMEOUT=10", "ZK_START_TIMEOUT=60")
	if err := e.run(t, 0, "start"); err != nil {
		// Clean up whatever members did start before failing.
		_ = e.run(t, 0, "stop")
		t.Fatalf("zktest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.run(t, 0, "resume"); err != nil {
			t.Logf("zktest: %v", err)
		}
		if err := e.run(t, 0, "stop"); err != nil {
			t.Errorf("zktest: %v", err)
		}
	})
	return e
}

// Addr is the connect string of every member: "127.0.0.1:p1,127.0.0.1:p2,…".
func (e *Ensemble) Addr() string {
	var parts []string
	for i := 1; i <= e.N; i++ {
		parts = append(parts, e.MemberAddr(i))
	}
	return strings.Join(parts, ",")
}

// MemberAddr is member i's "127.0.0.1:<port>".
func (e *Ensemble) MemberAddr(i int) string { return "127.0.0.1:" + strconv.Itoa(e.Ports[i-1]) }

// Start starts member i again (no-op when it runs) and waits until it serves (it has joined the
// quorum). Start(t, 0) starts every member.
func (e *Ensemble) Start(t testing.TB, i int) { e.must(t, i, "start") }

// Stop stops member i gracefully and waits for it to exit (0: every member).
func (e *Ensemble) Stop(t testing.TB, i int) { e.must(t, i, "stop") }

// Kill SIGKILLs member i (0: every member).
func (e *Ensemble) Kill(t testing.TB, i int) { e.must(t, i, "kill") }

// Pause SIGSTOPs member i: its sockets stay open but it answers nothing, as a partitioned node.
func (e *Ensemble) Pause(t testing.TB, i int) { e.must(t, i, "pause") }

// Resume SIGCONTs a paused member.
func (e *Ensemble) Resume(t testing.TB, i int) { e.must(t, i, "resume") }

// Mode asks member i for its srvr "Mode:" ("leader", "follower"; "" when it does not serve).
func (e *Ensemble) Mode(i int) string {
	conn, err := net.DialTimeout("tcp", e.MemberAddr(i), time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return ""
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// Leader is the member that is the leader now (0 when none answers so).
func (e *Ensemble) Leader() int {
	for i := 1; i <= e.N; i++ {
		if e.Mode(i) == "leader" {
			return i
		}
	}
	return 0
}

func (e *Ensemble) must(t testing.TB, i int, cmd string) {
	t.Helper()
	if err := e.run(t, i, cmd); err != nil {
		t.Fatalf("zktest: %v", err)
	}
}

func (e *Ensemble) run(t testing.TB, i int, cmd string) error {
	start := time.Now()
	c := exec.Command("bash", e.script, cmd)
	c.Env = e.env
	if i > 0 {
		c.Env = append(append([]string(nil), e.env...), "ZK_NODE="+strconv.Itoa(i))
	}
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ZK_ENSEMBLE=%d ZK_NODE=%d scripts/zk.sh %s: %v\n%s", e.N, i, cmd, err, out)
	}
	t.Logf("zktest: %s (%s)", strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
	return nil
}

// requireZooKeeper returns scripts/zk.sh, skipping (EnvVar unset) or failing the test when
// Debian's zookeeper package is not installed.
func requireZooKeeper(t testing.TB) string {
	t.Helper()
	script, err := zkScript()
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		if os.Getenv(EnvVar) == "" {
			t.Skipf("zktest: Debian's zookeeper package is not installed (run scripts/zk.sh start once to install it)")
		}
		t.Fatalf("zktest: Debian's zookeeper package is not installed: %v", err)
	}
	return script
}

// freePorts returns n distinct free ports (see FreePort).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p := FreePort(t)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
