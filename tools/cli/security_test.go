package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// TestSecurityCLI: `metaq auth hash` makes a users-file entry the broker
// accepts, and `metaq produce` reaches the TLS port with --tls-ca, --user
// and --secret-file, within the user's rights.
func TestSecurityCLI(t *testing.T) {
	ctx := context.Background()
	out, errOut, code := runCLI(t, ctx, "", "s3cret pw\n", "auth", "hash", "--user", "alice", "--cost", "4")
	if code != 0 || !strings.Contains(out, "secret = $2") || !strings.Contains(out, "signingKey = "+auth.SigningKey("alice", "s3cret pw")) {
		t.Fatalf("auth hash: %d %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte(out+"publish = orders.*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("s3cret pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"orders.*": 1, "test": 1},
		ExtraINI: fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\nusersFile=%s\nanonymous=none\n", cert, key, users),
		Server:   func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
	tlsAddr := b.Server.TLSAddr().String()
	sec := []string{"--tls-ca", ca.CAFile, "--user", "alice", "--secret-file", secretFile, "--connect-timeout", "20s"}
	if out, errOut, code := runCLI(t, ctx, "", "", append([]string{"produce", "-t", "orders.eu", "--message", "hi", "--broker", tlsAddr}, sec...)...); code != 0 {
		t.Fatalf("produce over TLS: %d %s %s", code, out, errOut)
	}
	if b.Store.MaxOffset("orders.eu", 0) != 1 {
		t.Fatal("not stored")
	}
	if _, _, code := runCLI(t, ctx, "", "", append([]string{"produce", "-t", "test", "--message", "no", "--broker", tlsAddr}, sec...)...); code == 0 {
		t.Fatal("alice published to test")
	}
	if _, _, code := runCLI(t, ctx, "", "", "produce", "-t", "orders.eu", "--message", "no", "--broker", tlsAddr, "--tls-ca", ca.CAFile, "--connect-timeout", "5s"); code == 0 {
		t.Fatal("anonymous produce over TLS accepted")
	}
	if b.Store.MaxOffset("test", 0) != 0 || b.Store.MaxOffset("orders.eu", 0) != 1 {
		t.Fatal("a refused message was stored")
	}
	if _, errOut, code := runCLI(t, ctx, "", "", "produce", "-t", "x", "--message", "m", "--tls-cert", cert); code != ExitUsage {
		t.Fatalf("--tls-cert without --tls-key: %d %s", code, errOut)
	}
}
