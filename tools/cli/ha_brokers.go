package cli

import (
	"context"
	"strconv"
)

// replicationColumns fills r's replication columns from the node's `stats`
// (replication_role, replication_epoch, replication_lag_bytes/_ms).
func (app *App) replicationColumns(ctx context.Context, r *brokerRow) {
	st, err := app.admin().Stats(ctx, r.Address, "")
	if err != nil {
		return
	}
	for _, s := range st {
		v := s.Value
		n, _ := strconv.ParseInt(v, 10, 64)
		switch s.Key {
		case "replication_role":
			r.Serving = v
		case "replication_epoch":
			r.Epoch = n
		case "replication_lag_bytes":
			r.LagBytes = n
		case "replication_lag_ms":
			r.LagMs = n
		}
	}
}
