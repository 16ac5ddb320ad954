package auth

import (
	"bytes"
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/auth/authtest"
)

// TestServerTLSReloadsCertificate: a renewed pair is served by the next
// handshake that checks; a pair that does not load keeps the previous one;
// a good pair after that is picked up again.
func TestServerTLSReloadsCertificate(t *testing.T) {
	defer func(d time.Duration) { certCheckEvery = d }(certCheckEvery)
	certCheckEvery = 0 // every handshake checks
	ca := authtest.NewCA(t)
	certA, keyA := ca.Issue(t, "127.0.0.1")
	certB, keyB := ca.Issue(t, "127.0.0.1")
	certC, keyC := ca.Issue(t, "127.0.0.1")
	cfg, err := ServerTLS(certA, keyA, "")
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		t.Helper()
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	leaf := func(certFile, keyFile string) []byte {
		t.Helper()
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	a, b, c := leaf(certA, keyA), leaf(certB, keyB), leaf(certC, keyC)
	if !bytes.Equal(served(), a) {
		t.Fatal("not serving the configured certificate")
	}

	// Renewal: both files replaced.
	authtest.ReplaceFile(t, certB, certA)
	authtest.ReplaceFile(t, keyB, keyA)
	if !bytes.Equal(served(), b) {
		t.Fatal("the renewed certificate is not served")
	}

	// Half a renewal: C's certificate with B's key does not load; B stays.
	authtest.ReplaceFile(t, certC, certA)
	if !bytes.Equal(served(), b) {
		t.Fatal("a certificate that does not match its key replaced the served one")
	}
	// Garbage stays refused too.
	if err := os.WriteFile(keyA, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(), b) {
		t.Fatal("a broken key file replaced the served certificate")
	}
	// The renewal completes: C is served.
	authtest.ReplaceFile(t, keyC, keyA)
	if !bytes.Equal(served(), c) {
		t.Fatal("the completed renewal is not served")
	}

	// A missing file keeps the certificate.
	if err := os.Remove(certA); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(), c) {
		t.Fatal("a missing certificate file dropped the served certificate")
	}
}
