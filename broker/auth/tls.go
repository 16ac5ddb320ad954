package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// ServerTLS is the TLS configuration of a listener: certFile/keyFile (PEM),
// and, when clientCA is set, mutual TLS (a client without a certificate
// signed by clientCA is refused in the handshake). TLS 1.2 at least. The
// certificate pair is re-read when its files change (see certReloader), so
// a renewed certificate is served without a restart.
func ServerTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	r, err := newCertReloader(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsCert/tlsKey: %w", err)
	}
	cfg := &tls.Config{GetCertificate: r.get, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pool, err := loadPool(clientCA)
		if err != nil {
			return nil, fmt.Errorf("tlsClientCA: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certCheckEvery is how often, at most, a handshake looks at the
// certificate files (a variable for the package's tests).
var certCheckEvery = time.Second

// certReloader serves a listener's certificate and follows its files: a
// handshake at most once per certCheckEvery stats both files, and when
// either changed (inode, size or modification time) loads the pair again.
// A pair that does not load (a renewal caught half-written, a key that does
// not match) keeps the previous certificate, is logged once per change, and
// is tried again when the files change next. mu guards everything below
// it; it is held for a stat (and, on a change, a read of two small files),
// never across network I/O.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	certSt  os.FileInfo
	keySt   os.FileInfo
	checked time.Time
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	cs, ks := statOrNil(certFile), statOrNil(keyFile)
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.certSt, r.keySt, r.checked = &cert, cs, ks, time.Now()
	return r, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		r.reloadLocked()
	}
	return r.cert, nil
}

// reloadLocked loads the pair again when a file changed since the last
// attempt.
func (r *certReloader) reloadLocked() {
	cs, ks := statOrNil(r.certFile), statOrNil(r.keyFile)
	if unchanged(cs, r.certSt) && unchanged(ks, r.keySt) {
		return
	}
	r.certSt, r.keySt = cs, ks // tried once per change, whatever the outcome
	cert, err := loadKeyPair(r.certFile, r.keyFile)
	if err != nil {
		slog.Error("TLS certificate files changed but do not load; keeping the previous certificate",
			"tlsCert", r.certFile, "tlsKey", r.keyFile, "err", err)
		return
	}
	r.cert = &cert
	slog.Info("TLS certificate reloaded", "tlsCert", r.certFile)
}

// unchanged is sameStat where two missing files are the same too (so a
// missing file is logged once, not at every check).
func unchanged(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameStat(a, b)
}

func statOrNil(path string) os.FileInfo {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return st
}

// ClientTLS is the TLS configuration of a client: caFile ("" = the system
// roots) verifies the broker; certFile/keyFile (both or neither) is the
// client certificate for mutual TLS, re-read when its files change as
// ServerTLS's is; serverName overrides the name checked ("" = the host
// dialed).
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	return clientTLS(caFile, certFile, keyFile, serverName, "TLS CA", "TLS client certificate")
}

// clientTLS is ClientTLS with the names its errors give the CA and the
// certificate pair (the CLI's flags, or the [security] keys).
func clientTLS(caFile, certFile, keyFile, serverName, caName, pairName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s: give both the certificate and the key", pairName)
	}
	if certFile != "" {
		// Followed on disk as the listener's pair is: a link that lives as
		// long as the broker (replication) presents the renewed certificate
		// from its next connection on (docs/security.md, step 2).
		r, err := newCertReloader(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pairName, err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.get(nil) }
	}
	return cfg, nil
}

// PeerTLS is the client-side TLS of the broker's own links to other
// brokers (replication) as [security] says: nil when the broker has no
// tlsPort; else the cluster CA is tlsClientCA (or the system roots) and the
// broker presents its own tlsCert/tlsKey, so mutual TLS works between
// brokers too.
func PeerTLS(s conf.Security) (*tls.Config, error) {
	if s.TLSPort == 0 {
		return nil, nil
	}
	return clientTLS(s.TLSClientCA, s.TLSCert, s.TLSKey, "", "tlsClientCA", "tlsCert/tlsKey")
}

// loadKeyPair is tls.LoadX509KeyPair with errors that name the files: the
// standard one says only "failed to find any PEM data in key input" or
// "private key does not match public key", which leaves an operator
// guessing which of the broker's files is at fault (docs/security.md).
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err // *PathError: names the file
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s, key %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}

// PeerAddr maps a broker's advertised address to the one a link dials:
// with tlsPort set and TLS configured, the peer's TLS port is assumed to be
// the same tlsPort (brokers of a cluster share their [security] section).
func PeerAddr(s conf.Security, addr string) string {
	if s.TLSPort == 0 || !s.AllowPlaintext {
		return addr
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return net.JoinHostPort(h, strconv.Itoa(s.TLSPort))
	}
	return addr
}

// DialBroker opens a connection to a broker the way every metaq link does
// when security is on: TCP, then TLS when tlsCfg is set (the handshake is
// done here, bounded by ctx), then `auth <user> <secret>` when user is set.
// It returns the connection ready for protocol commands.
func DialBroker(ctx context.Context, addr string, tlsCfg *tls.Config, user, secret string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	nc, err = Secure(ctx, nc, addr, tlsCfg, user, secret)
	if err != nil {
		return nil, err
	}
	return nc, nil
}

// Secure turns a fresh connection to addr into a TLS one (tlsCfg set) and
// authenticates it (user set). On error nc is closed.
func Secure(ctx context.Context, nc net.Conn, addr string, tlsCfg *tls.Config, user, secret string) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	} else {
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if tlsCfg != nil {
		cfg := tlsCfg
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			if h, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = h
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	if user != "" {
		if err := protocol.Login(nc, user, secret); err != nil {
			nc.Close()
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// EscapeSecret is how a secret travels in the auth command: URL
// query-escaped, so that any byte can be typed (a space is %20).
func EscapeSecret(s string) string { return url.QueryEscape(s) }
