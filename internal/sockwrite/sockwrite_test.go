package sockwrite

import (
	"net"
	"testing"
)

// Once writes what the socket takes and never waits: a full socket is a
// short write, not an error; a closed connection is "not attempted".
func TestOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	defer srv.Close()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Once(raw, []byte("hello")); n != 5 || err != nil {
		t.Fatalf("Once = %d, %v", n, err)
	}
	buf := make([]byte, 1<<20)
	short := false
	for range 1000 { // the peer reads nothing: the socket fills up
		n, err := Once(raw, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n < len(buf) {
			short = true
			break
		}
	}
	if !short {
		t.Fatal("a socket that is never read took 1 GB")
	}
	nc.Close()
	if n, err := Once(raw, buf); n != 0 || err != nil {
		t.Fatalf("Once on a closed connection = %d, %v", n, err)
	}
}
