package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// runHTTP starts the HTTP side of b on 127.0.0.1:0, closed at cleanup
// (before the broker, which registered its cleanup first).
func runHTTP(t testing.TB, b *brokertest.Broker, mod func(*httpapi.Options)) *httpapi.Server {
	t.Helper()
	opts := httpapi.Options{Addr: "127.0.0.1:0", Broker: b.Broker, ZK: b.Config.ZK, Token: "s3cret",
		MaxTopics: b.Config.System.MetricsMaxTopics, MaxLagSeries: b.Config.System.MetricsMaxLagSeries,
		LagInterval: b.Config.System.MetricsLagInterval}
	if mod != nil {
		mod(&opts)
	}
	hs, err := httpapi.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() })
	return hs
}

type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of family name whose labels include
// the given name=value pairs; ok=false when there is none.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func (s scrape) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in /metrics", name, labels)
	}
	return v
}

// Values move as puts and gets happen: per-topic messages and bytes in and
// out, request counters, the sampled latency histograms, the store's fsync
// and group-commit histograms and sizes.
func TestMetricsMoveWithTraffic(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{"orders": 2, "log-*": 1}})
	hs := runHTTP(t, b, nil)

	before := scrapeMetrics(t, hs.URL())
	if _, ok := before.value("metaq_messages_in_total", "topic", "orders"); ok {
		t.Fatal("orders has series before any traffic")
	}
	for _, name := range []string{"process_cpu_seconds_total", "go_goroutines", "metaq_connections", "metaq_store_segments", "metaq_broker_info", "metaq_store_disk_free_bytes", "metaq_delayed_messages", "metaq_tx_half_messages"} {
		if _, ok := before[name]; !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}

	const n = 200
	c := b.Dial()
	body := "0123456789"
	for i := 0; i < n; i++ {
		c.Put("orders", i%2, body, int32(i))
	}
	c.Put("log-app", 0, "x", 1)

	s := scrapeMetrics(t, hs.URL())
	if got := s.must(t, "metaq_messages_in_total", "topic", "orders"); got != n {
		t.Errorf("messages_in{orders} = %v, want %d", got, n)
	}
	if got := s.must(t, "metaq_bytes_in_total", "topic", "orders"); got != n*float64(len(body)) {
		t.Errorf("bytes_in{orders} = %v, want %d", got, n*len(body))
	}
	if got := s.must(t, "metaq_messages_in_total", "topic", "log-app"); got != 1 {
		t.Errorf("messages_in{log-app} = %v", got)
	}
	if got := s.must(t, "metaq_requests_total", "command", "put"); got != n+1 {
		t.Errorf("requests{put} = %v", got)
	}
	if got := s.must(t, "metaq_topic_messages", "topic", "orders"); got != n {
		t.Errorf("topic_messages{orders} = %v", got)
	}
	if got := s.must(t, "metaq_put_latency_seconds"); got < 3 { // 1 in 64 of 200 puts on one topic
		t.Errorf("put latency samples = %v, want >= 3", got)
	}
	if got := s.must(t, "metaq_store_fsync_seconds"); got < 1 {
		t.Errorf("fsync samples = %v", got)
	}
	if got := s.must(t, "metaq_store_group_commit_messages"); got < 1 {
		t.Errorf("group commit samples = %v", got)
	}
	if got := s.must(t, "metaq_connections"); got != 1 {
		t.Errorf("connections = %v, want 1", got)
	}

	// Gets: every message of partition 0, in gets of one message each.
	var got int
	for got < n/2 {
		c.Send(fmt.Sprintf("get orders group 0 %d 40 %d\r\n", got, got))
		r := c.Reply()
		recs := brokertest.Records(t, r.Body)
		if r.Kind != protocol.ReplyValue || len(recs) == 0 {
			t.Fatalf("get at %d: %+v", got, r)
		}
		got += len(recs)
	}
	s = scrapeMetrics(t, hs.URL())
	if v := s.must(t, "metaq_messages_out_total", "topic", "orders"); v != float64(got) {
		t.Errorf("messages_out{orders} = %v, want %d", v, got)
	}
	if v := s.must(t, "metaq_bytes_out_total", "topic", "orders"); v < float64(got*len(body)) {
		t.Errorf("bytes_out{orders} = %v, want >= %d", v, got*len(body))
	}
	if v := s.must(t, "metaq_get_latency_seconds"); v < 1 {
		t.Errorf("get latency samples = %v", v)
	}
	// A long poll shows as a waiter while parked.
	c2 := b.Dial()
	c2.Send(fmt.Sprintf("get orders group 1 %d 1024 7 60000\r\n", n/2))
	waitFor(t, "a parked get", func() bool {
		v, _ := scrapeMetrics(t, hs.URL()).value("metaq_long_poll_waiters")
		return v == 1
	})
	c.Put("orders", 1, body, 999)
	if r := c2.Reply(); r.Kind != protocol.ReplyValue || r.Opaque != 7 {
		t.Fatalf("long poll: %+v", r)
	}
}

