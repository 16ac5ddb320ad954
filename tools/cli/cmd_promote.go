package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/zkmeta"
)

// newBrokerPromoteCommand is `metaq broker promote <brokerId> <slaveId>`: a planned switch of a
// broker group's master (docs/replication.md, "Operations").
func newBrokerPromoteCommand(app *App) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "promote <brokerId> <slaveId>",
		Short: "Make a slave the master of its broker group (planned switch, autoFailover=true)",
		Long: `Hand a broker group's master role to one of its slaves without losing an acknowledged
message (docs/replication.md, "Operations"). The group must run with [replication]
autoFailover=true. slaveId is the slave's [slave] slaveId; m (or "-- -1") names the node
configured as master (to switch back to it).

The command writes /brokers/ids/<brokerId>/promote in ZooKeeper. The current master then stops
acknowledging puts (they are answered 503 and producers retry), waits until the slave has made
its whole log durable, and gives up the master node; the election picks the named slave, which
takes over under a new epoch; the former master follows it. Puts are paused only for the
switch. The command waits (--timeout) until the slave is master and prints how long it took.`,
		Example: `  metaq broker promote 1 0      # slave 0 of broker 1 becomes master
  metaq broker promote 1 m      # back to the node configured as master (or: promote -- 1 -1)`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.Atoi(args[0])
			if err != nil || id < 0 {
				return usageErr("brokerId %q: want a non-negative integer", args[0])
			}
			name := args[1]
			if name != "m" {
				k, err := strconv.Atoi(name)
				if err != nil || k < -1 {
					return usageErr("slaveId %q: want -1 (the configured master) or a slave number >= 0", args[1])
				}
				name = zkmeta.ReplicaName(k)
			}
			return runPromote(cmd.Context(), app, id, name, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the switch")
	return cmd
}

func runPromote(ctx context.Context, app *App, id int, name string, timeout time.Duration) error {
	zc, err := app.zkClient(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := app.opCtx(ctx)
	g, err := zc.HAGroup(rctx, id)
	var reps []zkmeta.ReplicaState
	if err == nil {
		reps, err = zc.ReadReplicas(rctx, id)
	}
	cancel()
	if err != nil {
		return app.zkUnreachable(err)
	}
	var target *zkmeta.ReplicaState
	for i := range reps {
		if reps[i].Name == name {
			target = &reps[i]
		}
	}
	switch {
	case len(reps) == 0:
		return notFoundErr("broker %d has no replica states in ZooKeeper: is it a group with [replication] autoFailover=true?", id)
	case target == nil:
		return notFoundErr("broker %d: replica %s is not running (running: %s)", id, name, replicaNames(reps))
	case g.Master == "":
		return unavailableErr("broker %d has no master right now (an election is under way?); try again", id)
	case g.Master == target.Addr:
		fmt.Fprintf(app.Stdout, "broker %d: %s (%s) is already master (epoch %d)\n", id, name, target.Addr, g.Epoch.Value)
		return nil
	case target.Epoch != g.Epoch.Value:
		return unavailableErr("broker %d: %s holds epoch %d, the group is at epoch %d: it has not caught up with the master yet", id, name, target.Epoch, g.Epoch.Value)
	}
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	if err := zc.RequestPromotion(wctx, id, name); err != nil {
		return app.zkUnreachable(err)
	}
	fmt.Fprintf(app.Stderr, "broker %d: asked master %s (epoch %d) to hand over to %s (%s)\n", id, g.Master, g.Epoch.Value, name, target.Addr)
	for {
		ng, err := zc.HAGroup(wctx, id)
		if err == nil && ng.Master == target.Addr && ng.Epoch.Value > g.Epoch.Value {
			fmt.Fprintf(app.Stdout, "broker %d: %s (%s) is master under epoch %d; switch took %s\n",
				id, name, target.Addr, ng.Epoch.Value, time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-wctx.Done():
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = zc.ClearPromotion(cctx, id)
			ccancel()
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return unavailableErr("broker %d: %s did not become master within %s (request withdrawn; the master resumes if it did not resign)", id, name, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func replicaNames(reps []zkmeta.ReplicaState) string {
	s := ""
	for i, r := range reps {
		if i > 0 {
			s += ", "
		}
		s += r.Name
	}
	return s
}
