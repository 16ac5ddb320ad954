package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// The broker's side of [security] (docs/security.md): the TLS listener, the
// auth command, and the one check every command passes before its handler
// runs (authorize). Everything is skipped when Options.Auth is nil and no
// TLS is configured: the broker is then MetaQ's open broker.

// securityState is what a Broker started for [security] and stops with it.
type securityState struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// setupSecurity fills the server options from [security]: the authorizer
// (with its users file watched) and the TLS listener's configuration.
func (b *Broker) setupSecurity(c *conf.Config, opts *Options) error {
	sec := c.Security
	if sec.TLSPort > 0 {
		cfg, err := auth.ServerTLS(sec.TLSCert, sec.TLSKey, sec.TLSClientCA)
		if err != nil {
			return err
		}
		opts.TLS = cfg
		opts.TLSAddr = net.JoinHostPort(c.System.BindHost, strconv.Itoa(sec.TLSPort))
		opts.NoPlaintext = !sec.AllowPlaintext
	}
	if !sec.AuthEnabled() {
		return nil
	}
	a := auth.New(auth.Options{Anonymous: sec.Anonymous, FailRate: sec.AuthFailRate, FailBurst: sec.AuthFailBurst,
		MaxDelay: sec.AuthMaxDelay, Logger: opts.Logger.With("component", "auth")})
	ctx, cancel := context.WithCancel(context.Background())
	st := &securityState{cancel: cancel}
	if sec.UsersFile != "" {
		done, err := a.WatchFile(ctx, sec.UsersFile, 0)
		if err != nil {
			cancel()
			return err
		}
		st.wg.Add(1)
		go func() { defer st.wg.Done(); <-done }()
	}
	b.security = st
	opts.Auth = a
	return nil
}

// watchUsersZK follows <zkRoot>/config/users (usersZK) once ZooKeeper is up.
func (b *Broker) watchUsersZK() {
	st, a := b.security, b.Server.opts.Auth
	if st == nil || a == nil || !b.Config.Security.UsersZK {
		return
	}
	zc := b.ZK()
	if zc == nil {
		b.log.Error("usersZK: no ZooKeeper client; nobody can authenticate")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	prev := st.cancel
	st.cancel = func() { cancel(); prev() }
	node := UsersNode(b.Config.ZK.Root)
	ch := zc.WatchData(ctx, node)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		a.WatchData(ch, node)
	}()
}

// UsersNode is the ZooKeeper node of usersZK.
func UsersNode(root string) string {
	if root == "" {
		root = conf.DefaultZKRoot
	}
	return root + "/config/users"
}

func (b *Broker) stopSecurity() {
	if b.security != nil {
		b.security.cancel()
		b.security.wg.Wait()
	}
}

// Authorizer is the broker's authorizer (nil: no users or ACLs).
func (s *Server) Authorizer() *auth.Authorizer { return s.opts.Auth }

// TLSAddr is the TLS listener's address (nil without one).
func (s *Server) TLSAddr() net.Addr {
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// listen opens the listeners Options ask for.
func (s *Server) listen() error {
	if s.opts.TLS != nil {
		ln, err := net.Listen("tcp", s.opts.TLSAddr)
		if err != nil {
			return fmt.Errorf("broker: listen tlsPort %s: %w", s.opts.TLSAddr, err)
		}
		s.tlsLn = ln
		if s.opts.NoPlaintext {
			return s.Serve(ln) // the TLS port is the broker's only port (and the one advertised)
		}
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		if s.tlsLn != nil {
			_ = s.tlsLn.Close()
		}
		return fmt.Errorf("broker: listen %s: %w", s.opts.Addr, err)
	}
	if s.tlsLn != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.tlsLn)
		s.log.Info("broker TLS listener", "addr", s.tlsLn.Addr().String(), "mutualTLS", s.opts.TLS.ClientCAs != nil)
	}
	return s.Serve(ln)
}

