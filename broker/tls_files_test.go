package broker_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
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

// TestReplicationLinkPresentsRenewedCertificate: the certificate the
// broker presents on its own links to other brokers (replication, the
// cluster views: auth.PeerTLS) follows a renewal on disk as the listener's
// does, so a master that requires client certificates keeps accepting the
// slave once the old certificate expires (docs/security.md, "Renewing the
// certificate needs no restart"). It used to be loaded once at start.
func TestReplicationLinkPresentsRenewedCertificate(t *testing.T) {
	ca := authtest.NewCA(t)
	srvCert, srvKey := ca.Issue(t, "master")
	oldCert, oldKey := ca.Issue(t, "node-old")
	newCert, newKey := ca.Issue(t, "node-new")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	authtest.ReplaceFile(t, oldCert, cert)
	authtest.ReplaceFile(t, oldKey, key)

	// The peer: a TLS listener that requires a client certificate of the
	// cluster CA and records the common name each connection presents.
	srv, err := auth.ServerTLS(srvCert, srvKey, ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			tc := nc.(*tls.Conn)
			_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
			if tc.Handshake() == nil {
				seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			tc.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })

	cfg := &conf.Config{Security: conf.Security{TLSPort: 1, TLSCert: cert, TLSKey: key, TLSClientCA: ca.CAFile}}
	dial, err := broker.ReplicationDialer(cfg)
	if err != nil || dial == nil {
		t.Fatalf("ReplicationDialer: %v, %v", dial != nil, err)
	}
	presented := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc, err := dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer nc.Close()
		select {
		case cn := <-seen:
			return cn
		case <-ctx.Done():
			t.Fatal("the peer saw no handshake")
			return ""
		}
	}
	if cn := presented(); cn != "node-old" {
		t.Fatalf("presented %q, want node-old", cn)
	}
	authtest.ReplaceFile(t, newCert, cert)
	authtest.ReplaceFile(t, newKey, key)
	deadline := time.Now().Add(15 * time.Second) // the files are looked at once a second at most
	for {
		cn := presented()
		if cn == "node-new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still presenting %q after the renewal, want node-new", cn)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPlainTextOnTLSPortIsAnswered: a client that speaks the plain
// protocol to the TLS port (no --tls-ca / Config.TLS) is told so in the
// protocol's words, `result 400` naming TLS, before the connection closes
// (docs/security.md, "TLS details"); a client that authenticates sees it
// as its auth error. It used to see the connection closed and nothing else
// ('auth: EOF').
func TestPlainTextOnTLSPortIsAnswered(t *testing.T) {
	b := runSecure(t, false, "", nil)
	nc, err := net.DialTimeout("tcp", b.TLSAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.Wrap(t, nc)
	defer c.Close()
	c.Send("version 7\r\n")
	r, err := c.TryReply(10 * time.Second)
	if err != nil {
		t.Fatalf("plain text on the TLS port: %v, want a 400 reply", err)
	}
	if r.Code != 400 || !strings.Contains(string(r.Body), "TLS") {
		t.Fatalf("plain text on the TLS port: %d %q, want 400 naming TLS", r.Code, r.Body)
	}
	c.ExpectClosed(10 * time.Second)

	nc, err = net.DialTimeout("tcp", b.TLSAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := protocol.Login(nc, "alice", "pw-alice"); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("auth in plain text on the TLS port: %v, want an error naming TLS", err)
	}
}
