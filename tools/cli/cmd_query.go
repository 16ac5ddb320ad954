package cli

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

func newQueryCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "query",
		Short: "Find messages by id or key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq query id <msgId> | metaq query key <topic> <key>")
		},
	}
	var idBroker, format string
	byID := &cobra.Command{
		Use:   "id <msgId>",
		Short: "Fetch a message by its id",
		Long: `Fetch a message by its id. A message id is brokerId<<48 | commit-log offset, so the id names
its broker: the broker's address is read from ZooKeeper unless --broker gives it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validFormat(format); err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 0, 64)
			if err != nil || id < 0 {
				return usageErr("bad message id %q: want a non-negative integer", args[0])
			}
			brokerID, phys := protocol.SplitMsgID(id)
			ctx := cmd.Context()
			addr := idBroker
			if addr == "" {
				if addr, err = app.brokerByID(ctx, brokerID); err != nil {
					return err
				}
			}
			app.logf("message %d: broker %d (%s), commit-log offset %d", id, brokerID, addr, phys)
			m, err := app.admin().QueryID(ctx, addr, id)
			if isNotFound(err) {
				return notFoundErr("message %d not found on broker %d (%s)", id, brokerID, addr)
			}
			if err != nil {
				return err
			}
			return app.printMessages([]client.Message{*m}, format)
		},
	}
	byID.Flags().StringVar(&idBroker, "broker", "", "ask this broker (host:port) instead of looking the id's broker up in ZooKeeper")
	byID.Flags().StringVar(&format, "format", formatVerbose, "output: verbose, text (body only) or json")

	var keyBroker, keyFormat string
	var maxNum int
	byKey := &cobra.Command{
		Use:   "key <topic> <key>",
		Short: "Find a topic's messages carrying a key (the keys property)",
		Long: `Find the messages of a topic whose keys property holds the key. Every broker serving the topic
(in ZooKeeper) is asked, unless --broker names one; results are sorted by store time.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validFormat(keyFormat); err != nil {
				return err
			}
			topic, key := args[0], args[1]
			if !protocol.ValidName(topic) {
				return usageErr("bad topic name %q", topic)
			}
			if key == "" || strings.ContainsAny(key, " \r\n\t") {
				return usageErr("bad key %q: keys are single words", key)
			}
			if maxNum < 1 {
				return usageErr("--max must be >= 1")
			}
			ctx := cmd.Context()
			var addrs []string
			if keyBroker != "" {
				addrs = []string{keyBroker}
			} else {
				tp, err := app.topicPartitions(ctx, topic, false)
				if err != nil {
					return err
				}
				for _, id := range slices.Sorted(maps.Keys(tp.Brokers)) {
					if a := client.FetchAddr(tp.Brokers[id]); a != "" {
						addrs = append(addrs, a)
					}
				}
				if len(addrs) == 0 {
					return app.topicNotRegistered(topic)
				}
			}
			var all []client.Message
			var errs []string
			for _, addr := range addrs {
				msgs, err := app.admin().QueryKey(ctx, addr, topic, key, maxNum)
				if err != nil {
					errs = append(errs, errText(err))
					continue
				}
				all = append(all, msgs...)
			}
			for _, e := range errs {
				app.warnf("%s", e)
			}
			sort.SliceStable(all, func(i, j int) bool { return all[i].StoreTime.Before(all[j].StoreTime) })
			if len(all) > maxNum {
				all = all[len(all)-maxNum:]
			}
			if len(all) == 0 {
				if len(errs) == len(addrs) {
					return unavailableErr("no broker could be asked")
				}
				return notFoundErr("no message with key %s in topic %s", key, topic)
			}
			return app.printMessages(all, keyFormat)
		},
	}
	byKey.Flags().StringVar(&keyBroker, "broker", "", "ask only this broker (host:port)")
	byKey.Flags().StringVar(&keyFormat, "format", formatVerbose, "output: verbose, text (body only) or json")
	byKey.Flags().IntVar(&maxNum, "max", 32, "most messages to return")
	cmd.AddCommand(byID, byKey)
	return cmd
}

// printMessages prints messages in format (--json forces json).
func (a *App) printMessages(msgs []client.Message, format string) error {
	if a.JSON {
		format = formatJSON
	}
	for i := range msgs {
		if err := printMessage(a.Stdout, format, &msgs[i]); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}
	return nil
}
