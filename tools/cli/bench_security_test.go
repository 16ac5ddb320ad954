package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// TestBenchRawConnectionsUseSecurityFlags: the workloads of `metaq bench`
// that speak the protocol on their own connections (tx, shared) honour the
// security flags as every other command does (docs/security.md, "Turning it
// on"): over TLS with --tls-ca, authenticated as --user. They used to dial
// plain TCP without auth, so against the TLS port they failed, and against
// a plain port they measured an unencrypted, anonymous broker.
func TestBenchRawConnectionsUseSecurityFlags(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // runs last
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	dir := t.TempDir()
	users := brokertest.RootUsersFile(t, dir, "pw-root")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("pw-root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true, Topics: map[string]int{"bench": 1}, SegSize: 64 << 20,
		ExtraINI: fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\nusersFile=%s\nanonymous=none\n", cert, key, users),
		Server:   func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
	sec := []string{"--server", b.Server.TLSAddr().String(), "--tls-ca", ca.CAFile, "--user", "root", "--secret-file", secret}
	for _, args := range [][]string{
		{"bench", "tx", "--json", "--duration", "200ms", "--conns", "1", "--window", "4", "--tx-size", "2", "--tx-phases", "plain"},
		{"bench", "shared", "--json", "--topic", "bench", "--count", "200", "--shared-phases", "throughput"},
	} {
		out, errs, code := runBench(t, append(args, sec...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args[:2], code, out, errs)
		}
		rs, err := benchkit.ReadResults(strings.NewReader(out))
		if err != nil || len(rs) == 0 {
			t.Fatalf("%v: no result: %v\n%s\n%s", args[:2], err, out, errs)
		}
		for _, r := range rs {
			if r.Error != "" || r.Msgs <= 0 {
				t.Fatalf("%v: %s: error %q, %d messages\n%s", args[:2], r.Workload, r.Error, r.Msgs, errs)
			}
		}
	}
}
