package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

func init() {
	AddCommand(newDLQCommand)
	AddCommand(newDelayedCommand)
}

type dlqOpts struct {
	group  string
	broker string
	max    int
	ids    []string
	all    bool
}

type dlqRow struct {
	MsgID          int64     `json:"msgId"`
	BrokerID       int       `json:"brokerId"`
	Offset         int64     `json:"offset"`
	Topic          string    `json:"topic"` // where it was first consumed from
	OrigMsgID      string    `json:"origMsgId,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	ReconsumeTimes int       `json:"reconsumeTimes"`
	Stored         time.Time `json:"stored"`
	Tag            string    `json:"tag,omitempty"`
	Bytes          int       `json:"bytes"`
}

func newDLQCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and resend a group's dead-letter queue (%DLQ%<group>)",
		Long: `A message a consumer group failed to handle maxReconsumeTimes times (16 by default) is
stored in the group's dead-letter topic %DLQ%<group> (docs/delay.md). "dlq list" shows those
messages with the topic they came from, why they failed and how often they came back; "dlq
resend" puts them back on their original topic, once: the broker marks each letter it resent
(the dead letters stay in the DLQ: it is a log), and resending it again reports "already resent".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq dlq list -g <group> | metaq dlq resend -g <group> --msg-id <id> | --all")
		},
	}
	var lo dlqOpts
	list := &cobra.Command{
		Use:     "list -g <group>",
		Short:   "List the dead letters of a group",
		Example: "  metaq dlq list -g orders-service\n  metaq dlq list -g g1 --broker 127.0.0.1:8123 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.dlqList(cmd.Context(), &lo)
		},
	}
	list.Flags().StringVarP(&lo.group, "group", "g", "", "consumer group (required)")
	list.Flags().StringVar(&lo.broker, "broker", "", "ask this broker (host:port) instead of the brokers registered in ZooKeeper")
	list.Flags().IntVar(&lo.max, "max", 1000, "show at most this many dead letters (the oldest)")
	_ = list.MarkFlagRequired("group")
	var ro dlqOpts
	resend := &cobra.Command{
		Use:     "resend -g <group> (--msg-id <id>... | --all)",
		Short:   "Put dead letters back on the topic they came from",
		Example: "  metaq dlq resend -g orders-service --msg-id 281474976710812\n  metaq dlq resend -g g1 --all",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.dlqResend(cmd.Context(), &ro)
		},
	}
	resend.Flags().StringVarP(&ro.group, "group", "g", "", "consumer group (required)")
	resend.Flags().StringVar(&ro.broker, "broker", "", "use this broker (host:port) directly, without ZooKeeper")
	resend.Flags().StringArrayVar(&ro.ids, "msg-id", nil, "dead letter to resend (its id in the DLQ, or its origMsgId); repeatable; one that names no dead letter fails the command (exit 3) before anything is resent")
	resend.Flags().BoolVar(&ro.all, "all", false, "resend every dead letter of the group")
	resend.Flags().IntVar(&ro.max, "max", 1<<20, "resend at most this many")
	_ = resend.MarkFlagRequired("group")
	cmd.AddCommand(list, resend)
	return cmd
}

// dlqAddrs are the brokers holding the group's dead-letter topic.
func (a *App) dlqAddrs(ctx context.Context, o *dlqOpts) ([]string, error) {
	if !protocol.ValidName(o.group) {
		return nil, usageErr("bad group name %q", o.group)
	}
	if o.broker != "" {
		return []string{o.broker}, nil
	}
	return a.topicBrokerAddrs(ctx, client.DLQTopic(o.group))
}

// dlqMessages reads up to max dead letters from every broker; from[i] is
// the broker out[i] was read from.
func (a *App) dlqMessages(ctx context.Context, addrs []string, group string, max int) (out []client.Message, from []string, err error) {
	topic := client.DLQTopic(group)
	for _, addr := range addrs {
		off := int64(0)
		for len(out) < max {
			octx, cancel := a.opCtx(ctx)
			res, err := a.admin().FetchWith(octx, addr, client.FetchRequest{Topic: topic, Group: "metaq-dlq", Partition: 0, Offset: off, MaxBytes: 1 << 20})
			cancel()
			if isNotFound(err) {
				break
			}
			if err != nil {
				return out, from, fmt.Errorf("reading %s on %s: %w", topic, addr, err)
			}
			if len(res.Messages) == 0 && !res.Moved {
				break
			}
			out = append(out, res.Messages...)
			for range res.Messages {
				from = append(from, addr)
			}
			if res.NextOffset == off {
				break
			}
			off = res.NextOffset
		}
	}
	if len(out) > max {
		out, from = out[:max], from[:max]
	}
	return out, from, nil
}

