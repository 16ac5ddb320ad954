package broker_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

const txHelperEnv = "METAQ_TX_HELPER_INI"

// TestTxBrokerHelper is the child process of the kill -9 tests: a real
// broker started from the server.ini named by the environment, which prints
// its address and serves until it is killed.
func TestTxBrokerHelper(t *testing.T) {
	path := os.Getenv(txHelperEnv)
	if path == "" {
		t.Skip("helper process of the transaction kill -9 tests")
	}
	cfg, err := conf.Load(path)
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(2)
	}
	b, err := broker.Start(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(2)
	}
	os.Stdout.WriteString("addr " + b.Server.Addr().String() + "\n")
	time.Sleep(10 * time.Minute) // killed long before
	os.Exit(3)
}

// brokerChild is a broker running in a child process.
type brokerChild struct {
	cmd  *exec.Cmd
	addr string
	log  *os.File
}

// startChild starts a broker process on dir (server.ini written once by the
// caller) and waits for its address.
func startChild(t *testing.T, ini string) *brokerChild {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(ini), "broker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTxBrokerHelper$")
	cmd.Env = append(os.Environ(), txHelperEnv+"="+ini)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &brokerChild{cmd: cmd, log: logf}
	t.Cleanup(func() { c.kill(); logf.Close() })
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "addr ") {
			t.Fatalf("broker child: %q (log %s)", line, logf.Name())
		}
		c.addr = strings.TrimPrefix(line, "addr ")
	case <-time.After(60 * time.Second):
		t.Fatal("broker child did not start")
	}
	return c
}

// kill sends SIGKILL and reaps the process (idempotent).
func (c *brokerChild) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

// A prepared XA transaction survives kill -9 of a real broker process:
// RECOVER lists it after the restart, COMMIT_TWO_PHASE makes every message
// visible exactly once, and a second kill -9 after the commit changes
// nothing. A second transaction prepared and killed is rolled back after the
// restart and leaves no trace.
func TestTxXAKill9(t *testing.T) {
	for _, sync := range []bool{true, false} {
		name := "async"
		if sync {
			name = "sync"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ini := filepath.Join(dir, "server.ini")
			if err := os.WriteFile(ini, []byte(brokertest.INI(brokertest.Options{Dir: dir, Sync: sync})), 0o644); err != nil {
				t.Fatal(err)
			}
			const uq = "XAMessageProducer-host1"
			const x1, x2 = "XID:1:0a0b:01:" + uq, "XID:1:0a0b:02:" + uq
			b := startChild(t, ini)
			c := newTxc(t, b.addr)
			for _, x := range []string{x1, x2} {
				c.txOK(x, "s", "BEGIN", uq)
				c.txPut("test", 0, x, x[len(x)-len(uq)-2:len(x)-len(uq)-1]+"-a")
				c.txPut("test", 1, x, x[len(x)-len(uq)-2:len(x)-len(uq)-1]+"-b")
				if vote := c.txOK(x, "s", "PREPARE", uq); vote != "0" {
					t.Fatalf("vote %q", vote)
				}
			}
			// Also an open local transaction: rolled back by the crash.
			c.txOK("TX:s:1", "s", "BEGIN")
			c.txPut("test", 0, "TX:s:1", "local")
			b.kill()

			b = startChild(t, ini)
			c = newTxc(t, b.addr)
			if got := c.txOK("null", "s", "RECOVER", uq); got != x1+"\r\n"+x2 {
				t.Fatalf("RECOVER after kill -9: %q", got)
			}
			wantRecords(t, c.records("test", 0))
			c.txOK(x1, "s", "COMMIT_TWO_PHASE", uq)
			c.txOK(x2, "s", "ROLLBACK", uq)
			wantRecords(t, c.records("test", 0), "1-a")
			wantRecords(t, c.records("test", 1), "1-b")
			b.kill()

			b = startChild(t, ini)
			c = newTxc(t, b.addr)
			if got := c.txOK("null", "s", "RECOVER"); got != "" {
				t.Fatalf("RECOVER after the commit and a second kill -9: %q", got)
			}
			wantRecords(t, c.records("test", 0), "1-a")
			wantRecords(t, c.records("test", 1), "1-b")
		})
	}
}

// flushTxLogAtCommit=0: a txend is answered before its group commit, so a
// kill -9 right after the answers may lose outcomes the producer was told
// about. None is lost for good and none is applied twice: a lost one leaves
// its half message (durable before its put was answered) pending after the
// restart, the broker checks it back, the producer answers commit, and
// every message is visible exactly once; afterwards nothing is pending.
func TestTxEndNoFlushKill9(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "server.ini")
	opts := brokertest.Options{Dir: dir, Sync: true,
		ExtraINI: "flushTxLogAtCommit=0\ntransactionCheckInterval=200\ntransactionCheckMax=1000\n"}
	if err := os.WriteFile(ini, []byte(brokertest.INI(opts)), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 200
	b := startChild(t, ini)
	c := newTxc(t, b.addr)
	ids := make([]int64, n)
	want := make([]string, n)
	for i := range ids {
		want[i] = fmt.Sprintf("m%03d", i)
		ids[i] = c.halfPut("test", 0, "orders", want[i])
	}
	var w strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&w, "txend %d commit %d\r\n", id, 10000+i)
	}
	c.Send(w.String())
	for range ids {
		if r := c.Reply(); r.Code != 200 {
			t.Fatalf("txend: %d %q", r.Code, r.Body)
		}
	}
	b.kill() // right after the answers: some outcomes may not be durable

	b = startChild(t, ini)
	p := newTxc(t, b.addr)
	_ = p.Conn.SetReadDeadline(time.Time{})
	p.Send("producer orders 1\r\n")
	var answered atomic.Int64
	producerDone := make(chan struct{})
	go func() { // the producer: every check is an outcome the crash lost; it says commit again
		defer close(producerDone)
		for {
			r, err := p.R.Next()
			if err != nil {
				return
			}
			if r.Kind == protocol.ReplyCheck {
				fmt.Fprintf(p.W, "txend %s commit 2\r\n", r.Body)
				if p.W.Flush() != nil {
					return
				}
				answered.Add(1)
			}
		}
	}()
	reader := newTxc(t, b.addr)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := reader.records("test", 0)
		if len(got) > n {
			t.Fatalf("%d records, want %d once each", len(got), n)
		}
		if len(got) == n {
			sort.Strings(got)
			wantRecords(t, got, want...)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records visible after the restart", len(got), n)
		}
	}
	p.Conn.Close()
	<-producerDone
	t.Logf("%d checks answered after the restart", answered.Load())
	// Nothing is pending any more: no later check can commit one twice.
	for i, id := range ids {
		reader.Send(fmt.Sprintf("txend %d commit %d\r\n", id, 20000+i))
	}
	for i := range ids {
		if r := reader.Reply(); r.Code != 404 || r.Opaque != int32(20000+i) {
			t.Fatalf("txend of %d after recovery: %d %q, want 404 (not pending)", ids[i], r.Code, r.Body)
		}
	}
}
