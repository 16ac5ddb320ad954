package cli

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
)

func init() { AddCommand(newHealthCommand) }

// healthCheck is one line of `metaq health`.
type healthCheck struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type healthReport struct {
	Healthy bool          `json:"healthy"`
	Checks  []healthCheck `json:"checks"`
}

func newHealthCommand(app *App) *cobra.Command {
	var servers []string
	var httpURL string
	var minFree float64
	cmd := &cobra.Command{
		Use:   "health [--server host:port …]",
		Short: "Check brokers for cron jobs and load balancers (exit code, --json)",
		Long: `Check the health of brokers and report one line per check (or JSON with --json):

  answers    the broker answers stats over its text protocol within --connect-timeout
  store      no sticky write error refuses appends (disk failure; restart after fixing it)
  disk       dataPath's file system has at least --min-disk-free percent free
  http       (with --http) the HTTP side answers /healthz

Without --server, every broker registered in ZooKeeper (--zk) is checked, and ZooKeeper
itself; with --server only those brokers are, and ZooKeeper is not needed (a load balancer's
probe on the broker's host).

Exit codes: 0 every check passed, 1 a check failed (also "brokers": no broker registered in
ZooKeeper), 4 ZooKeeper unreachable, 2 bad flags.`,
		Example: `  metaq health --server 127.0.0.1:8123
  metaq health --zk zk1:2181 --json
  metaq health --server 127.0.0.1:8123 --http http://127.0.0.1:8120 --min-disk-free 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if minFree < 0 || minFree > 100 {
				return usageErr("--min-disk-free must be 0..100 (percent)")
			}
			ctx := cmd.Context()
			rep := &healthReport{Healthy: true}
			add := func(c healthCheck) {
				rep.Checks = append(rep.Checks, c)
				rep.Healthy = rep.Healthy && c.OK
			}
			targets := splitList(servers)
			if len(targets) == 0 {
				zc, err := app.zkClient(ctx)
				if err != nil {
					return err
				}
				octx, cancel := app.opCtx(ctx)
				bs, err := zc.Brokers(octx)
				cancel()
				if err != nil {
					return unavailableErr("reading brokers from ZooKeeper: %v", err)
				}
				add(healthCheck{Check: "zookeeper", Target: app.ZK, OK: true, Detail: fmt.Sprintf("%d broker id(s) registered", len(bs))})
				for _, b := range bs {
					if a := client.FetchAddr(b); a != "" {
						targets = append(targets, a)
					} else {
						add(healthCheck{Check: "answers", Target: "broker " + strconv.Itoa(b.ID), Detail: "no master or slave registered"})
					}
				}
				if len(bs) == 0 {
					add(healthCheck{Check: "brokers", Target: app.ZK, Detail: "no broker registered"})
				}
			}
			for _, addr := range targets {
				for _, c := range checkBroker(ctx, app, addr, minFree) {
					add(c)
				}
			}
			if httpURL != "" {
				add(checkHTTP(ctx, app, strings.TrimRight(httpURL, "/")))
			}
			if app.JSON {
				if err := app.printJSON(rep); err != nil {
					return err
				}
			} else {
				for _, c := range rep.Checks {
					st := "OK  "
					if !c.OK {
						st = "FAIL"
					}
					fmt.Fprintf(app.Stdout, "%s %-9s %-22s %s\n", st, c.Check, c.Target, c.Detail)
				}
			}
			if !rep.Healthy {
				return silentExit{code: ExitFailure}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&servers, "server", nil, "broker host:port to check (repeatable); default every broker in ZooKeeper")
	f.StringVar(&httpURL, "http", "", "also check the HTTP side at this base URL (http://host:8120)")
	f.Float64Var(&minFree, "min-disk-free", 5, "fail when dataPath's file system has less free space than this percentage")
	return cmd
}

// splitList splits comma-separated values and drops empty and repeated ones.
func splitList(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

func checkBroker(ctx context.Context, app *App, addr string, minFree float64) []healthCheck {
	octx, cancel := app.opCtx(ctx)
	defer cancel()
	stats, err := app.admin().Stats(octx, addr, "")
	if err != nil {
		return []healthCheck{{Check: "answers", Target: addr, Detail: errText(err)}}
	}
	kv := map[string]string{}
	for _, s := range stats {
		kv[s.Key] = s.Value
	}
	out := []healthCheck{{Check: "answers", Target: addr, OK: true,
		Detail: fmt.Sprintf("broker %s, %s, up %ss, %s connection(s)", kv["broker_id"], kv["version"], kv["uptime"], kv["curr_connections"])}}
	if we := kv["write_error"]; we != "" {
		out = append(out, healthCheck{Check: "store", Target: addr, Detail: "appends refused: " + we})
	} else {
		out = append(out, healthCheck{Check: "store", Target: addr, OK: true, Detail: "flush " + kv["flush_mode"] + ", " + kv["total_messages"] + " messages"})
	}
	free, err1 := strconv.ParseFloat(kv["disk_free"], 64)
	total, err2 := strconv.ParseFloat(kv["disk_total"], 64)
	if err1 == nil && err2 == nil && total > 0 {
		pct := free * 100 / total
		out = append(out, healthCheck{Check: "disk", Target: addr, OK: pct >= minFree,
			Detail: fmt.Sprintf("%.1f%% free (%.1f GiB of %.1f GiB), minimum %.0f%%", pct, free/(1<<30), total/(1<<30), minFree)})
	}
	return out
}

func checkHTTP(ctx context.Context, app *App, base string) healthCheck {
	c := healthCheck{Check: "http", Target: base}
	octx, cancel := context.WithTimeout(ctx, app.ConnectTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(octx, "GET", base+"/healthz", nil)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	resp.Body.Close()
	c.OK = resp.StatusCode == 200
	c.Detail = fmt.Sprintf("/healthz %s in %v", resp.Status, time.Since(start).Round(time.Millisecond))
	return c
}
