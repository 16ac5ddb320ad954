package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

type brokerRow struct {
	ID      int    `json:"id"`
	Role    string `json:"role"` // master, slave<n>
	Address string `json:"address"`
	Up      bool   `json:"up"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Replication (docs/replication.md), from the node's stats: the role it
	// serves in, its epoch, and (slaves) how far behind its master it is.
	Serving  string `json:"serving,omitempty"`
	Epoch    int64  `json:"epoch"`
	LagBytes int64  `json:"lagBytes"`
	LagMs    int64  `json:"lagMs"`
}

func newBrokersCommand(app *App) *cobra.Command {
	var noCheck bool
	cmd := &cobra.Command{
		Use:   "brokers",
		Short: "List the brokers registered in ZooKeeper and whether they answer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			bs, err := app.brokerList(ctx)
			if err != nil {
				return err
			}
			rows := []brokerRow{}
			for _, b := range bs {
				if b.Master != "" {
					rows = append(rows, brokerRow{ID: b.ID, Role: "master", Address: b.Master})
				}
				for _, id := range slices.Sorted(maps.Keys(b.Slaves)) {
					rows = append(rows, brokerRow{ID: b.ID, Role: fmt.Sprintf("slave%d", id), Address: b.Slaves[id]})
				}
			}
			if !noCheck {
				for i := range rows {
					r := &rows[i]
					v, err := app.admin().Version(ctx, r.Address)
					r.Version, r.Up = strings.TrimSpace(v), err == nil
					if err != nil {
						r.Error = errText(err)
						continue
					}
					app.replicationColumns(ctx, r) // ha_brokers.go
				}
			}
			return printList(app, rows, "no broker registered", func() error {
				tw := app.table("ID", "ROLE", "ADDRESS", "STATUS", "VERSION", "SERVING", "EPOCH", "LAG BYTES", "LAG MS")
				for _, r := range rows {
					status := "up"
					switch {
					case noCheck:
						status = "-"
					case !r.Up:
						status = "DOWN"
					}
					lagB, lagMs := "-", "-"
					if strings.HasPrefix(r.Serving, "slave") {
						lagB, lagMs = fmt.Sprint(r.LagBytes), fmt.Sprint(r.LagMs)
					}
					row(tw, r.ID, r.Role, r.Address, status, dash(r.Version), dash(r.Serving), r.Epoch, lagB, lagMs)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&noCheck, "no-check", false, "do not connect to the brokers (only read ZooKeeper)")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