// wrapTLS wraps a connection accepted on the TLS listener.
func (s *Server) wrapTLS(ln net.Listener, nc net.Conn) (net.Conn, bool) {
	if s.tlsLn == nil || ln != s.tlsLn {
		return nc, false
	}
	return tls.Server(nc, s.opts.TLS), true
}

// handshake completes a TLS connection's handshake on the reader goroutine
// before the first request (bounded by handshakeTimeout, docs/security.md
// "TLS details"), and takes a verified client certificate whose common
// name is a user as that user's identity.
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil {
			c.log.Info("plain text on the TLS port: the client does not use TLS")
			answerPlainText(rh.Conn)
			return false
		}
		c.log.Info("TLS handshake failed", "err", err)
		return false
	}
	cs := tc.ConnectionState()
	if a := c.srv.opts.Auth; a != nil && len(cs.VerifiedChains) > 0 && len(cs.PeerCertificates) > 0 {
		if cn := cs.PeerCertificates[0].Subject.CommonName; a.Users().Lookup(cn) != nil {
			c.user = cn
		}
	}
	return true
}

// authorize is the one check in front of every command's handler. It
// returns false after queueing the 403 when the connection's identity may
// not do what cmd asks. The allowed path allocates nothing.
func (c *conn) authorize(cmd *protocol.Command) bool {
	a := c.srv.opts.Auth
	var op auth.Op
	topic, group := cmd.Topic, cmd.Group
	switch cmd.Op {
	case protocol.OpAuth, protocol.OpQuit, protocol.OpVersion:
		return true
	case protocol.OpPut, protocol.OpBatchPut:
		op = auth.OpPublish
	case protocol.OpGet, protocol.OpOffset, protocol.OpSeek, protocol.OpQueryKey:
		op = auth.OpSubscribe
	case protocol.OpStats, protocol.OpTrace: // trace on|off marks the identity's later puts
		op = auth.OpConnect
	case protocol.OpRetry, protocol.OpProducer:
		op = auth.OpGroup
	case protocol.OpPop: // broker-managed delivery (popconn.go): a subscription of the group
		op = auth.OpSubscribe
	case protocol.OpAck, protocol.OpRelease, protocol.OpReject, protocol.OpExtend:
		op = auth.OpGroup // the group's deliveries; pop checked the topic
	case protocol.OpTransaction:
		op = auth.OpConnect // its puts are checked one by one
		if len(cmd.Args) > 2 && (eqFoldStr(cmd.Args[2], "RECOVER") || eqFoldStr(cmd.Args[2], "FORGET")) {
			op = auth.OpAdmin // heuristic completion (metaq tx)
		}
	case protocol.OpTxEnd:
		op = auth.OpConnect // answers a check the broker sent to this producer
	default:
		// query id (any topic), sync (replication) and every command this
		// switch does not know yet: admins only.
		op = auth.OpAdmin
	}
	reason := a.Check(c.user, op, topic, group)
	if reason == "" {
		return true
	}
	c.log.Info("request denied", "op", cmd.Op.String(), "user", c.user, "reason", reason)
	if cmd.Op == protocol.OpPut || cmd.Op == protocol.OpBatchPut {
		c.srv.stats.putFailed.Add(1)
	}
	c.rq.addResultString(protocol.StatusForbidden, "forbidden: "+reason, cmd.Opaque)
	return false
}

// denied is a check a handler makes itself, for what authorize cannot see
// from the command line: a half message's producer group (in its
// properties), the topic of a message retried or resent by id, the owner
// of a half message (read from the log). It returns "" when allowed (or
// without [security]); else it logs the denial and returns the body of
// the 403 to send.
func (c *conn) denied(cmd protocol.Op, op auth.Op, topic, group []byte) string {
	a := c.srv.opts.Auth
	if a == nil {
		return ""
	}
	reason := a.Check(c.user, op, topic, group)
	if reason == "" {
		return ""
	}
	c.log.Info("request denied", "op", cmd.String(), "user", c.user, "reason", reason,
		"topic", string(topic), "group", string(group))
	return "forbidden: " + reason
}

