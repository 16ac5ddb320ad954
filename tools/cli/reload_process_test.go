package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A real `metaq broker` process: `metaq broker reload --server` (SIGHUP)
// applies a changed [topic=…] section without a restart, and the HTTP side
// serves /metrics on dashboardHttpPort.
func TestBrokerReloadProcess(t *testing.T) {
	dir := t.TempDir()
	httpPort := zktest.FreePort(t)
	path, addr := writeINI(t, dir, false, "", 0, "")
	ini, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// writeINI turns the HTTP side off; give it a port, and a topic of 2 partitions.
	text := strings.Replace(string(ini), "dashboardHttpPort=0\n", fmt.Sprintf("dashboardHttpPort=%d\n", httpPort), 1)
	text = strings.Replace(text, "[topic=*]\n", "", 1) + "[topic=grow]\nnumPartitions=2\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBrokerProc(t, addr, "-c", path)
	c := brokertest.Dial(t, addr)
	c.Send("put grow 3 1 0 1\r\nx")
	if r := c.Reply(); r.Code != 500 {
		t.Fatalf("put to partition 3 of a 2-partition topic: %+v", r)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(text, "numPartitions=2\n", "numPartitions=4\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := runCLI(t, context.Background(), "", "", "broker", "reload", "--server", addr); code != 0 {
		t.Fatalf("broker reload: %d %s %s", code, out, errs)
	}
	zktest.Eventually(t, 20*time.Second, func() bool {
		c.Send("put grow 3 1 0 2\r\ny")
		return c.Reply().Code == 200
	}, "partition 3 accepted after the reload")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
}

// A SIGHUP while the broker starts (a long crash recovery, `systemctl
// reload` right after start) killed it: the handler was installed only once
// broker.Start had returned, and SIGHUP's default action ends a Go program.
// It is now subscribed before anything starts and applied once the broker
// serves.
func TestBrokerSIGHUPDuringStartup(t *testing.T) {
	p, release := startHeld(t)
	p.signal(syscall.SIGHUP)
	release()
	p.waitReady(30 * time.Second)
	zktest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "reloaded the topic sections")
	}, "the SIGHUP received during start-up applied once started")
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("broker exit %d\n%s", code, p.stderr.String())
	}
}

// startHeld starts a broker process whose start-up is held on reading
// tlsKey from a FIFO until release is called: the broker is then inside
// broker.Start, as during a long crash recovery.
func startHeld(t *testing.T) (p *brokerProc, release func()) {
	t.Helper()
	dir := t.TempDir()
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	keyPEM, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "key.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	path, addr := writeINI(t, dir, false, "", 0, "")
	ini, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ini = append(ini, fmt.Sprintf("\n[security]\ntlsPort=%d\ntlsCert=%s\ntlsKey=%s\n", zktest.FreePort(t), cert, fifo)...)
	if err := os.WriteFile(path, ini, 0o644); err != nil {
		t.Fatal(err)
	}
	// The broker reads the key twice (the replication client's TLS, then
	// the listener's). The test holds the FIFO open for writing (O_RDWR does
	// not wait for a reader), so the broker's first open returns at once
	// and its read waits for the key (a read, unlike an open, is not
	// restarted by a signal).
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p = launchBrokerProc(t, addr, "-c", path)
	hasFIFO := func() bool {
		select {
		case <-p.done:
			t.Fatalf("broker exited during start-up: %v\n%s", p.err, p.stderr.String())
		default:
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p.cmd.Process.Pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); l == fifo {
				return true
			}
		}
		return false
	}
	zktest.Eventually(t, 30*time.Second, hasFIFO, "the broker reading tlsKey")
	return p, func() {
		t.Helper()
		if _, err := w.Write(keyPEM); err != nil {
			t.Fatal(err)
		}
		w.Close() // EOF for the broker
		// Once the broker closed it, a writer that does not wait for a
		// reader gets one only when the broker waits in its second open.
		zktest.Eventually(t, 30*time.Second, func() bool { return !hasFIFO() }, "the broker done with the first read")
		zktest.Eventually(t, 30*time.Second, func() bool {
			_ = hasFIFO() // fails the test when the broker exited
			w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			return err == nil
		}, "the broker opening tlsKey again")
		if _, err := w.Write(keyPEM); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
}

// SIGTERM during start-up (a long crash recovery): the first stops the
// broker once it is started, a second forces the exit at once (code 1), as
// while serving; before, both waited for broker.Start to return.
func TestBrokerSIGTERMDuringStartup(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		p, release := startHeld(t)
		p.signal(syscall.SIGTERM)
		zktest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(p.stderr.String(), "during start-up") },
			"the signal noticed during start-up")
		release()
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("broker exit %d, want 0 (stopped gracefully once started)\n%s", code, p.stderr.String())
		}
		if !strings.Contains(p.stderr.String(), "broker stopped") {
			t.Fatalf("no graceful stop:\n%s", p.stderr.String())
		}
	})
	t.Run("twice", func(t *testing.T) {
		p, _ := startHeld(t) // never released
		p.signal(syscall.SIGTERM)
		zktest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(p.stderr.String(), "during start-up") },
			"the signal noticed during start-up")
		p.signal(syscall.SIGTERM)
		if code := p.wait(30 * time.Second); code != 1 {
			t.Fatalf("broker exit %d, want 1 (forced)\n%s", code, p.stderr.String())
		}
	})
}
