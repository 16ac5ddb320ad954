package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// security is a connection's TLS and authentication (Config.TLS, User,
// Secret; docs/security.md).
type security struct {
	tls          *tls.Config
	tlsPort      int
	user, secret string
}

// dialAddr is the address to dial for a broker advertised at addr.
func (s security) dialAddr(addr string) string {
	if s.tls == nil || s.tlsPort <= 0 {
		return addr
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return net.JoinHostPort(h, strconv.Itoa(s.tlsPort))
	}
	return addr
}

// secure runs the TLS handshake and the `auth` exchange on a fresh
// connection, before its reader and writer start, within timeout. On error
// nc is closed.
func (s security) secure(ctx context.Context, nc net.Conn, addr string, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil && s.user == "" {
		return nc, nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 3*time.Second))
	defer cancel()
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	if s.tls != nil {
		cfg := s.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			if h, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = h
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tc
	}
	if s.user != "" {
		if err := protocol.Login(nc, s.user, s.secret); err != nil {
			nc.Close()
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}