func eqFoldStr(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x := b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if x != s[i] {
			return false
		}
	}
	return true
}

// handleAuth runs `auth <user> <secret> <opaque>`. Without users and ACLs
// it answers 200 (nothing to check: the broker is open).
func (c *conn) handleAuth(cmd *protocol.Command) {
	a := c.srv.opts.Auth
	if a == nil {
		c.rq.addResultString(protocol.StatusSuccess, "ok (security is off on this broker)", cmd.Opaque)
		return
	}
	c.authBuf = protocol.AppendUnescaped(c.authBuf[:0], cmd.Key)
	user := string(cmd.User)
	reason := a.Authenticate(auth.Host(c.nc.RemoteAddr().String()), user, c.authBuf, c.stop)
	clear(c.authBuf)
	if reason != "" {
		c.rq.addResultString(protocol.StatusForbidden, reason, cmd.Opaque)
		return
	}
	c.user = user
	c.rq.addResultString(protocol.StatusSuccess, "ok", cmd.Opaque)
}

const handshakeTimeout = 10 * time.Second

// plainTextReply is what a client speaking the plain protocol to the TLS
// port reads (docs/security.md, "TLS details"): a reply it can show, where
// it would otherwise see only the connection closed.
var plainTextReply = protocol.AppendResultString(nil, protocol.StatusBadRequest,
	"this is the broker's TLS port (tlsPort): connect with TLS (client.Config.TLS, metaq --tls-ca)", 0)

// answerPlainText writes plainTextReply on nc, the raw connection under a
// TLS handshake that met plain text, and half-closes it, then discards what
// the client still sends (at most plainDrain bytes, for at most
// plainLinger) so that closing does not reset the connection before the
// client has read the reply.
func answerPlainText(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(plainLinger))
	if _, err := nc.Write(plainTextReply); err != nil {
		return
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.CopyN(io.Discard, nc, plainDrain)
}

const (
	plainLinger = time.Second
	plainDrain  = 64 << 10
)

// tlsChunk is how many reply bytes go into one TLS write (a TLS record
// holds at most 16 KiB; tls.Conn splits larger writes itself).
const tlsChunk = 64 << 10

// write sends the rendered segments. A plain connection uses writev; on a
// TLS connection every Write is at least one record (and one syscall), so
// small segments are gathered first.
func (w *writer) write(iov net.Buffers) error {
	nc := w.c.nc
	if _, ok := nc.(*tls.Conn); !ok {
		_, err := iov.WriteTo(nc)
		return err
	}
	if w.tlsBuf == nil {
		w.tlsBuf = make([]byte, 0, tlsChunk)
	}
	buf := w.tlsBuf[:0]
	for _, b := range iov {
		if len(buf)+len(b) > tlsChunk && len(buf) > 0 {
			if _, err := nc.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		if len(b) >= tlsChunk {
			if _, err := nc.Write(b); err != nil {
				return err
			}
			continue
		}
		buf = append(buf, b...)
	}
	if len(buf) > 0 {
		if _, err := nc.Write(buf); err != nil {
			return err
		}
	}
	w.tlsBuf = buf[:0]
	return nil
}

// ReplicationDialer is how this broker's own links to other brokers
// (replication: a slave's connection to its master) connect under
// [security]: to the peer's tlsPort over TLS when tlsPort is set (the
// cluster CA is tlsClientCA; the broker presents its own certificate),
// then `auth replicationUser replicationSecret` when set. nil, nil: plain
// TCP, as without [security].
func ReplicationDialer(c *conf.Config) (func(ctx context.Context, addr string) (net.Conn, error), error) {
	sec := c.Security
	tlsCfg, err := auth.PeerTLS(sec)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil && sec.ReplicationUser == "" {
		return nil, nil
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return auth.DialBroker(ctx, auth.PeerAddr(sec, addr), tlsCfg, sec.ReplicationUser, sec.ReplicationSecret)
	}, nil
}
