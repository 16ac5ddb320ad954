package zkmeta

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"
)

// Dialer opens one TCP connection to a ZooKeeper server (go-zookeeper's zk.Dialer).
type Dialer func(network, address string, timeout time.Duration) (net.Conn, error)

// dial is the Dialer handed to go-zookeeper. It
//   - backs off between failed attempts (go-zookeeper itself retries about once a second), capped
//     well below the session timeout so that a returning server is found in time;
//   - logs unreachable servers with exponentially growing intervals instead of every second;
//   - reads the session id, password and negotiated timeout out of the connect response, which
//     go-zookeeper keeps private (zktest.ExpireSession needs them to expire a session for real).
func (c *Client) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c.dialMu.Lock()
	fails := c.dialFails
	dropped := c.hadSession
	c.hadSession = false
	c.dialMu.Unlock()
	var d time.Duration
	switch {
	case fails > 0:
		d = min(50*time.Millisecond<<min(fails-1, 10), c.maxBackoff)
	case dropped:
		// An established connection dropped: reconnect after a short random pause (as the Java
		// client does) so that the clients of a restarted server do not all come back at once.
		d = 20*time.Millisecond + rand.N(180*time.Millisecond)
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.closing:
			t.Stop()
			return nil, ErrClosed
		}
	}
	dial := c.cfg.Dialer
	if dial == nil {
		dial = net.DialTimeout
	}
	conn, err := dial(network, address, timeout)
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	if err == nil && c.awaitHandshake {
		// The previous connection closed before the server answered the handshake (a server
		// starting up, or refusing our session): pace like a failed dial.
		c.dialFails++
		if c.dialFails == 1 {
			c.downSince = time.Now()
		}
		c.refusals++
		if c.refusals == 3 {
			c.log.Printf("zkmeta: ZooKeeper %s keeps closing the connection before answering our session request; "+
				"if it lost its data it is behind the last zxid we saw and refuses us: asking for our session without it", address)
		}
	}
	if err != nil {
		c.awaitHandshake = false
		c.dialFails++
		now := time.Now()
		if c.dialFails == 1 {
			c.downSince = now
		}
		if c.dialFails == 1 || now.Sub(c.lastDialLog) >= c.dialLogEvery {
			c.log.Printf("zkmeta: ZooKeeper %s unreachable (%v); retrying with backoff (%d attempts, down for %s)",
				address, err, c.dialFails, now.Sub(c.downSince).Round(time.Millisecond))
			c.lastDialLog = now
			if c.dialFails > 1 {
				c.dialLogEvery = min(c.dialLogEvery*2, time.Minute)
			}
		}
		return nil, err
	}
	c.awaitHandshake = true
	return &sniffConn{Conn: conn, c: c, server: address, dropZxid: c.refusals >= 3}, nil
}

// handshakeDone: a server answered our connect request, with a session (sid != 0) or saying that
// ours expired.
func (c *Client) handshakeDone(server string, sid int64) {
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.awaitHandshake = false
	c.refusals = 0
	c.hadSession = sid != 0
	if c.dialFails > 0 {
		c.log.Printf("zkmeta: ZooKeeper %s reachable again after %d failed attempts (%s)",
			server, c.dialFails, time.Since(c.downSince).Round(time.Millisecond))
	}
	c.dialFails = 0
	c.dialLogEvery = time.Second
}

// hostProvider hands go-zookeeper the servers round robin. Unlike its DNSHostProvider it does not
// make go-zookeeper sleep a second before every reconnection to a single server (retryStart)
// when the last attempt worked — a session expiry is followed by an immediate reconnection — and
// resolves names at dial time. Pacing after failures is dial's backoff.
type hostProvider struct {
	c       *Client
	mu      sync.Mutex
	servers []string
	next    int
}

func (h *hostProvider) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	return nil
}

func (h *hostProvider) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *hostProvider) Next() (string, bool) {
	h.mu.Lock()
	s := h.servers[h.next]
	h.next = (h.next + 1) % len(h.servers)
	wrapped := h.next == 0
	h.mu.Unlock()
	h.c.dialMu.Lock()
	failing := h.c.dialFails > 0
	h.c.dialMu.Unlock()
	// retryStart also fails requests queued while disconnected (zk.ErrNoServer), which is what we
	// want while no server can be reached.
	return s, wrapped && failing
}

func (h *hostProvider) Connected() {}

// sniffConn captures the first frame the server sends on a new connection: the connect response
// (protocolVersion int32, timeOut int32, sessionId int64, passwd buffer, readOnly bool).
//
// With dropZxid it also zeroes lastZxidSeen in the connect request (protocolVersion int32,
// lastZxidSeen int64, …). A server refuses a client that has seen a newer zxid than its own, and
// go-zookeeper keeps its last zxid until a session expires: after ZooKeeper lost its data (a
// wiped or replaced standalone server) it would be refused forever. Without the zxid the server
// answers that the session expired, and go-zookeeper starts a new one.
type sniffConn struct {
	net.Conn
	c        *Client
	server   string
	dropZxid bool
	wrote    bool
	mu       sync.Mutex
	done     bool
	buf      []byte
}

// SetReadDeadline shortens go-zookeeper's handshake deadline (ten receive timeouts, 20 s for a
// 3 s session): a server that accepts connections but does not answer yet (still starting) is
// retried after handshakeTimeout instead.
func (s *sniffConn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if !done {
		if limit := time.Now().Add(s.c.handshakeTimeout); t.IsZero() || t.After(limit) {
			t = limit
		}
	}
	return s.Conn.SetReadDeadline(t)
}

func (s *sniffConn) Write(p []byte) (int, error) {
	if !s.wrote {
		s.wrote = true
		if s.dropZxid && len(p) >= 16 {
			q := append([]byte(nil), p...)
			clear(q[8:16])
			return s.Conn.Write(q)
		}
	}
	return s.Conn.Write(p)
}

func (s *sniffConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if n > 0 {
		s.mu.Lock()
		if !s.done {
			s.buf = append(s.buf, p[:n]...)
			s.parse()
		}
		s.mu.Unlock()
	}
	return n, err
}

func (s *sniffConn) parse() {
	if len(s.buf) < 4 {
		return
	}
	size := int(binary.BigEndian.Uint32(s.buf))
	if size < 20 || size > 1<<16 {
		s.done, s.buf = true, nil
		return
	}
	if len(s.buf) < 4+size {
		return
	}
	f := s.buf[4 : 4+size]
	s.done, s.buf = true, nil
	timeout := int32(binary.BigEndian.Uint32(f[4:]))
	sid := int64(binary.BigEndian.Uint64(f[8:]))
	s.c.handshakeDone(s.server, sid)
	plen := int(int32(binary.BigEndian.Uint32(f[16:])))
	if sid == 0 || plen < 0 || 20+plen > len(f) {
		return
	}
	passwd := append([]byte(nil), f[20:20+plen]...)
	s.c.setCreds(sessionCreds{id: sid, passwd: passwd, timeout: time.Duration(timeout) * time.Millisecond, server: s.server})
}

type sessionCreds struct {
	id      int64
	passwd  []byte
	timeout time.Duration
	server  string
}

// zkLogger routes go-zookeeper's log lines to the client's logger. "failed to connect" lines are
// dropped: dial logs unreachable servers itself, with backoff.
type zkLogger struct{ c *Client }

func (l zkLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "failed to connect to") {
		return
	}
	l.c.log.Printf("zkmeta: go-zookeeper: "+format, args...)
}
