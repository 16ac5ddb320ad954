package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
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
		zc, octx, cancel, err := app.zkRequest(ctx)
		if err != nil {
			return err
		}
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
		return printList(app, out, "no consumer group", func() error {
			tw := app.table("GROUP", "CONSUMERS", "TOPICS")
			for _, g := range out {
				row(tw, g.Group, g.Consumers, dash(strings.Join(g.Topics, ",")))
			}
			return tw.Flush()
		})
	}
	cmd := &cobra.Command{
		Use:   "groups [list|describe <group>]",
		Short: "List consumer groups, or show a group's consumers, owners, offsets and lag",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	cmd.AddCommand(groupAdminCommands(app)...) // cmd_admin.go
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
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: app.completeGroupArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := app.describeGroup(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if app.JSON {
				if err := app.printJSON(d); err != nil {
					return err
				}
				return partitionErrors(d.Partitions)
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
			return partitionErrors(d.Partitions)
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

func (a *App) describeGroup(ctx context.Context, group string) (*groupDetail, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, usageErr("%v", err)
	}
	zc, octx, cancel, err := a.zkRequest(ctx)
	if err != nil {
		return nil, err
	}
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
			addrs[key{t, p}] = client.FetchAddr(tp.Brokers[p.BrokerID])
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
			r.Error = errText(err)
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
