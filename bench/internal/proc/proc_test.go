package proc

import (
	"context"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a server: PROC_TEST_LISTEN=addr listens there
// until SIGTERM; PROC_TEST_FAIL=1 exits at once with a message.
func TestMain(m *testing.M) {
	if os.Getenv("PROC_TEST_FAIL") == "1" {
		os.Stderr.WriteString("fatal: cannot start\n")
		os.Exit(3)
	}
	if addr := os.Getenv("PROC_TEST_LISTEN"); addr != "" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		time.Sleep(100 * time.Millisecond) // not ready at once
		l, err := net.Listen("tcp", addr)
		if err != nil {
			os.Exit(1)
		}
		os.Stdout.WriteString("listening on " + addr + "\n")
		<-sig
		l.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestStartStop(t *testing.T) {
	port, err := FreePort()
	if err != nil || port == 0 {
		t.Fatal(port, err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	t.Setenv("PROC_TEST_LISTEN", addr)
	exe, _ := os.Executable()
	dir := t.TempDir()
	s, err := Start(context.Background(), "fake", dir, addr, exe)
	if err != nil {
		t.Fatal(err)
	}
	if s.PID() <= 0 {
		t.Fatal("no pid")
	}
	if !strings.Contains(s.LogTail(5), "listening on "+addr) {
		t.Fatalf("log: %q", s.LogTail(5))
	}
	s.Stop()
	s.Stop() // idempotent
	if err := syscall.Kill(s.PID(), 0); err == nil {
		t.Fatal("process still alive after Stop")
	}
	var nilServer *Server
	nilServer.Stop()
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Setenv("PROC_TEST_FAIL", "1")
	exe, _ := os.Executable()
	_, err := Start(context.Background(), "fake", t.TempDir(), "127.0.0.1:1", exe)
	if err == nil || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("error %v", err)
	}
	if _, err := Start(context.Background(), "fake", t.TempDir(), "127.0.0.1:1", "/nonexistent"); err == nil {
		t.Fatal("missing binary started")
	}
}
