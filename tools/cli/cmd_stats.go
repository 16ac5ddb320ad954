package cli

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/protocol"
)

func newStatsCommand(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "stats <host:port|brokerId> [item]",
		Short: "Print a broker's statistics (MetaQ's stats command)",
		Long: `Print a broker's statistics. The broker is an address (host:port) or a broker id looked up
in ZooKeeper. Items: none (system counters), topics, offsets, realtime, config (the broker's
server.ini), help, or a topic name.`,
		Example: `  metaq stats 127.0.0.1:8123
  metaq stats 0 topics
  metaq stats 127.0.0.1:8123 test --json`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: firstArg(app.completeBrokers),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			addr, err := app.resolveBrokerArg(ctx, args[0])
			if err != nil {
				return err
			}
			item := ""
			if len(args) == 2 {
				item = args[1]
				if strings.ContainsAny(item, " \r\n\t") || item == "" {
					return usageErr("bad stats item %q", item)
				}
				if _, err := strconv.Atoi(item); err == nil {
					return usageErr("stats item %q is a number; a topic named with digits cannot be asked through the CLI", item)
				}
			}
			body, err := app.admin().StatsBody(ctx, addr, item)
			if err != nil {
				return err
			}
			stats, perr := protocol.ParseStats(body)
			if perr != nil { // not a STATS body (stats config): print it as is
				if app.JSON {
					return app.printJSON(map[string]string{"broker": addr, "item": item, "body": string(body)})
				}
				_, err := app.Stdout.Write(body)
				return err
			}
			if app.JSON {
				m := make(map[string]string, len(stats))
				for _, s := range stats {
					m[s.Key] = s.Value
				}
				return app.printJSON(m)
			}
			tw := app.table("KEY", "VALUE")
			for _, s := range stats {
				row(tw, s.Key, s.Value)
			}
			return tw.Flush()
		},
	}
}
