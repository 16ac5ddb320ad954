// Package proc starts and stops the brokers under test: each on 127.0.0.1,
// on a free port, with its own temporary data directory and log file.
package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Server is a broker process started by Start.
type Server struct {
	Name    string
	Addr    string // host:port clients connect to
	DataDir string
	LogPath string
	// HTTPAddr is a second (HTTP) listener, where the server has one.
	HTTPAddr string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	log      *os.File
}

// PID of the server process (for benchkit.ProcCPUTime).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Start runs bin with args (output to <dataDir>/<name>.log) and waits until
// addr accepts TCP connections. On failure the process is stopped and the
// log tail is part of the error.
func Start(ctx context.Context, name, dataDir, addr, bin string, args ...string) (*Server, error) {
	logPath := filepath.Join(dataDir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = dataDir
	// Own process group, and die with us if the harness is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &Server{Name: name, Addr: addr, DataDir: dataDir, LogPath: logPath, cmd: cmd, exited: make(chan struct{}), log: lf}
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx, 20*time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s did not start: %w\n%s", name, err, s.LogTail(20))
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited: %v", s.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for " + s.Addr)
		}
	}
}

// Stop sends SIGTERM, waits up to 15 s, then SIGKILLs the process group.
func (s *Server) Stop() error {
	if s == nil {
		return nil
	}
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
	}
	s.log.Close()
	return nil
}

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
