package httpapi

import (
	"net"
	"sync"
)

// limitListener bounds the connections open at once on dashboardHttpPort
// (dashboardMaxConnections, docs/configuration.md), as maxConnections does
// on the protocol port: a connection beyond the bound is closed as soon as
// it is accepted, before a TLS handshake or a byte of its request is read,
// so a client opening connections without end costs the server neither a
// goroutine nor buffers per connection. A slot is held until the connection
// is closed, whoever closes it: the http.Server (idle keep-alive timeout,
// shutdown) or, for a hijacked WebSocket, the gateway (gateway_ws.go).
type limitListener struct {
	net.Listener
	slots   chan struct{}
	refused func(remote net.Addr, max int) // logs (rate-limited by the caller)
}

func newLimitListener(ln net.Listener, max int, refused func(net.Addr, int)) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), refused: refused}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: nc, slots: l.slots}, nil
		default:
			l.refused(nc.RemoteAddr(), cap(l.slots))
			_ = nc.Close()
		}
	}
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
