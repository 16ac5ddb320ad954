package httpapi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// A reload that stops accepting topics keeps the per-topic counters
// monotonic (docs/observability.md, "Cardinality"): neither a dropped
// topic's own series nor the "_other" sum it was part of goes down, and a
// topic accepted again counts on from where it was.
func TestMetricsCountersMonotonicAcrossReload(t *testing.T) {
	o := brokertest.Options{Topics: map[string]int{"a": 1, "b": 1, "c": 1}}
	b := brokertest.RunBroker(t, o)
	hs := runHTTP(t, b, func(opts *httpapi.Options) { opts.MaxTopics = 1 }) // "a" has its series, "b" and "c" are "_other"
	c := b.Dial()
	traffic := func() {
		for _, topic := range []string{"a", "b", "c"} {
			if _, ok := b.Server.LookupTopic(topic); !ok {
				continue
			}
			c.Put(topic, 0, "message", 1)
			c.Send("get " + topic + " g 0 0 65536 1\r\n")
			c.Reply()
		}
	}
	reload := func(topics map[string]int) {
		t.Helper()
		o.Topics, o.Dir = topics, b.Dir
		if err := os.WriteFile(filepath.Join(b.Dir, "server.ini"), []byte(brokertest.INI(o)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := b.ReloadTopics(); err != nil {
			t.Fatal(err)
		}
	}
	counters := []string{"metaq_messages_in_total", "metaq_bytes_in_total", "metaq_messages_out_total", "metaq_bytes_out_total",
		"metaq_topic_put_errors_total", "metaq_topic_get_requests_total", "metaq_topic_get_misses_total"}
	last := map[string]float64{}
	check := func(when string) {
		t.Helper()
		s := scrapeMetrics(t, hs.URL())
		for _, name := range counters {
			for _, topic := range []string{"a", "_other"} {
				v, ok := s.value(name, "topic", topic)
				k := name + "{" + topic + "}"
				if prev, seen := last[k]; seen && (!ok || v < prev) {
					t.Errorf("%s: %s went from %v to %v (present %v)", when, k, prev, v, ok)
				}
				if ok {
					last[k] = v
				}
			}
		}
	}
	traffic()
	check("before the reload")
	if last["metaq_bytes_in_total{_other}"] == 0 || last["metaq_topic_get_requests_total{a}"] == 0 {
		t.Fatalf("no traffic counted: %v", last)
	}
	reload(map[string]int{"c": 1}) // "a" and "b" no longer accepted
	check("after dropping a and b")
	traffic()
	check("after more traffic on c")
	reload(map[string]int{"a": 1, "b": 1, "c": 1})
	check("after accepting a and b again")
	traffic()
	check("after more traffic on a, b and c")
}
