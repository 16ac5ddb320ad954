package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/zkmeta"
)

type groupSummary struct {
	Group     string   `json:"group"`
	Consumers int      `json:"consumers"`
	Topics    []string `json:"topics"`
}

type consumerRow struct {
	Node   string   `json:"node"`
	ID     string   `json:"id"`
	Topics []string `json:"topics"`
}

type groupPartition struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"brokerId"`
	Partition int    `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	Committed *int64 `json:"committed"` // next offset to consume; null when nothing was committed
	MsgID     *int64 `json:"msgId,omitempty"`
	Min       *int64 `json:"min"`
	Max       *int64 `json:"max"`
	Lag       *int64 `json:"lag"` // max - max(committed, min); null when unknown
	Error     string `json:"error,omitempty"`
}

type groupDetail struct {
	Group      string           `json:"group"`
	Consumers  []consumerRow    `json:"consumers"`
	Partitions []groupPartition `json:"partitions"`
	TotalLag   int64            `json:"totalLag"`
}

func newGroupsCommand(app *App) *cobra.Command {
	list := func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		zc, err := app.zkClient(ctx)
		if err != nil {
			return err
		}
		octx, cancel := app.opCtx(ctx)
		defer cancel()
		groups, err := zc.Groups(octx)
		if err != nil {
			return zkErr(err)
		}
		out := []groupSummary{}
		for _, g := range groups {
			gi, err := zc.DescribeGroup(octx, g)
			if err != nil {
				return zkErr(err)
			}
			out = append(out, groupSummary{Group: g, Consumers: len(gi.Consumers), Topics: groupTopics(gi)})
		}
		if app.JSON {
			return app.printJSON(out)
		}
		if len(out) == 0 {
			fmt.Fprintf(app.Stderr, "no consumer group in ZooKeeper %s (root %s)\n", app.ZK, app.ZKRoot)
			return nil
		}
		tw := app.table("GROUP", "CONSUMERS", "TOPICS")
		for _, g := range out {
			row(tw, g.Group, g.Consumers, dash(strings.Join(g.Topics, ",")))
		}
		return tw.Flush()
	}
	cmd := &cobra.Command{
		Use:   "groups [list|describe <group>]",
		Short: "List consumer groups, or show a group's consumers, owners, offsets and lag",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the consumer groups known to ZooKeeper",
		Args:  cobra.NoArgs,
		RunE:  list,
	}, &cobra.Command{
		Use:   "describe <group>",
		Short: "Show a group's consumers and, per partition, owner, committed offset, max offset and lag",
		Long: `Show a group's consumers and, for every partition of the topics it subscribes to or has
offsets for: the owning consumer, the committed offset (the next message the group will read),
the partition's max offset (the next offset to be written) and the lag, max - committed
(counted from the partition's min when retention already deleted the committed position).
Partitions without a committed offset show "-" and count nothing in the total.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := app.describeGroup(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if app.JSON {
				if err := app.printJSON(d); err != nil {
					return err
				}
				return d.errors()
			}
			fmt.Fprintf(app.Stdout, "group %s: %d consumer(s)\n", d.Group, len(d.Consumers))
			if len(d.Consumers) > 0 {
				tw := app.table("  CONSUMER", "TOPICS")
				for _, c := range d.Consumers {
					row(tw, "  "+c.Node, strings.Join(c.Topics, ","))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			fmt.Fprintln(app.Stdout)
			tw := app.table("TOPIC", "PARTITION", "OWNER", "COMMITTED", "MAX", "LAG")
			for _, p := range d.Partitions {
				maxS := optInt(p.Max)
				if p.Error != "" {
					maxS = "? (" + p.Error + ")"
				}
				row(tw, p.Topic, fmt.Sprintf("%d-%d", p.BrokerID, p.Partition), dash(p.Owner), optInt(p.Committed), maxS, optInt(p.Lag))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(app.Stdout, "total lag: %d\n", d.TotalLag)
			return d.errors()
		},
	})
	return cmd
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

func ptr[T any](v T) *T { return &v }

// groupTopics is every topic a group subscribes to, owns or has offsets for, sorted.
func groupTopics(gi *zkmeta.GroupInfo) []string {
	set := map[string]bool{}
	for _, c := range gi.Consumers {
		for _, t := range c.Topics {
			if t != "" {
				set[t] = true
			}
		}
	}
	for _, o := range gi.Owners {
		set[o.Topic] = true
	}
	for _, o := range gi.Offsets {
		set[o.Topic] = true
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// errors: exit 4 (after the output) when some partition's broker could not be asked.
func (d *groupDetail) errors() error {
	for _, p := range d.Partitions {
		if p.Error != "" {
			return silentExit{code: ExitUnavailable}
		}
	}
	return nil
}

func (a *App) describeGroup(ctx context.Context, group string) (*groupDetail, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, usageErr("%v", err)
	}
	zc, err := a.zkClient(ctx)
	if err != nil {
		return nil, err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	exists, err := zc.Exists(octx, zc.Paths().Group(group))
	if err != nil {
		return nil, zkErr(err)
	}
	if !exists {
		return nil, notFoundErr("consumer group %s not found in ZooKeeper %s (root %s)", group, a.ZK, a.ZKRoot)
	}
	gi, err := zc.DescribeGroup(octx, group)
	if err != nil {
		return nil, zkErr(err)
	}
	d := &groupDetail{Group: group, Consumers: []consumerRow{}, Partitions: []groupPartition{}}
	for _, c := range gi.Consumers {
		d.Consumers = append(d.Consumers, consumerRow{Node: c.Node, ID: c.ID, Topics: c.Topics})
	}
	type key struct {
		topic string
		p     zkmeta.Partition
	}
	rows := map[key]*groupPartition{}
	addrs := map[key]string{}
	get := func(t string, p zkmeta.Partition) *groupPartition {
		k := key{t, p}
		r := rows[k]
		if r == nil {
			r = &groupPartition{Topic: t, BrokerID: p.BrokerID, Partition: p.Partition}
			rows[k] = r
		}
		return r
	}
	for _, t := range groupTopics(gi) {
		tp, err := a.topicPartitions(ctx, t, false)
		if err != nil {
			return nil, err
		}
		for _, p := range tp.Partitions {
			get(t, p)
			addrs[key{t, p}] = readAddr(tp.Brokers[p.BrokerID])
		}
	}
	for _, o := range gi.Owners {
		get(o.Topic, o.Partition).Owner = o.Owner
	}
	for _, o := range gi.Offsets {
		r := get(o.Topic, o.Partition)
		r.Committed = ptr(o.Offset.Offset)
		if o.Offset.MsgID >= 0 {
			r.MsgID = ptr(o.Offset.MsgID)
		}
	}
	keys := make([]key, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].p.Less(keys[j].p)
	})
	for _, k := range keys {
		r := rows[k]
		addr := addrs[k]
		if addr == "" {
			r.Error = "no broker serves this partition"
		} else if lo, hi, err := a.minMax(ctx, addr, k.topic, k.p.Partition); err != nil {
			r.Error = err.Error()
		} else {
			r.Min, r.Max = ptr(lo), ptr(hi)
			if r.Committed != nil {
				lag := max(hi-max(*r.Committed, lo), 0)
				r.Lag = ptr(lag)
				d.TotalLag += lag
			}
		}
		d.Partitions = append(d.Partitions, *r)
	}
	return d, nil
}

// ---- metaq offsets reset ----

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
				return notFoundErr("topic %s is not registered in ZooKeeper %s (root %s)", topic, app.ZK, app.ZKRoot)
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
				addr := readAddr(tp.Brokers[p.BrokerID])
				c, err := app.broker(ctx, addr)
				if err != nil {
					return err
				}
				rctx, rcancel := app.opCtx(ctx)
				n, err := target.resolve(rctx, c, topic, p.Partition)
				rcancel()
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

// position is a start/reset position: earliest, latest, a time or an offset.
type position struct {
	kind   string // earliest, latest, time, offset
	at     time.Time
	offset int64
}

func parseResetTarget(s string, now time.Time) (position, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "earliest", "smallest", "min":
		return position{kind: "earliest"}, nil
	case "latest", "largest", "max":
		return position{kind: "latest"}, nil
	case "":
		return position{}, usageErr("--to is empty: want earliest, latest, a time or an offset")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return position{kind: "offset", offset: n}, nil
	}
	t, err := parseTime(s, now)
	if err != nil {
		return position{}, usageErr("%v", err)
	}
	return position{kind: "time", at: t}, nil
}

func (p position) resolve(ctx context.Context, c *brokerConn, topic string, partition int) (int64, error) {
	switch p.kind {
	case "earliest":
		return c.Offset(ctx, topic, partition, 0)
	case "latest":
		return c.Offset(ctx, topic, partition, math.MaxInt64)
	case "offset":
		return c.Offset(ctx, topic, partition, p.offset)
	case "time":
		return c.Seek(ctx, topic, partition, p.at.UnixMilli())
	}
	return 0, errors.New("no position")
}
