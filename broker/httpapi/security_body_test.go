package httpapi_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// With [security], a signed request's body is read whole before its
// signature is checked, so before anyone knows who sent it. It is bounded
// by maxMessageSize (a larger Content-Length is refused unread) and reserved
// from maxPendingPutBytes before it is read: unauthenticated clients that
// send part of a body and stop cannot make the broker hold more than the
// budget.
func TestSignedBodiesWithinPutBudget(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.ini")
	h, _ := auth.HashSecret("pw", 4)
	if err := os.WriteFile(users, []byte("[alice]\nsecret = "+h+"\npublish = *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// maxMessageSize is brokertest's 512 KiB.
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"test": 1},
		ExtraINI: fmt.Sprintf("maxPendingPutBytes=1048576\n\n[security]\nusersFile=%s\nanonymous=none\n", users)})
	sec, err := httpapi.BrokerSecurity(b.Broker)
	if err != nil {
		t.Fatal(err)
	}
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.Security = sec })
	send := func(contentLength, sent int) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", hs.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hdr := "POST /api/v1/topics/test/messages HTTP/1.1\r\nHost: x\r\nContent-Length: " + fmt.Sprint(contentLength) + "\r\n" +
			"Authorization: " + auth.SignatureScheme + " Credential=nobody, Timestamp=" + fmt.Sprint(time.Now().Unix()) +
			", Signature=" + strings.Repeat("00", 32) + "\r\n\r\n"
		if _, err := c.Write([]byte(hdr)); err != nil {
			t.Fatal(err)
		}
		// A server that does not read (yet) may block the writes: that is
		// the point.
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		chunk := make([]byte, 64<<10)
		for n := 0; n < sent; n += len(chunk) {
			if _, err := c.Write(chunk[:min(len(chunk), sent-n)]); err != nil {
				break
			}
		}
		return c
	}

	// Beyond maxMessageSize: 413 before the body is read.
	c := send(8000000, 0)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("signed body of 8000000 bytes: %d, want 413", resp.StatusCode)
	}

	// Within it: 24 half-sent bodies of 500000 bytes, against a budget of
	// 1 MiB (one body and the publish handler's copy of it).
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const conns = 24
	for i := 0; i < conns; i++ {
		send(500000, 400000)
	}
	time.Sleep(500 * time.Millisecond) // let the server read what it will
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d KiB for %d unauthenticated half-sent bodies", grew>>10, conns)
	if grew > 4<<20 {
		t.Fatalf("heap grew by %d KiB holding unauthenticated request bodies (maxPendingPutBytes = 1 MiB)", grew>>10)
	}
}
