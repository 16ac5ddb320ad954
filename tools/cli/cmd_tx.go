package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// metaq tx: heuristic completion of transactions (docs/transactions.md).

func init() { AddCommand(newTxCommand) }

func newTxCommand(app *App) *cobra.Command {
	var broker, uq string
	cmd := &cobra.Command{
		Use:   "tx",
		Short: "List and complete prepared transactions (heuristic completion)",
		Long: `List the prepared XA transactions and pending half messages of the brokers, and commit or roll
back one by hand when its coordinator (the transaction manager, or the producer group) is gone.

A transaction is an XA id (XID:<formatId>:<gtrid>:<bqual>:<uq>, as listed) or the message id of a
half message (a number: its broker is part of the id). Without --broker every broker registered
in ZooKeeper is asked.`,
		Example: `  metaq tx list
  metaq tx commit XID:1:0a0b:01:XAMessageProducer-host1 --broker 127.0.0.1:8123
  metaq tx rollback 281474976710858`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq tx list | commit <xid|msgId> | rollback <xid|msgId>")
		},
	}
	cmd.PersistentFlags().StringVar(&broker, "broker", "", "ask only this broker (host:port or broker id)")
	list := &cobra.Command{
		Use:   "list",
		Short: "Prepared XA transactions and the count of pending half messages, per broker",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.txList(cmd.Context(), broker, uq)
		},
	}
	list.Flags().StringVar(&uq, "qualifier", "", "only XA transactions with this unique qualifier")
	complete := func(commit bool) *cobra.Command {
		verb := "rollback"
		if commit {
			verb = "commit"
		}
		return &cobra.Command{
			Use:   verb + " <xid|msgId>",
			Short: strings.ToUpper(verb[:1]) + verb[1:] + " a prepared XA transaction or a pending half message",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return app.txComplete(cmd.Context(), broker, args[0], commit)
			},
		}
	}
	cmd.AddCommand(list, complete(true), complete(false))
	return cmd
}

// txBrokers is --broker, or every registered broker.
func (a *App) txBrokers(ctx context.Context, broker string) ([]string, error) {
	if broker != "" {
		addr, err := a.resolveBrokerArg(ctx, broker)
		if err != nil {
			return nil, err
		}
		return []string{addr}, nil
	}
	bs, err := a.brokerList(ctx)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, b := range bs {
		if addr := client.FetchAddr(b); addr != "" {
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) == 0 {
		return nil, notFoundErr("no broker is registered in ZooKeeper %s (root %s)", a.ZK, a.ZKRoot)
	}
	return addrs, nil
}

type txBrokerInfo struct {
	Broker      string   `json:"broker"`
	Prepared    []string `json:"prepared"`
	PendingHalf int64    `json:"pendingHalf"`
}

func (a *App) txList(ctx context.Context, broker, uq string) error {
	addrs, err := a.txBrokers(ctx, broker)
	if err != nil {
		return err
	}
	var out []txBrokerInfo
	for _, addr := range addrs {
		ctx, cancel := a.opCtx(ctx)
		xids, err := a.admin().PreparedXA(ctx, addr, uq)
		var half int64
		if err == nil {
			var stats []protocol.Stat
			if stats, err = a.admin().Stats(ctx, addr, ""); err == nil {
				for _, s := range stats {
					if s.Key == "tx_half_pending" {
						half, _ = strconv.ParseInt(s.Value, 10, 64)
					}
				}
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("broker %s: %w", addr, err)
		}
		out = append(out, txBrokerInfo{Broker: addr, Prepared: xids, PendingHalf: half})
	}
	if a.JSON {
		return a.printJSON(out)
	}
	tw := a.table("BROKER", "PREPARED XA", "PENDING HALF")
	for _, b := range out {
		if len(b.Prepared) == 0 {
			row(tw, b.Broker, "-", strconv.FormatInt(b.PendingHalf, 10))
		}
		for i, x := range b.Prepared {
			half := ""
			if i == 0 {
				half = strconv.FormatInt(b.PendingHalf, 10)
			}
			row(tw, b.Broker, x, half)
		}
	}
	return tw.Flush()
}

func (a *App) txComplete(ctx context.Context, broker, arg string, commit bool) error {
	verb := "rolled back"
	if commit {
		verb = "committed"
	}
	if id, err := strconv.ParseInt(arg, 10, 64); err == nil {
		if id < 0 {
			return usageErr("bad message id %q", arg)
		}
		addr := ""
		if broker != "" {
			addr, err = a.resolveBrokerArg(ctx, broker)
		} else {
			bid, _ := protocol.SplitMsgID(id)
			addr, err = a.brokerByID(ctx, bid)
		}
		if err != nil {
			return err
		}
		ctx, cancel := a.opCtx(ctx)
		defer cancel()
		if err := a.admin().EndHalf(ctx, addr, id, commit); err != nil {
			return txErr(err)
		}
		fmt.Fprintf(a.Stdout, "half message %d %s on %s\n", id, verb, addr)
		return nil
	}
	if !strings.HasPrefix(arg, "XID:") {
		return usageErr("bad transaction %q: want an XA id (XID:…) or a half message's id", arg)
	}
	addrs, err := a.txBrokers(ctx, broker)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		ctx, cancel := a.opCtx(ctx)
		xids, err := a.admin().PreparedXA(ctx, addr, "")
		if err == nil && slices.Contains(xids, arg) {
			err = a.admin().CompleteXA(ctx, addr, arg, commit)
			cancel()
			if err != nil {
				return txErr(err)
			}
			fmt.Fprintf(a.Stdout, "%s %s on %s\n", arg, verb, addr)
			return nil
		}
		cancel()
		if err != nil && broker != "" {
			return err
		}
	}
	return notFoundErr("no broker has a prepared transaction %s", arg)
}

// txErr maps a broker's refusal to the CLI's exit codes.
func txErr(err error) error {
	var be *client.BrokerError
	if errors.As(err, &be) && be.Code == protocol.StatusNotFound {
		return notFoundErr("%s", be.Message)
	}
	return err
}
