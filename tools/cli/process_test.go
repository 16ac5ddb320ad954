package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// brokerProc is `metaq broker -c <ini>` running as a child process.
type brokerProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// writeINI writes a server.ini for a child broker and returns its path and address.
func writeINI(t *testing.T, dir string, sync bool, zk string, zkSyncMs int, extra string) (path, addr string) {
	t.Helper()
	port := zktest.FreePort(t)
	var b strings.Builder
	fmt.Fprintf(&b, "[system]\nbrokerId=1\nhostName=127.0.0.1\nbindHost=127.0.0.1\nserverPort=%d\ndashboardHttpPort=0\n", port)
	fmt.Fprintf(&b, "dataPath=%s\nmaxSegmentSize=1048576\nindexFileSize=65536\nmaxMessageSize=65536\n", filepath.Join(dir, "data"))
	if sync {
		b.WriteString("unflushThreshold=0\n")
	} else {
		b.WriteString("unflushThreshold=1000\nunflushInterval=1000\n")
	}
	b.WriteString(extra)
	if zk == "" {
		b.WriteString("[zookeeper]\nzk.zkEnable=false\n")
	} else {
		fmt.Fprintf(&b, "[zookeeper]\nzk.zkConnect=%s\nzk.zkSessionTimeoutMs=6000\nzk.zkSyncTimeMs=%d\n", zk, zkSyncMs)
	}
	b.WriteString("[topic=dur]\nnumPartitions=4\n[topic=*]\n")
	path = filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, "127.0.0.1:" + strconv.Itoa(port)
}

func startBrokerProc(t *testing.T, addr string, args ...string) *brokerProc {
	t.Helper()
	p := launchBrokerProc(t, addr, args...)
	p.waitReady(30 * time.Second)
	return p
}