func dlqRowOf(m *client.Message) dlqRow {
	return dlqRow{
		MsgID: m.MsgID, BrokerID: m.Partition.BrokerID, Offset: m.Offset, Topic: m.Properties[client.PropRetryTopic],
		OrigMsgID: m.Properties[client.PropOrigMsgID], Reason: m.Properties[client.PropReason],
		ReconsumeTimes: m.ReconsumeTimes, Stored: m.StoreTime, Tag: m.Tag, Bytes: len(m.Body),
	}
}

func (a *App) dlqList(ctx context.Context, o *dlqOpts) error {
	addrs, err := a.dlqAddrs(ctx, o)
	if err != nil {
		return err
	}
	msgs, _, err := a.dlqMessages(ctx, addrs, o.group, max(o.max, 1))
	if err != nil {
		return err
	}
	rows := []dlqRow{}
	for i := range msgs {
		rows = append(rows, dlqRowOf(&msgs[i]))
	}
	if a.JSON {
		return a.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(a.Stderr, "no dead letters for group %s\n", o.group)
		return nil
	}
	tw := a.table("MSGID", "TOPIC", "ORIG MSGID", "TIMES", "STORED", "TAG", "BYTES", "REASON")
	for _, r := range rows {
		row(tw, r.MsgID, dash(r.Topic), dash(r.OrigMsgID), r.ReconsumeTimes, r.Stored.Format(time.RFC3339), dash(r.Tag), r.Bytes, dash(r.Reason))
	}
	return tw.Flush()
}

func (a *App) dlqResend(ctx context.Context, o *dlqOpts) error {
	if o.all == (len(o.ids) > 0) {
		return usageErr("give --msg-id <id> (repeatable) or --all")
	}
	want := map[string]bool{}
	for _, s := range o.ids {
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return usageErr("bad --msg-id %q", s)
		}
		want[s] = true
	}
	addrs, err := a.dlqAddrs(ctx, o)
	if err != nil {
		return err
	}
	msgs, from, err := a.dlqMessages(ctx, addrs, o.group, o.max)
	if err != nil {
		return err
	}
	var pick []int
	matched := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		id, orig := strconv.FormatInt(m.MsgID, 10), m.Properties[client.PropOrigMsgID]
		if o.all || want[id] || want[orig] {
			pick = append(pick, i)
			matched[id], matched[orig] = true, true
		}
	}
	if len(pick) == 0 {
		return notFoundErr("no matching dead letter for group %s", o.group)
	}
	// Every --msg-id must name a dead letter: a mistyped one fails the command before anything
	// is resent (rather than resending the others and exiting 0).
	var missing []string
	for _, s := range o.ids {
		if !matched[s] && !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return notFoundErr("no dead letter %s for group %s (among the %d read): nothing was resent", strings.Join(missing, ", "), o.group, len(msgs))
	}
	sent, skipped := 0, 0
	var errs []error
	for _, i := range pick {
		m := &msgs[i]
		octx, cancel := a.opCtx(ctx)
		r, err := a.admin().ResendDeadLetter(octx, from[i], o.group, m.MsgID)
		cancel()
		if errors.Is(err, client.ErrAlreadyResent) {
			skipped++
			if !o.all && !a.JSON {
				fmt.Fprintf(a.Stderr, "%d: %s\n", m.MsgID, errText(err))
			}
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("resending %d: %w", m.MsgID, err))
			continue
		}
		sent++
		if !a.JSON {
			fmt.Fprintf(a.Stdout, "%d -> %s %d %s %d\n", m.MsgID, m.Properties[client.PropRetryTopic], r.MsgID, r.Partition, r.Offset)
		}
	}
	if a.JSON {
		_ = a.printJSON(map[string]int{"resent": sent, "alreadyResent": skipped, "failed": len(errs)})
	} else {
		fmt.Fprintf(a.Stderr, "resent %d of %d dead letters of group %s (%d resent before)\n", sent, len(pick), o.group, skipped)
	}
	return errors.Join(errs...)
}

