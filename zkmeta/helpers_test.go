package zkmeta_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/zkmeta"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testSession = 3 * time.Second

// testLog sends log lines to t.Log while the test runs, and keeps them for assertions.
type testLog struct {
	t     testing.TB
	mu    sync.Mutex
	done  bool
	lines []string
}

func newTestLog(t testing.TB) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) Printf(format string, args ...any) {
	s := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if !l.done {
		l.t.Log(s)
	}
}

func (l *testLog) contains(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

type opt func(*zkmeta.Config)

func connect(t testing.TB, connectString string, opts ...opt) (*zkmeta.Client, *testLog) {
	t.Helper()
	lg := newTestLog(t)
	cfg := zkmeta.Config{ConnectString: connectString, SessionTimeout: testSession, ConnectionTimeout: 15 * time.Second, Logger: lg}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := zkmeta.Connect(ctxT(t, 20*time.Second), cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", connectString, err)
	}
	t.Cleanup(c.Close)
	return c, lg
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// node reads a node through the client's raw connection: data, and whether it is ephemeral and
// owned by session sid (sid 0: any owner).
type nodeInfo struct {
	exists    bool
	data      string
	ephemeral bool
	owner     int64
}

func getNode(t testing.TB, c *zkmeta.Client, p string) nodeInfo {
	t.Helper()
	d, st, err := c.Conn().Get(c.FullPath(p))
	if err == zk.ErrNoNode {
		return nodeInfo{}
	}
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	return nodeInfo{exists: true, data: string(d), ephemeral: st.EphemeralOwner != 0, owner: st.EphemeralOwner}
}

// wantEphemeral checks p exists with data, ephemeral and owned by c's session.
func wantEphemeral(t testing.TB, c *zkmeta.Client, p, data string) {
	t.Helper()
	n := getNode(t, c, p)
	switch {
	case !n.exists:
		t.Fatalf("%s missing", p)
	case n.data != data:
		t.Fatalf("%s = %q, want %q", p, n.data, data)
	case n.owner != c.SessionID():
		t.Fatalf("%s owned by session 0x%x, want ephemeral of 0x%x", p, n.owner, c.SessionID())
	}
}

func wantAbsent(t testing.TB, c *zkmeta.Client, p string) {
	t.Helper()
	if n := getNode(t, c, p); n.exists {
		t.Fatalf("%s exists (%q), want absent", p, n.data)
	}
}

// recv waits for a value on ch satisfying ok, failing after timeout.
func recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.After(timeout)
	var last T
	got := false
	for {
		select {
		case v, open := <-ch:
			if !open {
				t.Fatalf("%s: channel closed (last %+v)", what, last)
			}
			last, got = v, true
			if ok(v) {
				return v
			}
		case <-deadline:
			if got {
				t.Fatalf("%s: not seen within %s; last value %+v", what, timeout, last)
			}
			t.Fatalf("%s: nothing received within %s", what, timeout)
		}
	}
}

// freezableDialer lets a test cut a client off the server without closing its session, as if its
// process had been killed: existing connections are closed and new dials fail.
type freezableDialer struct {
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
}

func (d *freezableDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		return nil, fmt.Errorf("frozen")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *freezableDialer) freeze() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frozen = true
	for _, c := range d.conns {
		c.Close()
	}
}
