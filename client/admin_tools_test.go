package client

import (
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// StatsBody returns a reply as it came, STATS lines or not (`stats config` is the broker's
// server.ini); FetchAddr picks a broker's master, else its lowest slave.
func TestAdminStatsBodyAndFetchAddr(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"s": 1}})
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := ctxT(t, 10*time.Second)
	body, err := a.StatsBody(ctx, b.Addr, "")
	if err != nil {
		t.Fatal(err)
	}
	if stats, err := protocol.ParseStats(body); err != nil || len(stats) == 0 {
		t.Fatalf("stats body %q: %v", body, err)
	}
	body, err = a.StatsBody(ctx, b.Addr, "config")
	if err != nil || !strings.Contains(string(body), "[system]") {
		t.Fatalf("stats config: %v\n%s", err, body)
	}
	if _, err := a.Stats(ctx, b.Addr, "config"); err == nil {
		t.Fatal("Stats parsed a server.ini as STATS lines")
	}

	for _, tc := range []struct {
		b    zkmeta.BrokerInfo
		want string
	}{
		{zkmeta.BrokerInfo{Master: "m:1", Slaves: map[int]string{0: "s:0"}}, "m:1"},
		{zkmeta.BrokerInfo{Slaves: map[int]string{2: "s:2", 1: "s:1"}}, "s:1"},
		{zkmeta.BrokerInfo{}, ""},
	} {
		if got := FetchAddr(tc.b); got != tc.want {
			t.Errorf("FetchAddr(%+v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}
