package httpapi_test

import (
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol/trace"
)

// The broker's own trace events are counted on /metrics
// (metaq_trace_events_total{result}, docs/observability.md): what its
// writer stored in %TRACE%, dropped and lost.
func TestMetricsTraceEvents(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	hs := runHTTP(t, b, nil)
	s := scrapeMetrics(t, hs.URL())
	for _, r := range []string{"written", "dropped", "failed"} {
		if v := s.must(t, "metaq_trace_events_total", "result", r); v != 0 {
			t.Fatalf("%s = %v before any event", r, v)
		}
	}
	for i := range 3 {
		b.Server.TraceEvent(&trace.Event{Type: trace.Push, MsgID: int64(100 + i), Topic: "test", Time: 1, OK: true, Offset: int64(i)})
	}
	waitFor(t, "3 trace events written", func() bool {
		return scrapeMetrics(t, hs.URL()).must(t, "metaq_trace_events_total", "result", "written") == 3
	})
}
