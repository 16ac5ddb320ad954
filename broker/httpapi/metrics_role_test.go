package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// metaq_broker_info's role label follows the node's replication role: a
// slave says slave, and the same process says master once promoted
// (docs/observability.md).
func TestMetricsBrokerInfoRole(t *testing.T) {
	// A slave of a master that does not exist: the follower keeps retrying.
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true,
		ExtraINI: "\n[slave]\nslaveId=0\n[replication]\nmasterAddr=127.0.0.1:1\n"})
	hs := runHTTP(t, b, nil)
	s := scrapeMetrics(t, hs.URL())
	if _, ok := s.value("metaq_broker_info", "role", "slave"); !ok {
		t.Fatalf("a slave's metaq_broker_info: %v, want role=\"slave\"", s["metaq_broker_info"].Metric)
	}
	if v := s.must(t, "metaq_replication_is_master"); v != 0 {
		t.Fatalf("metaq_replication_is_master = %v on a slave", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.HA.Promote(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s = scrapeMetrics(t, hs.URL())
	if _, ok := s.value("metaq_broker_info", "role", "master"); !ok || len(s["metaq_broker_info"].Metric) != 1 {
		t.Fatalf("after the promotion metaq_broker_info: %v, want one series with role=\"master\"", s["metaq_broker_info"].Metric)
	}
}