// launchBrokerProc is startBrokerProc without waiting for the broker to serve.
func launchBrokerProc(t *testing.T, addr string, args ...string) *brokerProc {
	t.Helper()
	bin := metaqBinary(t)
	p := &brokerProc{t: t, addr: addr, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"broker"}, args...)...)
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("broker stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// waitReady waits until the broker answers `version`.
func (p *brokerProc) waitReady(d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		select {
		case <-p.done:
			p.t.Fatalf("broker exited during start-up: %v\n%s", p.err, p.stderr.String())
		default:
		}
		adm, err := client.NewAdmin(client.Config{DialTimeout: time.Second, RequestTimeout: 2 * time.Second, Logger: quietLog})
		if err == nil {
			_, err = adm.Version(context.Background(), p.addr)
			adm.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("broker on %s not ready after %s\n%s", p.addr, d, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var quietLog = slog.New(slog.DiscardHandler)

// directProducer sends to the broker at addr without ZooKeeper.
func directProducer(t *testing.T, addr string) *client.Producer {
	t.Helper()
	p, err := client.NewProducer(client.Config{Brokers: []string{addr}, DialTimeout: 5 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *brokerProc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the exit and returns its code.
func (p *brokerProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("broker still running %s after the signal\n%s", d, p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	zktest.Eventually(t, d, cond, "%s", what)
}

func TestBrokerProcessSIGTERMIsGraceful(t *testing.T) {
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, false, "", 0, "")
	p := startBrokerProc(t, addr, "-c", ini)
	abort := filepath.Join(dir, "data", "abort")
	if _, err := os.Stat(abort); err != nil {
		t.Fatalf("a running broker has no abort marker: %v", err)
	}
	_, errs, code := runCLI(t, context.Background(), "", "", "produce", "-t", "dur", "-m", "kept", "--partition", "3", "--broker", addr)
	if code != 0 {
		t.Fatalf("produce: %d %s", code, errs)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d, want 0\n%s", code, p.stderr.String())
	}
	if _, err := os.Stat(abort); !os.IsNotExist(err) {
		t.Fatalf("abort marker still there after a graceful stop: %v", err)
	}
	if s := p.stderr.String(); !strings.Contains(s, "SIGTERM") || !strings.Contains(s, "broker stopped") {
		t.Fatalf("stop not logged:\n%s", s)
	}

	// -f (MetaQ's flag) and JSON logs; the message is still there; SIGINT stops it too.
	p = startBrokerProc(t, addr, "-f", ini, "--log-format", "json")
	out, errs, code := runCLI(t, context.Background(), "", "", "consume", "-t", "dur", "--broker", addr, "-p", "3", "--from", "earliest", "--count", "1", "--timeout", "10s")
	if code != 0 || strings.TrimSpace(out) != "kept" {
		t.Fatalf("after restart: exit %d %q %s", code, out, errs)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), `"msg":"broker stopped"`) {
		t.Fatalf("--log-format json:\n%s", p.stderr.String())
	}

	// A bad configuration is a usage error (2).
	bad := filepath.Join(dir, "bad.ini")
	if err := os.WriteFile(bad, []byte("[system]\nbrokerId=1\nserverPrt=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(metaqBinary(t), "broker", "-c", bad)
	outb, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitUsage || !strings.Contains(string(outb), "serverPort") {
		t.Fatalf("bad config: %v\n%s", err, outb)
	}
}

func TestBrokerProcessSecondSignalForcesExit(t *testing.T) {
	zk := zktest.Server(t)
	dir := t.TempDir()
	// zkSyncTimeMs=30s: a graceful stop waits that long after unregistering, so the second
	// signal surely arrives during the stop.
	ini, addr := writeINI(t, dir, false, zk, 30000, "")
	p := startBrokerProc(t, addr, "-c", ini)
	p.signal(syscall.SIGTERM)
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(p.stderr.String(), "waiting before closing") }, "the stop did not begin")
	p.signal(syscall.SIGTERM)
	// The graceful stop would take 30 s (zkSyncTimeMs): exiting within the 10 s wait, with
	// ExitFailure, is the forced exit.
	code := p.wait(10 * time.Second)
	if code != ExitFailure {
		t.Fatalf("second signal: exit %d, want %d\n%s", code, ExitFailure, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "forcing exit") {
		t.Fatalf("forced exit not logged:\n%s", p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "abort")); err != nil {
		t.Fatalf("a forced exit must leave the abort marker (crash recovery on the next start): %v", err)
	}
	// The next start recovers and serves.
	p = startBrokerProc(t, addr, "-c", ini)
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

type acked struct {
	partition int
	offset    int64
	body      string
}

// TestKill9Durability: every acknowledged put survives kill -9 of the broker at a random
// moment, readable at its acknowledged offset after the restart — with sync flush (durable on
// disk) and with async flush (acknowledged once in the page cache, which a process crash does
// not lose).
func TestKill9Durability(t *testing.T) {
	t.Run("sync", func(t *testing.T) { kill9Durability(t, true) })
	t.Run("async", func(t *testing.T) { kill9Durability(t, false) })
}

func kill9Durability(t *testing.T, syncFlush bool) {
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, syncFlush, "", 0, "")
	var all []acked
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	seq := 0
	for round := range rounds {
		p := startBrokerProc(t, addr, "-c", ini)
		prod := directProducer(t, addr)
		var mu sync.Mutex
		var got []acked
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 { // four producers, pipelined puts on one connection
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					seq++
					body := fmt.Sprintf("r%d-w%d-%d-%s", round, w, seq, strings.Repeat("x", rand.IntN(300)))
					mu.Unlock()
					part := (w + i) % 4
					pr, err := prod.SendToPartition(context.Background(), &client.Message{Topic: "dur", Body: []byte(body)}, client.Partition{BrokerID: -1, Partition: part})
					if err != nil {
						return // the broker died: this put was not acknowledged
					}
					if pr.Partition.Partition != part {
						t.Errorf("put to %d landed in %s", part, pr.Partition)
					}
					mu.Lock()
					got = append(got, acked{partition: pr.Partition.Partition, offset: pr.Offset, body: body})
					mu.Unlock()
				}
			}()
		}
		// Kill it mid-stream: once puts are flowing, at a random moment.
		waitFor(t, 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= 50
		}, "no puts acknowledged")
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		p.signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
		close(stop)
		wg.Wait()
		prod.Close()
		mu.Lock()
		if len(got) == 0 {
			t.Fatalf("round %d: nothing was acknowledged before the kill", round)
		}
		t.Logf("round %d: %d puts acknowledged before kill -9", round, len(got))
		all = append(all, got...)
		mu.Unlock()
	}

	p := startBrokerProc(t, addr, "-c", ini)
	adm, err := client.NewAdmin(client.Config{DialTimeout: 5 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[[2]int64]bool{}
	for _, a := range all {
		k := [2]int64{int64(a.partition), a.offset}
		if seen[k] {
			t.Fatalf("two acknowledged puts share partition %d offset %d", a.partition, a.offset)
		}
		seen[k] = true
		res, err := adm.FetchWith(ctx, addr, client.FetchRequest{Topic: "dur", Group: "check", Partition: a.partition, Offset: a.offset, MaxBytes: 1024})
		if err != nil {
			t.Fatalf("get %d@%d: %v", a.partition, a.offset, err)
		}
		if len(res.Messages) == 0 {
			t.Fatalf("acknowledged message %d@%d (%.20s…) lost after kill -9: %+v", a.partition, a.offset, a.body, res)
		}
		m := res.Messages[0]
		if m.Offset != a.offset || string(m.Body) != a.body {
			t.Fatalf("at %d@%d: got offset %d body %.20q, want %.20q", a.partition, a.offset, m.Offset, m.Body, a.body)
		}
	}
	// Appends continue after recovery.
	prod := directProducer(t, addr)
	defer prod.Close()
	if _, err := prod.SendToPartition(ctx, &client.Message{Topic: "dur", Body: []byte("after")}, client.Partition{BrokerID: -1, Partition: 0}); err != nil {
		t.Fatalf("put after recovery: %v", err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	t.Logf("%d acknowledged messages verified after %d kill -9", len(all), rounds)
}

func TestBrokerLocalZooKeeper(t *testing.T) {
	if _, err := os.Stat(zkJar); err != nil {
		if os.Getenv(zktest.EnvVar) == "" {
			t.Skip("Debian's zookeeper package is not installed (scripts/zk.sh start installs it)")
		}
		t.Fatalf("zookeeper is not installed: %v", err)
	}
	dir := t.TempDir()
	zkPort := zktest.FreePort(t)
	zk := "127.0.0.1:" + strconv.Itoa(zkPort)
	ini, addr := writeINI(t, dir, false, zk, 100, "")
	zkDir := filepath.Join(dir, "zk")
	p := startBrokerProc(t, addr, "-c", ini, "--local-zk", "--local-zk-dir", zkDir)

	brokerUp := func() bool {
		out, _, code := runCLI(t, context.Background(), zk, "", "brokers", "--json", "--connect-timeout", "2s")
		return code == 0 && strings.Contains(out, addr) && strings.Contains(out, `"up": true`)
	}
	waitFor(t, 30*time.Second, brokerUp, "the broker did not register in the local ZooKeeper")
	if _, err := os.Stat(filepath.Join(zkDir, "zoo.cfg")); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
	if zkRuok(zk, 500*time.Millisecond) || portOpen(zk) {
		t.Fatal("the local ZooKeeper still runs after the broker stopped")
	}
	if !strings.Contains(p.stderr.String(), "local ZooKeeper stopped") {
		t.Fatalf("log:\n%s", p.stderr.String())
	}

	// A broker killed with SIGKILL takes its ZooKeeper with it (Pdeathsig).
	p = startBrokerProc(t, addr, "-c", ini, "-l", "--local-zk-dir", zkDir)
	waitFor(t, 30*time.Second, brokerUp, "the broker did not register after a restart")
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	waitFor(t, 15*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", zk, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the local ZooKeeper survived the broker's kill -9")

	// --local-zk refuses a port that is already in use.
	l, err := net.Listen("tcp", zk)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out, err := exec.Command(metaqBinary(t), "broker", "-c", ini, "--local-zk", "--local-zk-dir", zkDir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitFailure || !strings.Contains(string(out), "already in use") {
		t.Fatalf("--local-zk on a busy port: %v\n%s", err, out)
	}
}

// Ctrl-C ends produce even while it waits for a line on stdin (exit 130), and ends a consume
// without --count normally (exit 0).
func TestCLIProcessInterrupt(t *testing.T) {
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, false, "", 0, "")
	startBrokerProc(t, addr, "-c", ini)
	bin := metaqBinary(t)

	prod := exec.Command(bin, "produce", "--broker", addr, "-t", "dur", "-p", "1")
	stdin, err := prod.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	prod.Stdout, prod.Stderr = out, out
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if _, err := stdin.Write([]byte("line one\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(out.String(), " 0-1 0") || strings.Contains(out.String(), "-1 0\n")
	}, "the first line was not sent")
	if err := prod.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, prod, 10*time.Second)
	if code != ExitInterrupted {
		t.Fatalf("produce interrupted while reading stdin: exit %d, want %d\n%s", code, ExitInterrupted, out.String())
	}

	cons := exec.Command(bin, "consume", "--broker", addr, "-t", "dur", "--from", "earliest")
	cout := &syncBuffer{}
	cons.Stdout, cons.Stderr = cout, cout
	if err := cons.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(cout.String(), "line one") }, "consume printed nothing")
	if err := cons.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cons, 10*time.Second); code != 0 {
		t.Fatalf("consume without --count interrupted: exit %d, want 0\n%s", code, cout.String())
	}
}

func exitCode(t *testing.T, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		_ = cmd.Process.Kill()
		t.Fatalf("%s still running %s after the signal", cmd.Args[1], d)
		return -1
	}
}
