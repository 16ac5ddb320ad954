package broker_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/conf"
)

// TestTLSFileErrorsNameTheFile: a broker whose tlsCert or tlsKey does not
// load refuses to start with an error that names the keys and the files
// (docs/security.md, "Turning it on"); so does a client certificate given
// to auth.ClientTLS (the CLI's --tls-cert/--tls-key). The broker's start
// meets the pair first in its replication dialer (auth.PeerTLS), which
// used to call it a "TLS client certificate".
func TestTLSFileErrorsNameTheFile(t *testing.T) {
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	_, otherKey := ca.Issue(t, "other")
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a PEM file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cert, key string
		want            []string // each must appear in the error
	}{
		{"certificate not PEM", junk, key, []string{"tlsCert/tlsKey", junk}},
		{"key not PEM", cert, junk, []string{"tlsCert/tlsKey", junk}},
		{"key of another certificate", cert, otherKey, []string{cert, otherKey}},
		{"missing certificate", filepath.Join(dir, "missing.pem"), key, []string{"tlsCert/tlsKey", filepath.Join(dir, "missing.pem")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			ini := brokertest.INI(brokertest.Options{Dir: d,
				ExtraINI: "\n[security]\ntlsPort=1\ntlsCert=" + tc.cert + "\ntlsKey=" + tc.key + "\n"})
			path := filepath.Join(d, "server.ini")
			if err := os.WriteFile(path, []byte(ini), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := conf.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := broker.StartWith(cfg, broker.StartOptions{Logger: slog.New(slog.DiscardHandler), Server: func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
			if err == nil {
				_ = b.Stop(context.Background())
				t.Fatal("started with a broken certificate pair")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("start error %q does not name %q", err, w)
				}
			}
			_, err = auth.ClientTLS("", tc.cert, tc.key, "")
			if err == nil {
				t.Fatal("ClientTLS accepted a broken pair")
			}
			for _, w := range tc.want {
				if w == "tlsCert/tlsKey" {
					w = "TLS client certificate"
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ClientTLS error %q does not name %q", err, w)
				}
			}
		})
	}
}
