package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
)

// Where Debian's zookeeper package puts the server (what scripts/zk.sh uses too).
const (
	zkJar       = "/usr/share/java/zookeeper.jar"
	slf4jLog4j  = "/usr/share/java/slf4j-log4j12.jar"
	log4jJar    = "/usr/share/java/log4j-1.2.jar"
	slf4jSimple = "/usr/share/java/slf4j-simple.jar"
)

// localZooKeeper is a standalone ZooKeeper run as a child of `metaq broker --local-zk`.
type localZooKeeper struct {
	cmd     *exec.Cmd
	dir     string
	addr    string
	log     *slog.Logger
	done    chan struct{}
	stopped sync.Once
}

func isLocalHost(h string) bool {
	switch strings.ToLower(h) {
	case "", "localhost", "0.0.0.0", "::", "::1":
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// startLocalZooKeeper starts ZooKeeper on the port of the first server of connect (which must
// be this machine) with data and logs in dir, and waits until it answers ruok.
func startLocalZooKeeper(ctx context.Context, connect, dir string, log *slog.Logger) (*localZooKeeper, error) {
	servers, _, err := zkmeta.ParseConnectString(connect)
	if err != nil || len(servers) == 0 {
		return nil, usageErr("--local-zk: bad zk.zkConnect %q: %v", connect, err)
	}
	host, portS, err := net.SplitHostPort(servers[0])
	if err != nil {
		return nil, usageErr("--local-zk: bad ZooKeeper address %q: %v", servers[0], err)
	}
	if !isLocalHost(host) {
		return nil, usageErr("--local-zk: zk.zkConnect names %s, which is not this machine; use a loopback address (127.0.0.1:2181)", servers[0])
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port <= 0 || port > 65535 {
		return nil, usageErr("--local-zk: bad port in %q", servers[0])
	}
	if len(servers) > 1 {
		log.Warn("--local-zk runs one standalone server; zk.zkConnect lists several, only the first is started", "server", servers[0])
	}
	bind := "127.0.0.1"
	if host == "::1" {
		bind = "::1"
	}
	addr := net.JoinHostPort(bind, portS)
	if zkRuok(addr, 500*time.Millisecond) || portOpen(addr) {
		return nil, &ExitError{Code: ExitFailure, Err: fmt.Errorf("--local-zk: %s is already in use (a ZooKeeper started elsewhere, e.g. by scripts/zk.sh?); "+
			"stop it or run without --local-zk to use it", addr)}
	}
	java, err := exec.LookPath("java")
	if err != nil {
		java = "/usr/bin/java"
	}
	if _, err := os.Stat(zkJar); err != nil {
		return nil, &ExitError{Code: ExitFailure, Err: fmt.Errorf("--local-zk needs Debian's zookeeper package (%s is missing): run scripts/zk.sh start once, or apt-get install zookeeper", zkJar)}
	}
	if _, err := os.Stat(java); err != nil {
		return nil, &ExitError{Code: ExitFailure, Err: fmt.Errorf("--local-zk needs Java (java not found on PATH): apt-get install zookeeper pulls it in")}
	}
	cp := zkJar
	if fileExists(slf4jLog4j) && fileExists(log4jJar) {
		cp += ":" + slf4jLog4j + ":" + log4jJar
	} else if fileExists(slf4jSimple) {
		cp += ":" + slf4jSimple
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	dataDir, logDir := filepath.Join(dir, "data"), filepath.Join(dir, "logs")
	for _, d := range []string{dataDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("--local-zk: %w", err)
		}
	}
	cfgPath := filepath.Join(dir, "zoo.cfg")
	cfg := fmt.Sprintf("# written by metaq broker --local-zk on every start\ntickTime=2000\ndataDir=%s\nclientPort=%d\nclientPortAddress=%s\n"+
		"maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=*\nautopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n",
		dataDir, port, bind)
	log4j := fmt.Sprintf("log4j.rootLogger=INFO, FILE\nlog4j.appender.FILE=org.apache.log4j.RollingFileAppender\n"+
		"log4j.appender.FILE.File=%s\nlog4j.appender.FILE.MaxFileSize=10MB\nlog4j.appender.FILE.MaxBackupIndex=3\n"+
		"log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\nlog4j.appender.FILE.layout.ConversionPattern=%%d{ISO8601} %%-5p [%%t:%%C{1}@%%L] - %%m%%n\n",
		filepath.Join(logDir, "zookeeper.log"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("--local-zk: %w", err)
	}
	log4jPath := filepath.Join(dir, "log4j.properties")
	if err := os.WriteFile(log4jPath, []byte(log4j), 0o644); err != nil {
		return nil, fmt.Errorf("--local-zk: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(logDir, "zookeeper.out"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--local-zk: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dzookeeper.log.dir="+logDir, "-Dzookeeper.log.file=zookeeper.log",
		"-Dlog4j.configuration=file:"+log4jPath, "-Dzookeeper.admin.enableServer=false",
		"-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C meant for the broker does not stop ZooKeeper before the
	// broker has unregistered; Pdeathsig kills it if the broker dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("--local-zk: starting %s: %w", java, err)
	}
	z := &localZooKeeper{cmd: cmd, dir: dir, addr: addr, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(z.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !zkReady(addr, 500*time.Millisecond) {
		select {
		case <-z.done:
			return nil, fmt.Errorf("--local-zk: ZooKeeper exited during start-up; see %s:\n%s", z.LogFile(), tailFile(z.LogFile(), 15))
		case <-ctx.Done():
			z.Kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			z.Kill()
			return nil, fmt.Errorf("--local-zk: ZooKeeper did not answer on %s within 30s; see %s", addr, z.LogFile())
		}
	}
	log.Info("local ZooKeeper started", "addr", addr, "pid", cmd.Process.Pid, "dir", dir, "took", time.Since(start).Round(time.Millisecond))
	return z, nil
}

// Done is closed when the ZooKeeper process exits.
func (z *localZooKeeper) Done() <-chan struct{} { return z.done }

// LogFile is ZooKeeper's log.
func (z *localZooKeeper) LogFile() string { return filepath.Join(z.dir, "logs", "zookeeper.log") }

// Stop stops ZooKeeper (SIGTERM, SIGKILL after 10s) and waits for it.
func (z *localZooKeeper) Stop() {
	z.stopped.Do(func() {
		select {
		case <-z.done:
			return
		default:
		}
		_ = z.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-z.done:
		case <-time.After(10 * time.Second):
			_ = z.cmd.Process.Kill()
			<-z.done
		}
		z.log.Info("local ZooKeeper stopped", "addr", z.addr)
	})
}

// Kill ends ZooKeeper at once.
func (z *localZooKeeper) Kill() {
	z.stopped.Do(func() {
		_ = z.cmd.Process.Kill()
		<-z.done
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// fourLetter sends one of ZooKeeper's four-letter words and returns the answer.
func fourLetter(addr, word string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(word)); err != nil {
		return ""
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(c)
	return buf.String()
}

// zkRuok reports whether ZooKeeper answers ruok with imok (it does as soon as it listens).
func zkRuok(addr string, timeout time.Duration) bool {
	return strings.TrimSpace(fourLetter(addr, "ruok", timeout)) == "imok"
}

// zkReady reports whether ZooKeeper serves sessions: imok, and srvr shows its mode (before
// that, a session attempt is dropped).
func zkReady(addr string, timeout time.Duration) bool {
	return zkRuok(addr, timeout) && strings.Contains(fourLetter(addr, "srvr", timeout), "Mode: ")
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
