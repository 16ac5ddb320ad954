package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
)

type offsetChange struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"brokerId"`
	Partition int    `json:"partition"`
	Old       *int64 `json:"old"`
	New       int64  `json:"new"`
}

func newOffsetsCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offsets",
		Short: "Manage a consumer group's committed offsets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq offsets reset --group <g> --topic <t> --to <where>")
		},
	}
	var group, topic, to, partition string
	var force, dryRun bool
	reset := &cobra.Command{
		Use:   "reset --group <group> --topic <topic> --to earliest|latest|<time>|<offset>",
		Short: "Move a group's committed offsets in a topic",
		Long: `Move a consumer group's committed offsets for every partition of a topic (or one, with
--partition) to:

  earliest   the partition's min offset (the oldest retained message)
  latest     the partition's max offset (only new messages will be read)
  <time>     the first message stored at or after that time, found by the broker (seek):
             RFC 3339 (2026-11-29T12:00:00Z, 2026-11-29T13:00:00+01:00, or a local
             2026-11-29T12:00:00), -<duration> for that long ago (-15m), or @<unix ms>
  <offset>   a queue offset (clamped by the broker to [min, max])

Consumers read the committed offsets when they start or rebalance, so the group must not be
running: the command refuses (exit 5) while the group has registered consumers or owners for
the topic, unless --force.`,
		Example: `  metaq offsets reset --group billing --topic orders --to earliest
  metaq offsets reset --group billing --topic orders --to 2026-11-29T08:00:00Z --dry-run
  metaq offsets reset --group billing --topic orders --to -1h --partition 0-3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := zkmeta.ValidateName("group", group); err != nil {
				return usageErr("%v", err)
			}
			ps, err := parsePartitionSpec(partition)
			if err != nil {
				return err
			}
			target, err := parseResetTarget(to, time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			zc, err := app.zkClient(ctx)
			if err != nil {
				return err
			}
			tp, err := app.topicPartitions(ctx, topic, false)
			if err != nil {
				return err
			}
			if len(tp.Partitions) == 0 {
				return app.topicNotRegistered(topic)
			}
			parts := tp.Partitions
			if ps.Set {
				p, err := ps.resolve(topic, parts)
				if err != nil {
					return err
				}
				parts = []zkmeta.Partition{p}
			}
			octx, cancel := app.opCtx(ctx)
			defer cancel()
			gi, err := zc.DescribeGroup(octx, group)
			if err != nil {
				return zkErr(err)
			}
			var live []string
			for _, c := range gi.Consumers {
				for _, t := range c.Topics {
					if t == topic {
						live = append(live, c.Node)
					}
				}
			}
			for _, o := range gi.Owners {
				if o.Topic == topic {
					live = append(live, fmt.Sprintf("%s (owner of %s)", o.Owner, o.Partition))
				}
			}
			if len(live) > 0 && !force && !dryRun {
				return refusedErr("group %s has live consumers of topic %s: %s\nstop them first (they would overwrite the offsets), or use --force",
					group, topic, strings.Join(dedupe(live), ", "))
			}
			old := map[zkmeta.Partition]int64{}
			for _, o := range gi.Offsets {
				if o.Topic == topic {
					old[o.Partition] = o.Offset.Offset
				}
			}
			changes := []offsetChange{}
			for _, p := range parts {
				addr := client.FetchAddr(tp.Brokers[p.BrokerID])
				n, err := target.resolve(ctx, app.admin(), addr, topic, p.Partition)
				if err != nil {
					return fmt.Errorf("partition %s: %w", p, err)
				}
				ch := offsetChange{Topic: topic, BrokerID: p.BrokerID, Partition: p.Partition, New: n}
				if o, ok := old[p]; ok {
					ch.Old = ptr(o)
				}
				changes = append(changes, ch)
			}
			if !dryRun {
				for _, ch := range changes {
					p := zkmeta.Partition{BrokerID: ch.BrokerID, Partition: ch.Partition}
					wctx, wcancel := app.opCtx(ctx)
					err := zc.CommitOffset(wctx, group, topic, p, zkmeta.Offset{MsgID: -1, Offset: ch.New})
					wcancel()
					if err != nil {
						return zkErr(fmt.Errorf("committing %s %s: %w", topic, p, err))
					}
				}
			}
			if app.JSON {
				return app.printJSON(map[string]any{"group": group, "topic": topic, "to": to, "dryRun": dryRun, "changes": changes})
			}
			tw := app.table("TOPIC", "PARTITION", "OLD", "NEW")
			for _, ch := range changes {
				row(tw, ch.Topic, fmt.Sprintf("%d-%d", ch.BrokerID, ch.Partition), optInt(ch.Old), ch.New)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintln(app.Stdout, "dry run: nothing was changed")
			} else {
				fmt.Fprintf(app.Stdout, "group %s: %d offset(s) of topic %s reset to %s\n", group, len(changes), topic, to)
			}
			return nil
		},
	}
	f := reset.Flags()
	f.StringVarP(&group, "group", "g", "", "consumer group (required)")
	f.StringVarP(&topic, "topic", "t", "", "topic (required)")
	f.StringVar(&to, "to", "", "earliest, latest, a time (RFC 3339, -<duration>, @<unix ms>) or an offset (required)")
	f.StringVarP(&partition, "partition", "p", "", "only this partition: <brokerId>-<partition> (or <partition> when one broker serves the topic)")
	f.BoolVar(&force, "force", false, "reset even while the group has live consumers")
	f.BoolVar(&dryRun, "dry-run", false, "show the new offsets without writing them")
	_ = reset.MarkFlagRequired("group")
	_ = reset.MarkFlagRequired("topic")
	_ = reset.MarkFlagRequired("to")
	cmd.AddCommand(reset)
	return cmd
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
