package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// A lone async send writes its request itself with one non-blocking write
// (asyncwrite.go). When the socket does not take it all (here a broker that
// has not read anything yet, its socket filled up to the brim), the rest
// must go out first, before the requests queued after it, through the
// writer goroutine: the broker receives every request intact and in order,
// and every send completes.
func TestLoneAsyncSendSocketFull(t *testing.T) {
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
	cfg := &connConfig{dialTimeout: 30 * time.Second, writeTimeout: 60 * time.Second, heartbeat: time.Hour,
		requestTimeout: time.Minute, backoffMin: 10 * time.Millisecond, backoffMax: time.Second,
		window: 64, maxReplyBody: 1 << 20, log: testLogger()}
	c := newBrokerConn(ln.Addr().String(), cfg)
	defer c.close(nil)
	var srv net.Conn
	select {
	case srv = <-accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("no connection")
	}
	defer srv.Close()
	<-c.ready

	// Fill the client's socket (send buffer and the broker's receive
	// buffer) with filler the broker will skip.
	c.mu.Lock()
	g := c.cur
	c.mu.Unlock()
	if g == nil || g.raw == nil {
		t.Fatal("no TCP generation")
	}
	filler := bytes.Repeat([]byte{'x'}, 4096)
	fill := 0
	for full := false; !full; {
		if err := g.raw.Write(func(fd uintptr) bool {
			n, err := syscall.Write(int(fd), filler)
			if n > 0 {
				fill += n
			}
			full = err != nil
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}

	const n = 20
	done := make(chan error, n)
	var want []byte
	var ops []int32
	for i := range n {
		cl := newCall()
		cl.kind = kindPut
		cl.onDone = func(cl *call) {
			if cl.err == nil && cl.code != protocol.StatusSuccess {
				cl.err = fmt.Errorf("code %d", cl.code)
			}
			done <- cl.err
		}
		d := &protocol.MessageData{Payload: bytes.Repeat([]byte{byte('a' + i)}, 10000+i)}
		if err := c.startPut(context.Background(), cl, c.deadlineFor(context.Background(), time.Minute), "t", 0, d, false); err != nil {
			t.Fatal(err)
		}
		want = protocol.AppendPutMessage(want, "t", 0, d, protocol.ChecksumNone, cl.opaque)
		ops = append(ops, cl.opaque)
		if i == 0 {
			c.mu.Lock()
			left := len(c.wbuf)
			c.mu.Unlock()
			if left == 0 && !c.writing {
				t.Log("the first send left nothing for the writer") // the socket drained meanwhile
			}
		}
	}

	// The broker reads: the filler, then every request intact and in order.
	got := make([]byte, fill+len(want))
	_ = srv.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(srv, got); err != nil {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
	if !bytes.Equal(got[:fill], bytes.Repeat([]byte{'x'}, fill)) {
		t.Fatal("filler damaged")
	}
	if !bytes.Equal(got[fill:], want) {
		t.Fatal("requests damaged or out of order")
	}
	// Answer them all: every send completes.
	var replies []byte
	for i, op := range ops {
		replies = protocol.AppendPutResult(replies, int64(i+1), 0, int64(i), op)
	}
	if _, err := srv.Write(replies); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a send never completed")
		}
	}
}
