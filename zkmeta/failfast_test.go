package zkmeta_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// refusingAddr is a loopback address nothing listens on.
func refusingAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// With FailFast, Connect gives up with ErrRefused once every server refused, long before its
// ConnectionTimeout (a minute here: without FailFast it would return ErrNotConnected alone, after
// the timeout); a name that does not resolve counts as a refusal.
func TestConnectFailFast(t *testing.T) {
	t.Parallel()
	for _, servers := range []string{
		refusingAddr(t),
		refusingAddr(t) + "," + refusingAddr(t) + "," + refusingAddr(t) + "/chroot",
		refusingAddr(t) + ",no-such-host.invalid:2181",
	} {
		_, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: servers, SessionTimeout: 2 * time.Second,
			ConnectionTimeout: time.Minute, FailFast: true, Logger: newTestLog(t)})
		if !errors.Is(err, zkmeta.ErrRefused) || !errors.Is(err, zkmeta.ErrNotConnected) {
			t.Errorf("Connect(%s) = %v, want ErrRefused and ErrNotConnected", servers, err)
		}
	}
}

// One server that answers is enough: FailFast only gives up when every server refused.
func TestConnectFailFastOneServerUp(t *testing.T) {
	t.Parallel()
	zkAddr := zktest.Server(t)
	c, err := zkmeta.Connect(ctxT(t, time.Minute), zkmeta.Config{ConnectString: refusingAddr(t) + "," + refusingAddr(t) + "," + zkAddr,
		SessionTimeout: 2 * time.Second, ConnectionTimeout: time.Minute, FailFast: true, Logger: newTestLog(t)})
	if err != nil {
		t.Fatalf("Connect with one live server of three = %v", err)
	}
	defer c.Close()
	if !c.Connected() {
		t.Fatal("not connected")
	}
}
