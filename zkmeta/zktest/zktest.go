// Package zktest gives tests a real ZooKeeper — no fakes.
//
//   - Server(t) returns a connect string with a fresh chroot (/metaq-test-<random>) on the
//     ZooKeeper named by $METAQ_TEST_ZK (e.g. "127.0.0.1:21810"), else on 127.0.0.1:2181. When
//     that server is unreachable the test is skipped, or fails if METAQ_TEST_ZK is set (CI). The
//     chroot and everything below it is deleted when the test ends.
//   - ExpireSession(t, client) expires a client's session for real: it attaches a second
//     connection to the same session (id + password) and closes the session through it, as the
//     Java client's tests do.
//   - StartZooKeeper(t) runs a private ZooKeeper through scripts/zk.sh on a free port (tickTime
//     500ms, data in a temporary directory) that a test may stop, wipe and start again.
//   - StartEnsemble(t, 3) runs a private replicated ensemble (ZK_ENSEMBLE=3 scripts/zk.sh) whose
//     members a test may stop, kill, pause (SIGSTOP) and start again.
package zktest

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// EnvVar names the environment variable that points tests at a ZooKeeper ("host:port[,…]").
const EnvVar = "METAQ_TEST_ZK"

// DefaultAddr is tried when EnvVar is unset.
const DefaultAddr = "127.0.0.1:2181"

// Addr returns the test ZooKeeper's address list ("host:port[,host:port…]", no chroot), after
// checking that it accepts connections: skips the test when it does not and EnvVar is unset,
// fails it when EnvVar is set.
func Addr(t testing.TB) string {
	t.Helper()
	env := strings.TrimSpace(os.Getenv(EnvVar))
	hosts := env
	if hosts == "" {
		hosts = DefaultAddr
	}
	if i := strings.IndexByte(hosts, '/'); i >= 0 {
		hosts = hosts[:i]
	}
	var lastErr error
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if !strings.Contains(h, ":") {
			h += ":2181"
		}
		conn, err := net.DialTimeout("tcp", h, 2*time.Second)
		if err == nil {
			conn.Close()
			return hosts
		}
		lastErr = err
	}
	if env == "" {
		t.Skipf("zktest: no ZooKeeper reachable at %s (%v) and %s is unset; start one with `scripts/zk.sh start` "+
			"(or `ZK_PORT=21810 ZK_TICK_MS=500 scripts/zk.sh start` and %s=127.0.0.1:21810)", DefaultAddr, lastErr, EnvVar, EnvVar)
	}
	t.Fatalf("zktest: %s=%s but no server answers (%v)", EnvVar, env, lastErr)
	return ""
}

// Server returns a connect string "host:port[,…]/metaq-test-<random>" whose chroot exists and is
// private to the test; it and everything below it is deleted when the test ends. When EnvVar
// itself carries a chroot, the test chroot is created below it.
func Server(t testing.TB) string {
	t.Helper()
	hosts := Addr(t)
	base := ""
	if env := os.Getenv(EnvVar); strings.Contains(env, "/") {
		base = "/" + strings.Trim(env[strings.IndexByte(env, '/'):], "/")
		if base == "/" {
			base = ""
		}
	}
	chroot := base + "/metaq-test-" + randHex(6)
	conn, closeConn := rawConn(t, hosts)
	if err := createPath(conn, chroot); err != nil {
		closeConn()
		t.Fatalf("zktest: create chroot %s: %v", chroot, err)
	}
	closeConn()
	t.Cleanup(func() {
		conn, closeConn := rawConn(t, hosts)
		defer closeConn()
		if err := DeleteTree(conn, chroot); err != nil {
			t.Logf("zktest: delete chroot %s: %v", chroot, err)
		}
	})
	return hosts + chroot
}

