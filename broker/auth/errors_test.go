package auth

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/auth/authtest"
)

// syncBuf is a log sink the watcher goroutine writes while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), sub)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchFileErrors: a users file that is missing or does not parse at
// start is an error (the broker refuses to start); one that stops parsing
// later keeps the previous users until a good one replaces it.
func TestWatchFileErrors(t *testing.T) {
	dir := t.TempDir()
	a := New(Options{})
	if _, err := a.WatchFile(context.Background(), filepath.Join(dir, "missing.ini"), 0); err == nil {
		t.Fatal("WatchFile accepted a missing users file")
	}
	path := filepath.Join(dir, "users.ini")
	write := func(s string) { // atomically, as docs/security.md advises operators
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("[alice]\npublsh = x\n")
	if _, err := a.WatchFile(context.Background(), path, 0); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("WatchFile on a bad users file: err = %v, want one naming %s", err, path)
	}

	var logs syncBuf
	a = New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	write("[alice]\npublish = orders\n")
	ctx, cancel := context.WithCancel(context.Background())
	done, err := a.WatchFile(ctx, path, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-done }()
	if a.Users().Lookup("alice") == nil {
		t.Fatal("first load: alice missing")
	}
	write("[bob]\nadmin = maybe\n") // a different size: the stat check sees it
	waitFor(t, "the bad reload to be logged", func() bool { return logs.has("does not parse") })
	if a.Users().Lookup("alice") == nil || a.Check("alice", OpPublish, []byte("orders"), nil) != "" {
		t.Fatalf("a users file that does not parse replaced the previous users: lookup=%v check=%q ", a.Users().Lookup("alice") != nil, a.Check("alice", OpPublish, []byte("orders"), nil))
	}
	write("[bob]\nadmin = true\n\n")
	waitFor(t, "the good reload", func() bool { return a.Users().Lookup("bob") != nil })
	if a.Users().Lookup("alice") != nil {
		t.Fatal("alice survived a reload without her")
	}
}

// TestTLSConfigErrors: each misconfigured TLS file is refused with the
// setting it belongs to named.
func TestTLSConfigErrors(t *testing.T) {
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "127.0.0.1")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name, want string
		f          func() (*tls.Config, error)
	}{
		{"server cert missing", "tlsCert/tlsKey", func() (*tls.Config, error) { return ServerTLS(missing, key, "") }},
		{"server key is the cert", "tlsCert/tlsKey", func() (*tls.Config, error) { return ServerTLS(cert, cert, "") }},
		{"client CA missing", "tlsClientCA", func() (*tls.Config, error) { return ServerTLS(cert, key, missing) }},
		{"client CA holds no certificate", "no PEM certificate", func() (*tls.Config, error) { return ServerTLS(cert, key, key) }},
		{"client: CA missing", "TLS CA", func() (*tls.Config, error) { return ClientTLS(missing, "", "", "") }},
		{"client: cert without key", "give both", func() (*tls.Config, error) { return ClientTLS(ca.CAFile, cert, "", "") }},
		{"client: key without cert", "give both", func() (*tls.Config, error) { return ClientTLS(ca.CAFile, "", key, "") }},
		{"client: cert missing", "TLS client certificate", func() (*tls.Config, error) { return ClientTLS(ca.CAFile, missing, key, "") }},
	} {
		cfg, err := c.f()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: cfg %v, err %v; want an error containing %q", c.name, cfg != nil, err, c.want)
		}
	}
	cfg, err := ServerTLS(cert, key, ca.CAFile)
	if err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil {
		t.Fatalf("mutual TLS config: %v, %v", cfg, err)
	}
}
