package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
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

// resetOpts are the flags of `metaq offsets reset`.
type resetOpts struct {
	group, topic, to, partition string
	force, dryRun, create       bool
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
	cmd.AddCommand(newOffsetsResetCommand(app))
	return cmd
}

func newOffsetsResetCommand(app *App) *cobra.Command {
	var o resetOpts
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
the topic, unless --force. A group that does not exist in ZooKeeper is not found (exit 3), as
for 'groups describe'; --create creates it with these offsets (so that its consumers start
there).`,
		Example: `  metaq offsets reset --group billing --topic orders --to earliest
  metaq offsets reset --group billing --topic orders --to 2026-11-29T08:00:00Z --dry-run
  metaq offsets reset --group billing --topic orders --to -1h --partition 0-3
  metaq offsets reset --group new-billing --topic orders --to -24h --create`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.offsetsReset(cmd.Context(), &o)
		},
	}
	f := reset.Flags()
	f.StringVarP(&o.group, "group", "g", "", "consumer group (required)")
	f.StringVarP(&o.topic, "topic", "t", "", "topic (required)")
	f.StringVar(&o.to, "to", "", "earliest, latest, a time (RFC 3339, -<duration>, @<unix ms>) or an offset (required)")
	f.StringVarP(&o.partition, "partition", "p", "", "only this partition: <brokerId>-<partition> (or <partition> when one broker serves the topic)")
	f.BoolVar(&o.force, "force", false, "reset even while the group has live consumers")
	f.BoolVar(&o.dryRun, "dry-run", false, "show the new offsets without writing them")
	f.BoolVar(&o.create, "create", false, "create the group when it does not exist yet")
	_ = reset.MarkFlagRequired("group")
	_ = reset.MarkFlagRequired("topic")
	_ = reset.MarkFlagRequired("to")
	return reset
}

func (a *App) offsetsReset(ctx context.Context, o *resetOpts) error {
	if err := zkmeta.ValidateName("group", o.group); err != nil {
		return usageErr("%v", err)
	}
	ps, err := parsePartitionSpec(o.partition)
	if err != nil {
		return err
	}
	target, err := parseResetTarget(o.to, time.Now())
	if err != nil {
		return err
	}
	zc, err := a.zkClient(ctx)
	if err != nil {
		return err
	}
	tp, parts, err := a.resetPartitions(ctx, o.topic, ps)
	if err != nil {
		return err
	}
	gi, err := a.resettableGroup(ctx, zc, o)
	if err != nil {
		return err
	}
	changes, err := a.resetChanges(ctx, gi, tp, parts, o.topic, target)
	if err != nil {
		return err
	}
	if !o.dryRun {
		if err := a.commitChanges(ctx, zc, o.group, changes); err != nil {
			return err
		}
	}
	return a.printResetChanges(o, changes)
}

// resetPartitions are the topic's partitions a reset moves: every one, or the --partition one.
func (a *App) resetPartitions(ctx context.Context, topic string, ps partitionSpec) (zkmeta.TopicPartitions, []zkmeta.Partition, error) {
	tp, err := a.topicPartitions(ctx, topic, false)
	if err != nil {
		return tp, nil, err
	}
	if len(tp.Partitions) == 0 {
		return tp, nil, a.topicNotRegistered(topic)
	}
	if !ps.Set {
		return tp, tp.Partitions, nil
	}
	p, err := ps.resolve(topic, tp.Partitions)
	if err != nil {
		return tp, nil, err
	}
	return tp, []zkmeta.Partition{p}, nil
}

// resettableGroup reads the group, which must exist (unless --create) and have no live
// consumer of the topic (unless --force or --dry-run).
func (a *App) resettableGroup(ctx context.Context, zc *zkmeta.Client, o *resetOpts) (*zkmeta.GroupInfo, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	exists, err := zc.Exists(octx, zc.Paths().Group(o.group))
	if err != nil {
		return nil, zkErr(err)
	}
	if !exists && !o.create {
		return nil, notFoundErr("consumer group %s not found in ZooKeeper %s (root %s); --create creates it with these offsets", o.group, a.ZK, a.ZKRoot)
	}
	gi, err := zc.DescribeGroup(octx, o.group)
	if err != nil {
		return nil, zkErr(err)
	}
	if live := liveConsumers(gi, o.topic); len(live) > 0 && !o.force && !o.dryRun {
		return nil, refusedErr("group %s has live consumers of topic %s: %s\nstop them first (they would overwrite the offsets), or use --force",
			o.group, o.topic, strings.Join(live, ", "))
	}
	return gi, nil
}

// liveConsumers lists the group's consumers of topic, each once: registered consumers
// subscribed to it and owners of its partitions, with the partitions they own
// ("billing_host-1-… (owner of 1-0, 1-1)").
func liveConsumers(gi *zkmeta.GroupInfo, topic string) []string {
	var names []string
	owns := map[string][]string{}
	add := func(name string) {
		if _, ok := owns[name]; !ok {
			owns[name] = nil
			names = append(names, name)
		}
	}
	for _, c := range gi.Consumers {
		if slices.Contains(c.Topics, topic) {
			add(c.Node)
		}
	}
	for _, o := range gi.Owners {
		if o.Topic == topic {
			add(o.Owner)
			owns[o.Owner] = append(owns[o.Owner], o.Partition.String())
		}
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if ps := owns[n]; len(ps) > 0 {
			out[i] += " (owner of " + strings.Join(ps, ", ") + ")"
		}
	}
	return out
}

// resetChanges resolves the target offset of every partition (asking its broker) next to the
// group's committed one.
func (a *App) resetChanges(ctx context.Context, gi *zkmeta.GroupInfo, tp zkmeta.TopicPartitions, parts []zkmeta.Partition, topic string, target position) ([]offsetChange, error) {
	old := map[zkmeta.Partition]int64{}
	for _, o := range gi.Offsets {
		if o.Topic == topic {
			old[o.Partition] = o.Offset.Offset
		}
	}
	changes := []offsetChange{}
	for _, p := range parts {
		addr := client.FetchAddr(tp.Brokers[p.BrokerID])
		n, err := target.resolve(ctx, a.admin(), addr, topic, p.Partition)
		if err != nil {
			return nil, fmt.Errorf("partition %s: %w", p, err)
		}
		ch := offsetChange{Topic: topic, BrokerID: p.BrokerID, Partition: p.Partition, New: n}
		if o, ok := old[p]; ok {
			ch.Old = ptr(o)
		}
		changes = append(changes, ch)
	}
	return changes, nil
}

// commitChanges writes the new offsets (no message id: -1).
func (a *App) commitChanges(ctx context.Context, zc *zkmeta.Client, group string, changes []offsetChange) error {
	ws := make([]zkmeta.OffsetWrite, len(changes))
	for i, ch := range changes {
		ws[i] = zkmeta.OffsetWrite{Topic: ch.Topic, Partition: zkmeta.Partition{BrokerID: ch.BrokerID, Partition: ch.Partition},
			Offset: zkmeta.Offset{MsgID: -1, Offset: ch.New}}
	}
	// All or nothing per step of zkmeta.MaxOffsetsMulti partitions (docs/operations.md): a failure
	// part way used to leave some partitions moved.
	// One --connect-timeout per step: a step reads its nodes' versions, then writes them at once.
	steps := time.Duration(1 + (len(ws)-1)/zkmeta.MaxOffsetsMulti)
	wctx, cancel := context.WithTimeout(ctx, steps*a.ConnectTimeout)
	defer cancel()
	n, err := zc.CommitOffsets(wctx, group, ws)
	if err == nil {
		return nil
	}
	done := "nothing was changed"
	if n > 0 {
		done = fmt.Sprintf("%d of the %d offsets were changed (those listed first by --dry-run)", n, len(ws))
	}
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
		return refusedErr("an offset of group %s changed while it was reset (a consumer committed it); %s: "+
			"stop the group's consumers and run the reset again", group, done)
	}
	return zkErr(fmt.Errorf("committing the offsets of group %s (%s): %w", group, done, err))
}

func (a *App) printResetChanges(o *resetOpts, changes []offsetChange) error {
	if a.JSON {
		return a.printJSON(map[string]any{"group": o.group, "topic": o.topic, "to": o.to, "dryRun": o.dryRun, "changes": changes})
	}
	tw := a.table("TOPIC", "PARTITION", "OLD", "NEW")
	for _, ch := range changes {
		row(tw, ch.Topic, fmt.Sprintf("%d-%d", ch.BrokerID, ch.Partition), optInt(ch.Old), ch.New)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.dryRun {
		fmt.Fprintln(a.Stdout, "dry run: nothing was changed")
	} else {
		fmt.Fprintf(a.Stdout, "group %s: %d offset(s) of topic %s reset to %s\n", o.group, len(changes), o.topic, o.to)
	}
	return nil
}