// Topics beyond metricsMaxTopics are summed under topic="_other".
func TestMetricsTopicCap(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"t-*": 1}})
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.MaxTopics = 2 })
	c := b.Dial()
	for i := 0; i < 5; i++ {
		c.Put(fmt.Sprintf("t-%d", i), 0, "abc", int32(i))
	}
	s := scrapeMetrics(t, hs.URL())
	fam := s["metaq_messages_in_total"]
	if fam == nil || len(fam.Metric) != 3 {
		t.Fatalf("messages_in series: %v", fam)
	}
	if v := s.must(t, "metaq_messages_in_total", "topic", "_other"); v != 3 {
		t.Errorf("_other = %v, want 3", v)
	}
}

// Consumer lag per group/topic/partition comes from the offsets committed in
// ZooKeeper and the broker's max offsets; members per group too.
func TestMetricsConsumerLag(t *testing.T) {
	zkAddr := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zkAddr, BrokerID: 3, Topics: map[string]int{"orders": 2}})
	hs := runHTTP(t, b, nil)
	c := b.Dial()
	for i := 0; i < 10; i++ {
		c.Put("orders", 0, "m", int32(i))
	}
	c.Put("orders", 1, "m", 99)
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	ctx := context.Background()
	// The group consumed 4 messages of partition 0 (an offset is the next queue offset).
	if err := zc.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 3, Partition: 0}, zkmeta.Offset{MsgID: -1, Offset: 4}); err != nil {
		t.Fatal(err)
	}
	if err := zc.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 3, Partition: 1}, zkmeta.Offset{MsgID: -1, Offset: 0}); err != nil {
		t.Fatal(err)
	}
	// Another broker's partition is not this broker's business.
	if err := zc.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 4, Partition: 0}, zkmeta.Offset{MsgID: -1, Offset: 0}); err != nil {
		t.Fatal(err)
	}
	hs.RefreshLag()
	var s scrape
	waitFor(t, "lag series", func() bool {
		hs.RefreshLag()
		s = scrapeMetrics(t, hs.URL())
		_, ok := s.value("metaq_consumer_lag_messages", "group", "billing", "partition", "1")
		return ok
	})
	max0 := s.must(t, "metaq_topic_messages", "topic", "orders") - 1 // partition 0 holds all but one
	if v := s.must(t, "metaq_consumer_lag_messages", "group", "billing", "topic", "orders", "partition", "0"); v != max0-4 {
		t.Errorf("lag p0 = %v, want %v", v, max0-4)
	}
	if v := s.must(t, "metaq_consumer_lag_messages", "group", "billing", "topic", "orders", "partition", "1"); v != 1 {
		t.Errorf("lag p1 = %v, want 1", v)
	}
	if v := s.must(t, "metaq_consumer_group_lag_messages", "group", "billing", "topic", "orders"); v != max0-4+1 {
		t.Errorf("group lag = %v", v)
	}
	if fam := s["metaq_consumer_lag_messages"]; len(fam.Metric) != 2 {
		t.Errorf("%d lag series, want 2 (broker 4's partition is not ours)", len(fam.Metric))
	}
	if v := s.must(t, "metaq_consumer_group_members", "group", "billing"); v != 0 {
		t.Errorf("members = %v, want 0", v)
	}
	// Every metric docs/alerts.yml uses exists (but the replication one: no
	// [replication] here; TestMetricsMatchDocs scrapes a slave too).
	rules, err := os.ReadFile("../../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`metaq_[a-z_]+`).FindAllString(string(rules), -1) {
		if _, ok := s[name]; !ok && name != "metaq_replication_slave_lag_bytes" {
			t.Errorf("docs/alerts.yml uses %s, which /metrics does not export", name)
		}
	}
	// The lag moves with puts between two reads of ZooKeeper.
	c.Put("orders", 1, "m", 100)
	if v := scrapeMetrics(t, hs.URL()).must(t, "metaq_consumer_lag_messages", "group", "billing", "partition", "1"); v != 2 {
		t.Errorf("lag p1 after a put = %v, want 2", v)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
