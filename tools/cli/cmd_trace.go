package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

func init() { AddCommand(newTraceCommand) }

func newTraceCommand(app *App) *cobra.Command {
	var broker string
	var byKey bool
	var maxNum int
	cmd := &cobra.Command{
		Use:   "trace <msgId> | trace --key <topic> <key>",
		Short: "Show a message's trace: who produced it, where it was stored, who consumed it, when",
		Long: `Show the timeline of a message from its trace records (the %TRACE% topic, written by producers
and consumers running with tracing on: --trace, Config.Trace): the send, the store, every
group's and consumer's handler calls with their cost and result, retries and dead letters,
in time order. The message id names its broker; --key finds a topic's messages by key
on every broker serving the topic. --json prints the events as JSON (docs/trace.md).`,
		Example: `  metaq trace 281474976710912
  metaq trace --key orders order-4711 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if byKey {
				if len(args) != 2 {
					return usageErr("usage: metaq trace --key <topic> <key>")
				}
			} else if len(args) != 1 {
				return usageErr("usage: metaq trace <msgId>  (or --key <topic> <key>)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if byKey {
				return app.traceKey(cmd.Context(), args[0], args[1], broker, maxNum)
			}
			return app.traceID(cmd.Context(), args[0], broker)
		},
	}
	cmd.Flags().BoolVar(&byKey, "key", false, "find the messages of <topic> carrying <key>")
	cmd.Flags().StringVar(&broker, "broker", "", "ask this broker (host:port) instead of looking it up in ZooKeeper")
	cmd.Flags().IntVar(&maxNum, "max", 32, "with --key: most messages to show")
	return cmd
}

func (a *App) traceID(ctx context.Context, arg, addr string) error {
	id, err := strconv.ParseInt(arg, 0, 64)
	if err != nil || id < 0 {
		return usageErr("bad message id %q: want a non-negative integer", arg)
	}
	if addr == "" {
		bid, _ := protocol.SplitMsgID(id)
		if addr, err = a.brokerByID(ctx, bid); err != nil {
			return err
		}
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	mt, err := a.admin().Trace(octx, addr, id)
	if err != nil {
		return err
	}
	if !mt.Found && len(mt.Events) == 0 {
		return notFoundErr("message %d: no record and no trace on broker %s", id, addr)
	}
	if a.JSON {
		return a.printJSON(mt)
	}
	return a.printTrace(mt)
}

func (a *App) traceKey(ctx context.Context, topic, key, addr string, maxNum int) error {
	if !protocol.ValidName(topic) {
		return usageErr("bad topic name %q", topic)
	}
	if key == "" || strings.ContainsAny(key, " \r\n\t") {
		return usageErr("bad key %q: keys are single words", key)
	}
	addrs := []string{addr}
	if addr == "" {
		var err error
		if addrs, err = a.topicBrokerAddrs(ctx, topic); err != nil {
			return err
		}
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	mts, err := a.admin().TraceKey(octx, addrs, topic, key, maxNum)
	if err != nil {
		return err
	}
	if len(mts) == 0 {
		return notFoundErr("no message or trace with key %s in topic %s", key, topic)
	}
	if a.JSON {
		return a.printJSON(mts)
	}
	for i, mt := range mts {
		if i > 0 {
			fmt.Fprintln(a.Stdout)
		}
		if err := a.printTrace(mt); err != nil {
			return err
		}
	}
	return nil
}

// printTrace prints a timeline as a table.
func (a *App) printTrace(mt *client.MessageTrace) error {
	bid, phys := protocol.SplitMsgID(mt.MsgID)
	switch {
	case phys >= 1<<47: // the provisional id of a put inside a `transaction` (broker/tx)
		fmt.Fprintf(a.Stdout, "message %d (broker %d, the provisional id of a put in a transaction) topic %s, %d events\n",
			mt.MsgID, bid, mt.Topic, len(mt.Events))
	default:
		fmt.Fprintf(a.Stdout, "message %d (broker %d, commit-log offset %d) topic %s, %d events\n", mt.MsgID, bid, phys, mt.Topic, len(mt.Events))
		if !mt.Found {
			fmt.Fprintf(a.Stdout, "(its record is not on %s any more)\n", mt.Broker)
		}
	}
	tw := a.table("TIME", "EVENT", "WHERE", "WHO", "ATTEMPT", "COST", "RESULT", "DETAIL")
	for i := range mt.Events {
		e := &mt.Events[i]
		var t0 int64
		if i > 0 {
			t0 = mt.Events[0].Time
		}
		row(tw, e.TimeText(t0), e.Type, e.Where(), e.Who(), e.AttemptText(), e.CostText(), e.Result(), e.DetailText())
	}
	return tw.Flush()
}
