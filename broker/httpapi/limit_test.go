package httpapi_test

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// httpConn is a raw keep-alive connection to the HTTP side.
type httpConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialHTTP(t *testing.T, hs *httpapi.Server) *httpConn {
	t.Helper()
	nc, err := net.Dial("tcp", hs.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &httpConn{nc: nc, br: bufio.NewReader(nc)}
}

// healthz sends GET /healthz and reads the answer. The deadline is only a
// guard against a hang: a refused connection answers with an error at once.
func (c *httpConn) healthz(t *testing.T) (int, error) {
	t.Helper()
	_ = c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.nc.Write([]byte("GET /healthz HTTP/1.1\r\nHost: metaq\r\n\r\n")); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no answer and no close within 30 s: %v", err)
		}
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHTTPMaxConnections: dashboardHttpPort had no connection bound, so a
// client opening connections without end made the broker hold a goroutine,
// buffers and a descriptor for each. With dashboardMaxConnections=4
// (docs/configuration.md), three keep-alive connections and a WebSocket
// take the four slots; a fifth connection is closed without an answer; a
// slot freed by a client closing its connection, or its WebSocket, serves
// a new connection.
func TestHTTPMaxConnections(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{ExtraINI: "dashboardMaxConnections=4\n"})
	max := b.Config.System.DashboardMaxConnections
	if max != 4 {
		t.Fatalf("dashboardMaxConnections=4 read as %d", max)
	}
	hs := runHTTP(t, b, func(o *httpapi.Options) {
		withDelivery(b)(o)
		o.MaxConnections = max
	})
	var held []*httpConn
	for i := 0; i < max-1; i++ {
		c := dialHTTP(t, hs)
		if st, err := c.healthz(t); st != 200 {
			t.Fatalf("connection %d within the bound: %d %v", i+1, st, err)
		}
		held = append(held, c)
	}
	ws := wsDial(t, hs, "g1", "test", "max=1")

	refused := func(when string) {
		t.Helper()
		if st, err := dialHTTP(t, hs).healthz(t); err == nil {
			t.Fatalf("%s: a connection beyond the bound of %d was answered %d", when, max, st)
		}
	}
	// A connection beyond the bound may be refused while a freed slot is
	// still being given back: retry until one is served.
	servedEventually := func(when string) *httpConn {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			c := dialHTTP(t, hs)
			st, err := c.healthz(t)
			if err == nil && st == 200 {
				return c
			}
			if err == nil || time.Now().After(deadline) {
				t.Fatalf("%s: no connection served: %d %v", when, st, err)
			}
			_ = c.nc.Close()
			time.Sleep(10 * time.Millisecond)
		}
	}

	refused("with 3 connections and a WebSocket open")
	for i, c := range held { // the held connections are still served
		if st, err := c.healthz(t); st != 200 {
			t.Fatalf("held connection %d: %d %v", i+1, st, err)
		}
	}
	_ = held[0].nc.Close()
	held[0] = servedEventually("after closing a connection")
	refused("with the freed slot taken again")
	_ = ws.c.CloseNow()
	servedEventually("after closing the WebSocket")
	refused("with the WebSocket's slot taken")
}