// rawConn opens a plain go-zookeeper connection and waits for its session. closeConn closes it
// and waits until go-zookeeper's goroutines ended.
func rawConn(t testing.TB, hosts string) (*zk.Conn, func()) {
	t.Helper()
	conn, events, err := zk.Connect(strings.Split(hosts, ","), 10*time.Second,
		zk.WithLogInfo(false), zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatalf("zktest: connect %s: %v", hosts, err)
	}
	done := make(chan struct{})
	connected := make(chan struct{})
	go func() {
		defer close(done)
		once := sync.Once{}
		for ev := range events {
			if ev.State == zk.StateHasSession {
				once.Do(func() { close(connected) })
			}
		}
	}()
	closeConn := func() {
		conn.Close()
		<-done
	}
	select {
	case <-connected:
	case <-time.After(15 * time.Second):
		closeConn()
		t.Fatalf("zktest: no ZooKeeper session with %s within 15s", hosts)
	}
	return conn, closeConn
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func createPath(conn *zk.Conn, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := conn.Create(cur, []byte{}, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// DeleteTree deletes p and everything below it (absolute path); a missing node is fine.
func DeleteTree(conn *zk.Conn, p string) error {
	for attempt := 0; ; attempt++ {
		kids, _, err := conn.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := DeleteTree(conn, p+"/"+k); err != nil {
				return err
			}
		}
		err = conn.Delete(p, -1)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !errors.Is(err, zk.ErrNotEmpty) || attempt > 20 {
			return err
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Session is what ExpireSession needs; *zkmeta.Client implements it.
type Session interface {
	SessionCredentials() (id int64, passwd []byte, server string)
}

// ExpireSession expires s's current session on the server, the classic way: it opens a second
// connection that presents the same session id and password and closes the session through it.
// ZooKeeper then deletes the session's ephemeral nodes and drops its connections; s's client
// learns on its next reconnection that the session expired. It returns the expired session id.
func ExpireSession(t testing.TB, s Session) int64 {
	t.Helper()
	id, passwd, server := s.SessionCredentials()
	if id == 0 || server == "" {
		t.Fatalf("zktest: ExpireSession: the client has no session yet")
	}
	var err error
	for range 5 {
		var gone bool
		if gone, err = closeSession(server, id, passwd); err == nil && gone {
			return id
		}
	}
	if err == nil {
		err = errors.New("the session is still alive")
	}
	t.Fatalf("zktest: ExpireSession 0x%x: %v", id, err)
	return 0
}

// closeSession attaches to the session and closes it. The server may drop the connection before
// its reply (it closes every connection of the session), so an EOF is checked by attaching
// once more: a closed session is answered with session id 0. gone reports a confirmed close.
func closeSession(server string, id int64, passwd []byte) (gone bool, err error) {
	alive, err := attachAndClose(server, id, passwd, true)
	if err == nil {
		return !alive, nil
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
		return false, err
	}
	time.Sleep(50 * time.Millisecond)
	alive, err = attachAndClose(server, id, passwd, false)
	return err == nil && !alive, err
}

// attachAndClose connects with the session's credentials; alive reports whether the server
// still knew the session. With closeIt it then closes the session.
func attachAndClose(server string, id int64, passwd []byte, closeIt bool) (alive bool, err error) {
	conn, err := net.DialTimeout("tcp", server, 5*time.Second)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return false, err
	}
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 30000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	req = append(req, 0)
	frames := frame(req)
	if closeIt {
		// closeSession (header xid 1, type -11) in the same write: the server handles it right
		// after the attach, before the session's own client can take the session back.
		closeReq := binary.BigEndian.AppendUint32(nil, 1)
		closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xfffffff5))
		frames = append(frames, frame(closeReq)...)
	}
	if _, err := conn.Write(frames); err != nil {
		return false, err
	}
	resp, err := readFrame(conn)
	if err != nil {
		return false, fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 {
		return false, fmt.Errorf("short connect response (%d bytes)", len(resp))
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:])); got != id {
		if got == 0 {
			return false, nil // expired or closed
		}
		return true, fmt.Errorf("server attached session 0x%x instead of 0x%x", got, id)
	}
	if !closeIt {
		return true, nil
	}
	reply, err := readFrame(conn)
	if err != nil {
		return true, fmt.Errorf("close reply: %w", err)
	}
	if len(reply) >= 16 {
		if code := int32(binary.BigEndian.Uint32(reply[12:])); code != 0 {
			return true, fmt.Errorf("close session: ZooKeeper error %d", code)
		}
	}
	return false, nil
}

func frame(b []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// Eventually polls cond every 20ms until it holds, failing the test after timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("zktest: after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ZooKeeper is a private server run through scripts/zk.sh.
type ZooKeeper struct {
	Port   int
	Dir    string // ZK_DIR: conf/, data/, logs/, zk.pid
	script string
	env    []string
}

// StartZooKeeper starts a private ZooKeeper on a free loopback port (tickTime 500ms, so sessions
// may be as short as 1s; data in a temporary directory) and stops it when the test ends. It skips
// the test when Debian's zookeeper package is not installed and EnvVar is unset.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	script := requireZooKeeper(t)
	z := &ZooKeeper{Port: FreePort(t), Dir: t.TempDir(), script: script}
	tick := os.Getenv("METAQ_TEST_ZK_TICK_MS")
	if tick == "" {
		tick = "500"
	}
	z.env = append(os.Environ(),
		"ZK_PORT="+strconv.Itoa(z.Port), "ZK_DIR="+z.Dir, "ZK_TICK_MS="+tick,
		"ZK_FORCE_SYNC=no", "ZK_PREALLOC_KB=4096", "ZK_HEAP_MB=128", "ZK_STOP_TIMEOUT=10")
	z.Start(t)
	t.Cleanup(func() {
		if err := z.run(t, "stop"); err != nil {
			t.Errorf("zktest: %v", err)
		}
	})
	return z
}

// Addr is "127.0.0.1:<port>".
func (z *ZooKeeper) Addr() string { return "127.0.0.1:" + strconv.Itoa(z.Port) }

// Start starts the server (no-op when running) and waits until it answers.
func (z *ZooKeeper) Start(t testing.TB) {
	t.Helper()
	if err := z.run(t, "start"); err != nil {
		t.Fatalf("zktest: %v", err)
	}
}

// Stop stops the server and waits for it to exit.
func (z *ZooKeeper) Stop(t testing.TB) {
	t.Helper()
	if err := z.run(t, "stop"); err != nil {
		t.Fatalf("zktest: %v", err)
	}
}

// Wipe deletes the server's data (stop it first): the next Start serves an empty tree and
// knows no session.
func (z *ZooKeeper) Wipe(t testing.TB) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(z.Dir, "data")); err != nil {
		t.Fatalf("zktest: %v", err)
	}
}

func (z *ZooKeeper) run(t testing.TB, cmd string) error {
	start := time.Now()
	c := exec.Command("bash", z.script, cmd)
	c.Env = z.env
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/zk.sh %s (port %d): %v\n%s", cmd, z.Port, err, out)
	}
	t.Logf("zktest: %s (%s)", strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
	return nil
}

// FreePort returns a loopback port that is free now, for a server that a
// test starts (and may restart) on a fixed port: ZooKeeper here, brokers
// restarted with an unchanged server.ini in tools/cli's process tests. It
// lies below the kernel's ephemeral port range: a port inside it can be
// taken at any moment as the local end of an outgoing connection (the
// tests make thousands), and then the server's bind fails.
func FreePort(t testing.TB) int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				lo = v
			}
		}
	}
	for i := 0; i < 200; i++ {
		p := 10000 + mrand.IntN(lo-10000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatalf("zktest: no free port below %d", lo)
	return 0
}

// zkScript locates scripts/zk.sh: next to this source file's module, else above the working
// directory.
func zkScript() (string, error) {
	var dirs []string
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Join(filepath.Dir(file), "..", ".."))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, "scripts", "zk.sh")
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("scripts/zk.sh not found")
}