// --- metaq delayed stats ---------------------------------------------------------

func newDelayedCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delayed",
		Short: "Delayed messages: pending counts, next due time and timer lag per broker",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq delayed stats")
		},
	}
	var broker string
	stats := &cobra.Command{
		Use:     "stats",
		Short:   "Show each broker's delay service figures (stats delay)",
		Example: "  metaq delayed stats\n  metaq delayed stats --broker 127.0.0.1:8123 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.delayedStats(cmd.Context(), broker)
		},
	}
	stats.Flags().StringVar(&broker, "broker", "", "ask this broker (host:port) only, without ZooKeeper")
	cmd.AddCommand(stats)
	return cmd
}

type delayedRow struct {
	BrokerID    int              `json:"brokerId"`
	Address     string           `json:"address"`
	Pending     int64            `json:"pending"`
	Timer       int64            `json:"timerPending"`
	NextDue     string           `json:"nextDue,omitempty"`
	LagMs       int64            `json:"timerLagMs"`
	Delivered   int64            `json:"delivered"`
	Retried     int64            `json:"retried"`
	DeadLetters int64            `json:"deadLetters"`
	Levels      map[string]int64 `json:"levels,omitempty"`
	Error       string           `json:"error,omitempty"`
}

func (a *App) delayedStats(ctx context.Context, broker string) error {
	type target struct {
		id   int
		addr string
	}
	var ts []target
	if broker != "" {
		ts = append(ts, target{-1, broker})
	} else {
		bs, err := a.brokerList(ctx)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if addr := client.FetchAddr(b); addr != "" {
				ts = append(ts, target{b.ID, addr})
			}
		}
	}
	rows := []delayedRow{}
	for _, t := range ts {
		r := delayedRow{BrokerID: t.id, Address: t.addr, Levels: map[string]int64{}}
		octx, cancel := a.opCtx(ctx)
		st, err := a.admin().Stats(octx, t.addr, "delay")
		cancel()
		if err != nil {
			r.Error = errText(err)
			rows = append(rows, r)
			continue
		}
		for _, s := range st {
			v, _ := strconv.ParseInt(s.Value, 10, 64)
			switch s.Key {
			case "broker_id":
				r.BrokerID = int(v)
			case "delay_pending":
				r.Pending = v
			case "delay_timer_pending":
				r.Timer = v
			case "delay_next_due":
				if v > 0 {
					r.NextDue = time.UnixMilli(v).Format(time.RFC3339Nano)
				}
			case "delay_timer_lag_ms":
				r.LagMs = v
			case "delay_delivered":
				r.Delivered = v
			case "delay_retried":
				r.Retried = v
			case "delay_dead_letters":
				r.DeadLetters = v
			default:
				if n, ok := levelPendingKey(s.Key); ok && v > 0 {
					r.Levels[n] = v
				}
			}
		}
		rows = append(rows, r)
	}
	return printList(a, rows, "no broker registered", func() error {
		tw := a.table("BROKER", "ADDRESS", "PENDING", "TIMER", "NEXT DUE", "LAG MS", "DELIVERED", "RETRIED", "DEAD", "ERROR")
		for _, r := range rows {
			row(tw, r.BrokerID, r.Address, r.Pending, r.Timer, dash(r.NextDue), r.LagMs, r.Delivered, r.Retried, r.DeadLetters, dash(r.Error))
		}
		return tw.Flush()
	})
}

// levelPendingKey turns delay_level_<n>_pending into "<n>".
func levelPendingKey(k string) (string, bool) {
	const pre, suf = "delay_level_", "_pending"
	if len(k) > len(pre)+len(suf) && k[:len(pre)] == pre && k[len(k)-len(suf):] == suf {
		return k[len(pre) : len(k)-len(suf)], true
	}
	return "", false
}
