package broker_test

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// Every bad request gets a clear 400 and the connection (and the store) keep
// working: the test ends each case with a good put and reads it back.
func TestBadRequestsAreAnsweredAndHarmless(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	cases := []struct {
		name, send, want string
		code             int
	}{
		{"unknown command", "frobnicate 1 2 3\r\n", "unknown command", 400},
		{"get wrong field count", "get test g 0 0 7\r\n", "", 400},
		{"put wrong field count", "put test 0 1 9\r\nx", "", 400},
		{"non-numeric partition", "put test zero 1 0 9\r\nx", "partition", 400},
		{"non-numeric offset", "get test g 0 abc 1024 9\r\n", "offset", 400},
		{"negative max size", "get test g 0 0 -5 9\r\n", "", 400},
		{"topic with slash", "put a/b 0 1 0 9\r\nx", "topic", 400},
		{"topic dotdot", "put .. 0 1 0 9\r\nx", "topic", 400},
		{"topic control byte", "put a\x01b 0 1 0 9\r\nx", "topic", 400},
		{"group with slash", "get test g/x 0 0 1024 9\r\n", "group", 400},
		{"partition out of range (put)", "put test 17 1 0 9\r\nx", "wrong partition", 500},
		{"partition out of range (get)", "get test g 17 0 1024 9\r\n", "is not exists", 404},
		{"checksum mismatch", "put test 0 5 0 12345 9\r\nhello", "checksum", 400},
		{"bad properties line", "put test 0 5 2 9\r\nhello", "properties", 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := b.Dial()
			c.Send(tc.send)
			r := c.Reply()
			if r.Kind != protocol.ReplyResult || r.Code != tc.code || !strings.Contains(string(r.Body), tc.want) {
				t.Fatalf("reply %s %d %q, want %d containing %q", r.Kind, r.Code, r.Body, tc.code, tc.want)
			}
			c.Put("test", 3, "after "+tc.name, 77)
		})
	}
	// The store holds exactly the good puts, in order.
	c := b.Dial()
	c.Send("get test g 3 0 1048576 1\r\n")
	recs := brokertest.Records(t, c.Reply().Body)
	if len(recs) != len(cases) {
		t.Fatalf("partition 3 holds %d records, want %d", len(recs), len(cases))
	}
	for i, r := range recs {
		if string(r.Data) != "after "+cases[i].name || r.QueueOffset != int64(i) {
			t.Fatalf("record %d: %q at %d", i, r.Data, r.QueueOffset)
		}
	}
}

// Framing errors are answered, then the connection closes.
func TestFatalFramingErrorsClose(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	cases := []struct{ name, send, want string }{
		{"length over maxMessageSize", "put test 0 999999999 0 5\r\n", "maxMessageSize"},
		{"length not a number", "put test 0 ten 0 5\r\n", "length"},
		{"header over 4 KiB", "put " + strings.Repeat("x", 5000), "4096"},
		{"binary garbage", "\x16\x03\x01\x02\x00", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := b.Dial()
			c.Send(tc.send)
			r := c.Reply()
			if r.Code != 400 || !strings.Contains(string(r.Body), tc.want) {
				t.Fatalf("reply %d %q", r.Code, r.Body)
			}
			c.ExpectClosed(5 * time.Second)
		})
	}
	// The broker is fine.
	c := b.Dial()
	c.Put("test", 0, "still here", 1)
}

// A client that disconnects in the middle of a put's data leaves nothing
// behind: the partial message is not stored.
func TestDisconnectMidData(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	c := b.Dial()
	c.Send("put test 0 100 0 1\r\nonly part of it")
	c.Close()
	c2 := b.Dial()
	_, _, off := c2.Put("test", 0, "whole", 2)
	if off != 0 {
		t.Fatalf("offset %d: the partial put was stored", off)
	}
}

func TestIdleTimeout(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Server: func(o *broker.Options) { o.IdleTimeout = 300 * time.Millisecond }})
	c := b.Dial()
	c.ExpectClosed(5 * time.Second)
	// A parked long poll is not idleness.
	c2 := b.Dial()
	c2.Send("get test g 0 0 1024 1 1500\r\n")
	r := c2.Reply()
	if r.Code != 404 {
		t.Fatalf("long poll reply %+v", r)
	}
}

// 10,000 concurrent connections each get an answer.
func TestManyConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// Client and server share this process: 20,000 descriptors and more.
	n := 10000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 2*uint64(n)+1000 {
		want := syscall.Rlimit{Cur: 2*uint64(n) + 1000, Max: max(rl.Max, 2*uint64(n)+1000)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			n = int(rl.Cur-1000) / 2
			t.Logf("cannot raise RLIMIT_NOFILE (%v); testing %d connections", err, n)
		} else {
			defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		}
	}
	b := brokertest.RunBroker(t, brokertest.Options{})
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if _, err := fmt.Fprintf(c, "version %d\r\n", i); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 256)
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		rr := protocol.NewReplyReader(c, 1024)
		r, err := rr.Next()
		if err != nil || r.Code != 200 || r.Opaque != int32(i) {
			t.Fatalf("conn %d: %+v %v", i, r, err)
		}
		_ = buf
	}
	if got := b.Server.NumConnections(); got < n {
		t.Fatalf("server counts %d connections", got)
	}
}
