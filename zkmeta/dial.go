package zkmeta

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"
)

// Dialer opens one TCP connection to a ZooKeeper server (go-zookeeper's zk.Dialer).
type Dialer func(network, address string, timeout time.Duration) (net.Conn, error)

// dial is the Dialer handed to go-zookeeper. It
//   - backs off between failed attempts (go-zookeeper itself retries about once a second), capped
//     well below the session timeout so that a returning server is found in time;
//   - logs unreachable servers with exponentially growing intervals instead of every second;
//   - notes servers that refuse the connection (Config.FailFast).
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
		c.noteRefusedLocked(address, err)
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
	c.dropZxid = c.refusals >= 3
	clear(c.refused)
	return conn, nil
}

// dropLastZxid is go-zookeeper's zk.WithDropLastZxid hook, asked right after dial returned a
// connection: after three connections closed before the server answered, the connect request
// leaves out our last zxid. A server refuses a client that has seen a newer zxid than its own, and
// go-zookeeper keeps its last zxid until a session expires: after ZooKeeper lost its data (a wiped
// or replaced standalone server) we would be refused forever. Without the zxid the server answers
// that our session expired, and go-zookeeper starts a new one.
func (c *Client) dropLastZxid() bool {
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	return c.dropZxid
}

// noteRefusedLocked records a dial that failed because nothing listens at address (or its name
// does not resolve). Once every server has refused in a row before the first session, Connect
// with Config.FailFast gives up (allRefused is closed).
func (c *Client) noteRefusedLocked(address string, err error) {
	var dnsErr *net.DNSError
	if !errors.Is(err, syscall.ECONNREFUSED) && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		clear(c.refused) // a timeout or another error: the server may still answer
		return
	}
	if c.sessionServer != "" {
		return // we had a session: keep retrying (the server may be restarting)
	}
	c.refused[address] = err
	if len(c.refused) >= c.distinctServers && c.refusedErr == nil {
		c.refusedErr = err
		close(c.allRefused)
	}
}

// handshakeDone: a server answered our connect request, with a session (ok) or saying that ours
// expired. Called from go-zookeeper's event callback.
func (c *Client) handshakeDone(server string, ok bool) {
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.awaitHandshake = false
	c.refusals = 0
	c.hadSession = ok
	if ok {
		c.sessionServer = server
	}
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
	newRound := h.next == 0 // every server was tried since the last time we were here
	s := h.servers[h.next]
	h.next = (h.next + 1) % len(h.servers)
	h.mu.Unlock()
	h.c.dialMu.Lock()
	failing := h.c.dialFails > 0
	h.c.dialMu.Unlock()
	// retryStart makes go-zookeeper pause a second before a new round over the servers (not
	// before the last server of a round: Config.FailFast must see every server refuse first).
	// It also fails requests queued while disconnected (zk.ErrNoServer), which is what we want
	// while no server can be reached.
	return s, newRound && failing
}

func (h *hostProvider) Connected() {}

// zkLogger routes go-zookeeper's log lines to the client's logger. Failed dials are not among them
// (zk.WithLogDialErrors(false)): dial logs unreachable servers itself, with backoff.
type zkLogger struct{ c *Client }

func (l zkLogger) Printf(format string, args ...any) {
	l.c.log.Printf("zkmeta: go-zookeeper: "+format, args...)
}
