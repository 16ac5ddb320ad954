package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/conf"
)

// EnvDashboardToken is the default of `metaq dashboard --token`.
const EnvDashboardToken = "METAQ_DASHBOARD_TOKEN"

func init() { AddCommand(newDashboardCommand) }

func newDashboardCommand(app *App) *cobra.Command {
	var listen, token string
	cmd := &cobra.Command{
		Use:   "dashboard [--listen host:port]",
		Short: "Serve the web dashboard and the JSON API for a cluster, without a broker",
		Long: `Serve the dashboard (/) and the JSON API (/api/v1/) of the cluster in ZooKeeper (--zk,
--zk-root), as every broker does on its dashboardHttpPort, from a machine that runs no broker.
It reads ZooKeeper and asks each broker over its text protocol (stats, offset, query). There is no
/metrics here: scrape the brokers (docs/observability.md).

Offset resets need --token (or ` + EnvDashboardToken + `); without one the dashboard is read-only.
Runs until SIGINT/SIGTERM.`,
		Example: `  metaq dashboard --zk 10.0.0.5:2181 --listen 0.0.0.0:8120
  METAQ_DASHBOARD_TOKEN=s3cret metaq dashboard`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = app.getenv(EnvDashboardToken)
			}
			log := slog.New(slog.NewTextHandler(app.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			if app.Verbose {
				log = slog.New(slog.NewTextHandler(app.Stderr, nil))
			}
			sigs, stop := app.signals()
			defer stop()
			hs, err := httpapi.Start(httpapi.Options{
				Addr:  listen,
				ZK:    conf.ZK{Enable: true, Connect: app.ZK, Root: app.ZKRoot, SessionTimeout: conf.Default(0).ZK.SessionTimeout, ConnectionTimeout: app.ConnectTimeout, Auth: app.sec.zkAuth},
				Token: token, Logger: log,
			})
			if err != nil {
				return err
			}
			defer hs.Close()
			fmt.Fprintf(app.Stdout, "metaq dashboard on %s (ZooKeeper %s%s)\n", hs.URL(), app.ZK, map[bool]string{true: ", read-only", false: ""}[token == ""])
			select {
			case <-sigs:
			case <-cmd.Context().Done():
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8120", "address to serve on")
	cmd.Flags().StringVar(&token, "token", "", "dashboardToken needed by offset resets (default $"+EnvDashboardToken+"; none = read-only)")
	return cmd
}
