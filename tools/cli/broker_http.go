package cli

import (
	"log/slog"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// startBrokerHTTP starts the broker's HTTP side (dashboardHttpPort: /metrics,
// /api/v1/, the dashboard) and returns what stops it. A port that cannot be
// bound is logged and the broker serves without it: the text protocol is
// what clients depend on (docs/observability.md).
func startBrokerHTTP(b *broker.Broker, log *slog.Logger) (stop func()) {
	hs, err := httpapi.ForBroker(b, log)
	if err != nil {
		log.Error("the HTTP side (dashboardHttpPort) is not available; the broker serves without it", "err", err)
		return func() {}
	}
	if hs == nil {
		return func() {}
	}
	return func() { _ = hs.Close() }
}
