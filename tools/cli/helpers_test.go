package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// cluster is a ZooKeeper chroot with brokers registered in it.
type cluster struct {
	t       *testing.T
	zk      string // connect string with the test's chroot
	brokers []*brokertest.Broker
}

// newCluster starts n brokers (ids 0..n-1) registered in a private chroot of the test
// ZooKeeper, with topics (name → partitions per broker), and waits until every topic is visible.
func newCluster(t *testing.T, n int, topics map[string]int, sync bool) *cluster {
	t.Helper()
	c := &cluster{t: t, zk: zktest.Server(t)}
	for i := range n {
		c.brokers = append(c.brokers, brokertest.RunBroker(t, brokertest.Options{
			ZK: c.zk, BrokerID: i, Topics: topics, Sync: sync,
		}))
	}
	for topic, parts := range topics {
		if strings.Contains(topic, "*") {
			continue
		}
		want := n * parts
		zktest.Eventually(t, 20*time.Second, func() bool {
			out, _, code := c.run("topics", "describe", topic, "--json")
			if code != 0 {
				return false
			}
			var d topicDetail
			return json.Unmarshal([]byte(out), &d) == nil && len(d.Partitions) == want
		}, "topic %s not registered with %d partitions", topic, want)
	}
	return c
}

// run executes the CLI in-process against the cluster's ZooKeeper.
func (c *cluster) run(args ...string) (stdout, stderr string, code int) {
	return runCLI(c.t, context.Background(), c.zk, "", args...)
}

// runIn is run with stdin.
func (c *cluster) runIn(stdin string, args ...string) (string, string, int) {
	return runCLI(c.t, context.Background(), c.zk, stdin, args...)
}

// runCLI runs `metaq <args>` in-process with stdin and no environment but METAQ_ZK=zk (when
// not empty).
func runCLI(t testing.TB, ctx context.Context, zk, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb syncBuffer
	app := &App{
		Stdin:  strings.NewReader(stdin),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string {
			if k == EnvZK {
				return zk
			}
			return ""
		},
		Exit: func(code int) { t.Errorf("unexpected forced exit %d", code) },
	}
	if os.Getenv("METAQ_CLI_TEST_VERBOSE") != "" {
		args = append([]string{"--verbose"}, args...)
	}
	code := Run(ctx, app, args)
	if os.Getenv("METAQ_CLI_TEST_VERBOSE") != "" {
		t.Logf("metaq %s → %d\nstderr:\n%s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), errb.String(), code
}

// syncBuffer is a bytes.Buffer safe for concurrent use (a command running in a goroutine).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mustRun runs a command that must succeed.
func (c *cluster) mustRun(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("metaq %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// jsonLines decodes one JSON object per line.
func jsonLines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("bad JSON line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// metaqBinary builds tools/metaq once per test binary run.
func metaqBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "metaq-cli-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "metaq")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(goBin, "build", "-o", binPath, "github.com/metaqgo/metaq/tools/metaq")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building metaq: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
