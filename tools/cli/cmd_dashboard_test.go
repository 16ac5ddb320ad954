package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// `metaq dashboard` serves the cluster's JSON API (and pages) from ZooKeeper
// without a broker of its own.
func TestDashboardCommand(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"orders": 2}, false)
	addr := fmt.Sprintf("127.0.0.1:%d", zktest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, ctx, c.zk, "", "dashboard", "--listen", addr)
		done <- code
	}()
	zktest.Eventually(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/api/v1/topics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ts []httpapi.TopicSummary
		return json.NewDecoder(resp.Body).Decode(&ts) == nil && len(ts) == 1 && ts[0].Topic == "orders" && ts[0].Partitions == 2
	}, "dashboard serving topic orders")
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("cluster page: %v %v", err, resp)
	}
	resp.Body.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("dashboard exited %d", code)
	}
}
