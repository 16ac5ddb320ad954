package cli

import (
	"context"
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
	cmd.AddCommand(newQueryIDCommand(app), newQueryKeyCommand(app))
	return cmd
}

func newQueryIDCommand(app *App) *cobra.Command {
	var broker, format string
	byID := &cobra.Command{
		Use:   "id <msgId>",
		Short: "Fetch a message by its id",
		Long: `Fetch a message by its id. A message id is brokerId<<48 | commit-log offset, so the id names
its broker: the broker's address is read from ZooKeeper unless --broker gives it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.queryID(cmd.Context(), args[0], broker, format)
		},
	}
	byID.Flags().StringVar(&broker, "broker", "", "ask this broker (host:port) instead of looking the id's broker up in ZooKeeper")
	byID.Flags().StringVar(&format, "format", formatVerbose, "output: verbose, text (body only) or json")
	return byID
}

func (a *App) queryID(ctx context.Context, arg, addr, format string) error {
	if err := validFormat(format); err != nil {
		return err
	}
	id, err := strconv.ParseInt(arg, 0, 64)
	if err != nil || id < 0 {
		return usageErr("bad message id %q: want a non-negative integer", arg)
	}
	brokerID, phys := protocol.SplitMsgID(id)
	if addr == "" {
		if addr, err = a.brokerByID(ctx, brokerID); err != nil {
			return err
		}
	}
	a.logf("message %d: broker %d (%s), commit-log offset %d", id, brokerID, addr, phys)
	m, err := a.admin().QueryID(ctx, addr, id)
	if isNotFound(err) {
		return notFoundErr("message %d not found on broker %d (%s)", id, brokerID, addr)
	}
	if err != nil {
		return err
	}
	return a.printMessages([]client.Message{*m}, format)
}

type queryKeyOpts struct {
	broker, format string
	maxNum         int
}

func newQueryKeyCommand(app *App) *cobra.Command {
	var o queryKeyOpts
	byKey := &cobra.Command{
		Use:   "key <topic> <key>",
		Short: "Find a topic's messages carrying a key (the keys property)",
		Long: `Find the messages of a topic whose keys property holds the key. Every broker serving the topic
(in ZooKeeper) is asked, unless --broker names one; results are sorted by store time. No
match is exit 3 only when every broker answered; when one did not (it is named on stderr), the
key may be there: exit 4.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: app.completeTopicArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.queryKey(cmd.Context(), args[0], args[1], &o)
		},
	}
	byKey.Flags().StringVar(&o.broker, "broker", "", "ask only this broker (host:port)")
	byKey.Flags().StringVar(&o.format, "format", formatVerbose, "output: verbose, text (body only) or json")
	byKey.Flags().IntVar(&o.maxNum, "max", 32, "most messages to return")
	return byKey
}

func (a *App) queryKey(ctx context.Context, topic, key string, o *queryKeyOpts) error {
	if err := validFormat(o.format); err != nil {
		return err
	}
	if !protocol.ValidName(topic) {
		return usageErr("bad topic name %q", topic)
	}
	if key == "" || strings.ContainsAny(key, " \r\n\t") {
		return usageErr("bad key %q: keys are single words", key)
	}
	if o.maxNum < 1 {
		return usageErr("--max must be >= 1")
	}
	addrs := []string{o.broker}
	if o.broker == "" {
		var err error
		if addrs, err = a.topicBrokerAddrs(ctx, topic); err != nil {
			return err
		}
	}
	all, errs := a.queryKeyOn(ctx, addrs, topic, key, o.maxNum)
	for _, e := range errs {
		a.warnf("%s", e)
	}
	if len(all) == 0 {
		if len(errs) == len(addrs) {
			return unavailableErr("no broker could be asked")
		}
		if len(errs) > 0 {
			// Not "not found": the message may be on a broker that did not answer.
			return unavailableErr("no message with key %s in topic %s on the brokers that answered (%d of %d did not)", key, topic, len(errs), len(addrs))
		}
		return notFoundErr("no message with key %s in topic %s", key, topic)
	}
	return a.printMessages(all, o.format)
}

// topicBrokerAddrs are the fetch addresses of the brokers serving topic, by broker id.
func (a *App) topicBrokerAddrs(ctx context.Context, topic string) ([]string, error) {
	tp, err := a.topicPartitions(ctx, topic, false)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, id := range slices.Sorted(maps.Keys(tp.Brokers)) {
		if addr := client.FetchAddr(tp.Brokers[id]); addr != "" {
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) == 0 {
		return nil, a.topicNotRegistered(topic)
	}
	return addrs, nil
}

// queryKeyOn asks every broker for the key and keeps the newest maxNum messages, by store time;
// errs are the brokers that could not answer.
func (a *App) queryKeyOn(ctx context.Context, addrs []string, topic, key string, maxNum int) (all []client.Message, errs []string) {
	for _, addr := range addrs {
		msgs, err := a.admin().QueryKey(ctx, addr, topic, key, maxNum)
		if err != nil {
			errs = append(errs, errText(err))
			continue
		}
		all = append(all, msgs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].StoreTime.Before(all[j].StoreTime) })
	if len(all) > maxNum {
		all = all[len(all)-maxNum:]
	}
	return all, errs
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
