package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

type topicSummary struct {
	Topic      string `json:"topic"`
	Brokers    []int  `json:"brokers"`
	Partitions int    `json:"partitions"`
	Publish    bool   `json:"publish"`
	Subscribe  bool   `json:"subscribe"`
}

type partitionInfo struct {
	BrokerID  int    `json:"brokerId"`
	Partition int    `json:"partition"`
	Address   string `json:"address"`
	Min       int64  `json:"min"`
	Max       int64  `json:"max"`
	Messages  int64  `json:"messages"`
	Error     string `json:"error,omitempty"`
}

type topicDetail struct {
	Topic      string          `json:"topic"`
	Partitions []partitionInfo `json:"partitions"`
	Messages   int64           `json:"messages"`
}

func newTopicsCommand(app *App) *cobra.Command {
	var all bool
	list := func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		zc, octx, cancel, err := app.zkRequest(ctx)
		if err != nil {
			return err
		}
		defer cancel()
		topics, err := zc.Topics(octx)
		if err != nil {
			return zkErr(err)
		}
		out := []topicSummary{}
		for _, t := range topics {
			if !all && protocol.IsSystemTopic(t) { // %SCHEDULE%, %RETRY%<group>, %DLQ%<group>
				continue
			}
			sub, err := zc.Partitions(octx, t, zkmeta.Subscribe)
			if err != nil {
				return zkErr(err)
			}
			pub, err := zc.Partitions(octx, t, zkmeta.Publish)
			if err != nil {
				return zkErr(err)
			}
			s := topicSummary{Topic: t, Brokers: []int{}, Publish: len(pub.Partitions) > 0, Subscribe: len(sub.Partitions) > 0}
			parts := sub.Partitions
			if len(parts) == 0 {
				parts = pub.Partitions
			}
			s.Partitions = len(parts)
			seen := map[int]bool{}
			for _, p := range parts {
				if !seen[p.BrokerID] {
					seen[p.BrokerID] = true
					s.Brokers = append(s.Brokers, p.BrokerID)
				}
			}
			out = append(out, s)
		}
		return printList(app, out, "no topic registered", func() error {
			tw := app.table("TOPIC", "PARTITIONS", "BROKERS", "PUBLISH", "SUBSCRIBE")
			for _, s := range out {
				ids := make([]string, len(s.Brokers))
				for i, b := range s.Brokers {
					ids[i] = fmt.Sprint(b)
				}
				row(tw, s.Topic, s.Partitions, dash(strings.Join(ids, ",")), yesNo(s.Publish), yesNo(s.Subscribe))
			}
			return tw.Flush()
		})
	}
	cmd := &cobra.Command{
		Use:   "topics [list|describe <topic>]",
		Short: "List topics, or show a topic's partitions with their min/max offsets",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	cmd.PersistentFlags().BoolVar(&all, "all", false, "include system topics (%SCHEDULE%, %RETRY%<group>, %DLQ%<group>)")
	cmd.AddCommand(topicAdminCommands(app)...) // cmd_admin.go
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the topics registered in ZooKeeper",
		Args:  cobra.NoArgs,
		RunE:  list,
	}, &cobra.Command{
		Use:               "describe <topic>",
		Short:             "Show a topic's partitions per broker with min/max offsets and message counts",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: app.completeTopicArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := app.describeTopic(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if app.JSON {
				if err := app.printJSON(d); err != nil {
					return err
				}
				return partitionErrors(d.Partitions)
			}
			tw := app.table("PARTITION", "BROKER", "ADDRESS", "MIN", "MAX", "MESSAGES")
			for _, p := range d.Partitions {
				if p.Error != "" {
					row(tw, fmt.Sprintf("%d-%d", p.BrokerID, p.Partition), p.BrokerID, p.Address, "?", "?", "error: "+p.Error)
					continue
				}
				row(tw, fmt.Sprintf("%d-%d", p.BrokerID, p.Partition), p.BrokerID, p.Address, p.Min, p.Max, p.Messages)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(app.Stdout, "topic %s: %d partitions, %d messages retained\n", d.Topic, len(d.Partitions), d.Messages)
			return partitionErrors(d.Partitions)
		},
	})
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// describeTopic reads a topic's partitions from ZooKeeper and their offsets from the brokers.
// A broker that cannot be asked is reported in its rows' Error.
func (a *App) describeTopic(ctx context.Context, topic string) (*topicDetail, error) {
	tp, err := a.topicPartitions(ctx, topic, false)
	if err != nil {
		return nil, err
	}
	if len(tp.Partitions) == 0 {
		if tp, err = a.topicPartitions(ctx, topic, true); err != nil {
			return nil, err
		}
	}
	if len(tp.Partitions) == 0 {
		return nil, a.topicNotRegistered(topic)
	}
	d := &topicDetail{Topic: topic, Partitions: []partitionInfo{}}
	for _, p := range tp.Partitions {
		pi := partitionInfo{BrokerID: p.BrokerID, Partition: p.Partition, Address: client.FetchAddr(tp.Brokers[p.BrokerID])}
		lo, hi, err := a.minMax(ctx, pi.Address, topic, p.Partition)
		if err != nil {
			pi.Error = errText(err)
		} else {
			pi.Min, pi.Max, pi.Messages = lo, hi, hi-lo
			d.Messages += hi - lo
		}
		d.Partitions = append(d.Partitions, pi)
	}
	return d, nil
}

// partitionRow is a row of a describe command's partition table (topics, groups): Error says why
// its broker could not be asked.
type partitionRow interface{ partitionError() string }

func (p partitionInfo) partitionError() string  { return p.Error }
func (p groupPartition) partitionError() string { return p.Error }

// partitionErrors: exit 4 (after the output) when some partition's broker could not be asked.
func partitionErrors[T partitionRow](ps []T) error {
	for _, p := range ps {
		if p.partitionError() != "" {
			return silentExit{code: ExitUnavailable}
		}
	}
	return nil
}

// minMax asks a partition's broker for its min and max offsets (max: the next offset to be
// written). A broker that could not be reached or did not answer within --connect-timeout is not
// asked again by this command: its other partitions fail at once with the same error, so that a
// stopped broker (SIGSTOP, a hung host) costs one --connect-timeout, not one per partition.
func (a *App) minMax(ctx context.Context, addr, topic string, partition int) (lo, hi int64, err error) {
	if err := a.unanswered(addr); err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			a.noteUnanswered(addr, err)
		}
	}()
	adm := a.admin()
	if lo, err = adm.MinOffset(ctx, addr, topic, partition); err != nil {
		return 0, 0, err
	}
	hi, err = adm.MaxOffset(ctx, addr, topic, partition)
	return lo, hi, err
}
