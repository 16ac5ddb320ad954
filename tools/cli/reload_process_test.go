package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// A real `metaq broker` process: `metaq broker reload --server` (SIGHUP)
// applies a changed [topic=…] section without a restart, and the HTTP side
// serves /metrics on dashboardHttpPort.
func TestBrokerReloadProcess(t *testing.T) {
	dir := t.TempDir()
	httpPort := zktest.FreePort(t)
	path, addr := writeINI(t, dir, false, "", 0, "")
	ini, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// writeINI turns the HTTP side off; give it a port, and a topic of 2 partitions.
	text := strings.Replace(string(ini), "dashboardHttpPort=0\n", fmt.Sprintf("dashboardHttpPort=%d\n", httpPort), 1)
	text = strings.Replace(text, "[topic=*]\n", "", 1) + "[topic=grow]\nnumPartitions=2\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBrokerProc(t, addr, "-c", path)
	c := brokertest.Dial(t, addr)
	c.Send("put grow 3 1 0 1\r\nx")
	if r := c.Reply(); r.Code != 500 {
		t.Fatalf("put to partition 3 of a 2-partition topic: %+v", r)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(text, "numPartitions=2\n", "numPartitions=4\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := runCLI(t, context.Background(), "", "", "broker", "reload", "--server", addr); code != 0 {
		t.Fatalf("broker reload: %d %s %s", code, out, errs)
	}
	zktest.Eventually(t, 20*time.Second, func() bool {
		c.Send("put grow 3 1 0 2\r\ny")
		return c.Reply().Code == 200
	}, "partition 3 accepted after the reload")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
}
