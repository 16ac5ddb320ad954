package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-zookeeper/zk"
	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Online administration (docs/zookeeper.md "Online topic configuration",
// docs/operations.md): topics create|alter|delete write
// /meta/config/topics/<topic>, which every broker watches; groups delete;
// messages resend; broker reload (SIGHUP).

func init() { AddCommand(newMessagesCommand) }

type topicAdminFlags struct {
	partitions int
	retention  string
	publish    bool
	subscribe  bool
}

func (f *topicAdminFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVarP(&f.partitions, "partitions", "p", 0, "partitions per broker (numPartitions)")
	fl.StringVar(&f.retention, "retention", "", "deletePolicy, e.g. delete,72 (hours) or delete,30m")
	fl.BoolVar(&f.publish, "publish", true, "accept puts (acceptPublish)")
	fl.BoolVar(&f.subscribe, "subscribe", true, "accept gets (acceptSubscribe)")
}

// apply sets the fields whose flags were given (all of them for create).
func (f *topicAdminFlags) apply(cmd *cobra.Command, o *broker.TopicOverride, all bool) {
	fl := cmd.Flags()
	if fl.Changed("partitions") || (all && f.partitions > 0) {
		o.NumPartitions = ptr(f.partitions)
	}
	if fl.Changed("retention") {
		o.DeletePolicy = ptr(f.retention)
	}
	if fl.Changed("publish") || all {
		o.AcceptPublish = ptr(f.publish)
	}
	if fl.Changed("subscribe") || all {
		o.AcceptSubscribe = ptr(f.subscribe)
	}
}

// topicAdminCommands are `metaq topics create|alter|delete`.
func topicAdminCommands(app *App) []*cobra.Command {
	var cf, af topicAdminFlags
	create := &cobra.Command{
		Use:   "create <topic> [--partitions N] [--retention delete,72] [--publish=false] [--subscribe=false]",
		Short: "Create a topic in ZooKeeper's online configuration; brokers accept it without a restart",
		Long: `Write /meta/config/topics/<topic> (a metaq extension, docs/zookeeper.md). Every broker
watches it: it accepts the topic and registers its partitions at once, without a restart. An
exact [topic=<name>] section in a broker's server.ini wins over it on that broker; the online
configuration wins over wildcard sections and the [system] defaults.`,
		Example: `  metaq topics create orders --partitions 8 --retention delete,72`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if err := zkmeta.ValidateName("topic", topic); err != nil {
				return usageErr("%v", err)
			}
			var o broker.TopicOverride
			cf.apply(cmd, &o, true)
			if err := o.Validate(); err != nil {
				return usageErr("%v", err)
			}
			zc, err := app.zkClient(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := app.opCtx(cmd.Context())
			defer cancel()
			err = zc.CreatePersistent(ctx, zc.Paths().ConfigTopic(topic), o.JSON())
			if errors.Is(err, zkmeta.ErrNodeExists) {
				return refusedErr("topic %s is already configured in ZooKeeper: use metaq topics alter", topic)
			}
			if err != nil {
				return zkErr(err)
			}
			return app.printAdmin(map[string]any{"topic": topic, "created": true, "config": o}, "topic %s created: %s", topic, o.JSON())
		},
	}
	cf.add(create)
	alter := &cobra.Command{
		Use:     "alter <topic> [--partitions N] [--retention …] [--publish=…] [--subscribe=…]",
		Short:   "Change a topic's online configuration (only the flags given)",
		Long:    `Change /meta/config/topics/<topic>; brokers apply it at once. More partitions make consumers rebalance onto them. Fewer partitions stop new puts to the removed ones; their messages stay readable until retention.`,
		Example: `  metaq topics alter orders --partitions 16`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if err := zkmeta.ValidateName("topic", topic); err != nil {
				return usageErr("%v", err)
			}
			zc, err := app.zkClient(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := app.opCtx(cmd.Context())
			defer cancel()
			path := zc.Paths().ConfigTopic(topic)
			// Read, change the flags given, write on the version read: an edit made meanwhile
			// (another operator, a script) is re-read and the flags applied to it, not lost.
			for attempt := 0; ; attempt++ {
				data, st, err := zc.Get(ctx, path)
				if errors.Is(err, zkmeta.ErrNoNode) {
					return notFoundErr("topic %s has no online configuration: metaq topics create %s", topic, topic)
				}
				if err != nil {
					return zkErr(err)
				}
				o, err := broker.ParseTopicOverride(data)
				if err != nil {
					app.warnf("the stored configuration of topic %s is not valid (%v) and is replaced by the flags given; it was: %q", topic, err, data)
					o = broker.TopicOverride{}
				}
				af.apply(cmd, &o, false)
				if err := o.Validate(); err != nil {
					return usageErr("%v", err)
				}
				err = zc.SetVersion(ctx, path, o.JSON(), st.Version)
				if errors.Is(err, zk.ErrBadVersion) && attempt < 5 {
					continue
				}
				if errors.Is(err, zkmeta.ErrNoNode) {
					return notFoundErr("topic %s was deleted from the online configuration meanwhile", topic)
				}
				if err != nil {
					return zkErr(err)
				}
				return app.printAdmin(map[string]any{"topic": topic, "altered": true, "config": o}, "topic %s altered: %s", topic, o.JSON())
			}
		},
	}
	af.add(alter)
	del := &cobra.Command{
		Use:   "delete <topic>",
		Short: "Delete a topic's online configuration; brokers stop accepting it unless server.ini does",
		Long: `Delete /meta/config/topics/<topic>. Brokers that accepted the topic only through it refuse
its puts and gets from now on and unregister it from ZooKeeper; the stored messages stay on disk
until retention removes them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if err := zkmeta.ValidateName("topic", topic); err != nil {
				return usageErr("%v", err)
			}
			zc, err := app.zkClient(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := app.opCtx(cmd.Context())
			defer cancel()
			path := zc.Paths().ConfigTopic(topic)
			if ok, err := zc.Exists(ctx, path); err != nil {
				return zkErr(err)
			} else if !ok {
				return notFoundErr("topic %s has no online configuration", topic)
			}
			if err := zc.Delete(ctx, path); err != nil {
				return zkErr(err)
			}
			return app.printAdmin(map[string]any{"topic": topic, "deleted": true}, "topic %s deleted from the online configuration", topic)
		},
	}
	return []*cobra.Command{create, alter, del}
}

func (a *App) printAdmin(v any, format string, args ...any) error {
	if a.JSON {
		return a.printJSON(v)
	}
	fmt.Fprintf(a.Stdout, format+"\n", args...)
	return nil
}

// groupAdminCommands are `metaq groups delete`.
func groupAdminCommands(app *App) []*cobra.Command {
	var force bool
	del := &cobra.Command{
		Use:   "delete <group>",
		Short: "Delete a consumer group (its committed offsets and owners) from ZooKeeper",
		Long: `Delete /meta/consumers/<group>: committed offsets, owners and ids. Refused (exit 5) while
consumers are registered, unless --force (they would re-create what they own).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			if err := zkmeta.ValidateName("group", group); err != nil {
				return usageErr("%v", err)
			}
			zc, err := app.zkClient(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := app.opCtx(cmd.Context())
			defer cancel()
			if ok, err := zc.Exists(ctx, zc.Paths().Group(group)); err != nil {
				return zkErr(err)
			} else if !ok {
				return notFoundErr("group %s is not in ZooKeeper", group)
			}
			cons, err := zc.Consumers(ctx, group)
			if err != nil && !errors.Is(err, zkmeta.ErrNoNode) {
				return zkErr(err)
			}
			if len(cons) > 0 && !force {
				return refusedErr("group %s has %d registered consumer(s): stop them first, or use --force", group, len(cons))
			}
			if err := zc.DeleteTree(ctx, zc.Paths().Group(group)); err != nil {
				return zkErr(err)
			}
			return app.printAdmin(map[string]any{"group": group, "deleted": true}, "group %s deleted", group)
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete even while consumers are registered")
	return []*cobra.Command{del}
}

func newMessagesCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "messages",
		Short: "Act on single messages (resend)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("missing subcommand: metaq messages resend <msgId>")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "resend <msgId>",
		Short: "Send one stored message again to its topic (a new message with the same body, tag, keys and properties)",
		Long: `Look the message up by id (the id names its broker) and publish a copy to the same topic
through the cluster's producers' path (a partition chosen as for any send). The copy gets a new
id; the answer prints it. Consumers see it as a new message.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 0 {
				return usageErr("bad message id %q: want the decimal msgId", args[0])
			}
			ctx := cmd.Context()
			bid, _ := protocol.SplitMsgID(id)
			addr, err := app.brokerByID(ctx, bid)
			if err != nil {
				return err
			}
			octx, cancel := app.opCtx(ctx)
			defer cancel()
			m, err := app.admin().QueryID(octx, addr, id)
			if err != nil {
				var be *client.BrokerError
				if errors.As(err, &be) && be.Code == 404 {
					return notFoundErr("message %d not found", id)
				}
				return unavailableErr("looking up message %d: %v", id, errText(err))
			}
			pcfg := client.Config{ZKConnect: app.ZK, ZKRoot: app.ZKRoot, ZKConnectionTimeout: app.ConnectTimeout}
			app.applySecurity(&pcfg) // security.go
			p, err := client.NewProducer(pcfg)
			if err != nil {
				return err
			}
			defer p.Close()
			cp := &client.Message{Topic: m.Topic, Body: m.Body, Tag: m.Tag, Keys: m.Keys, Attribute: m.Attribute, Properties: m.Properties}
			sctx, scancel := app.opCtx(ctx)
			defer scancel()
			r, err := p.Send(sctx, cp)
			if err != nil {
				return unavailableErr("resending message %d to %s: %v", id, m.Topic, errText(err))
			}
			return app.printAdmin(map[string]any{"msgId": id, "topic": m.Topic, "newMsgId": r.MsgID, "partition": r.Partition.String(), "offset": r.Offset},
				"message %d resent to %s as %d (%s@%d)", id, m.Topic, r.MsgID, r.Partition, r.Offset)
		},
	})
	return cmd
}

// newBrokerReloadCommand is `metaq broker reload`.
func newBrokerReloadCommand(app *App) *cobra.Command {
	var pid int
	var server string
	cmd := &cobra.Command{
		Use:   "reload (--pid N | --server host:port)",
		Short: "Make a running broker re-read its server.ini topic sections (sends SIGHUP)",
		Long: `Send SIGHUP to a broker process on this machine (--pid, or --server: the pid its stats
report). The broker re-reads its server.ini and applies the [topic=…] sections at once (MetaQ's
reload-config). A file that also changes a key outside the topic sections is refused as a whole
(they need a restart; the broker logs which keys, and nothing is applied). Only a process
running "metaq broker" is signalled (exit 3 for any other pid).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pid <= 0 && server == "" {
				return usageErr("give --pid or --server")
			}
			if pid <= 0 {
				ctx, cancel := app.opCtx(cmd.Context())
				defer cancel()
				stats, err := app.admin().Stats(ctx, server, "")
				if err != nil {
					return unavailableErr("%s: %v", server, errText(err))
				}
				for _, s := range stats {
					if s.Key == "pid" {
						pid, _ = strconv.Atoi(s.Value)
					}
				}
				if pid <= 0 {
					return fmt.Errorf("%s did not report its pid", server)
				}
			}
			// SIGHUP ends most other processes: signal only a metaq broker (a mistyped --pid, or the
			// pid of a broker on another machine, named some other local process).
			if err := checkBrokerProcess(pid); err != nil {
				return err
			}
			proc, err := os.FindProcess(pid)
			if err == nil {
				err = proc.Signal(syscall.SIGHUP)
			}
			if err != nil {
				return fmt.Errorf("signalling broker pid %d: %w (is it on this machine?)", pid, err)
			}
			fmt.Fprintf(app.Stdout, "sent SIGHUP to broker pid %d: it reloads its topic sections (see its log)\n", pid)
			return nil
		},
	}
	cmd.Flags().IntVar(&pid, "pid", 0, "the broker's process id")
	cmd.Flags().StringVar(&server, "server", "", "the broker's host:port (on this machine)")
	return cmd
}

// checkBrokerProcess: the process pid on this machine runs "metaq broker" (a "broker" argument
// in /proc/<pid>/cmdline); where /proc is not mounted nothing is checked.
func checkBrokerProcess(pid int) error {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return notFoundErr("no process %d on this machine (is the broker on another one?)", pid)
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) > 1 && slices.Contains(args[1:], "broker") {
		return nil
	}
	return notFoundErr("process %d (%s) is not a metaq broker: not signalled (is the broker on another machine?)", pid, args[0])
}

// subscribeSIGHUP subscribes to SIGHUP for the whole life of `metaq broker`:
// from before anything starts, so that a SIGHUP during start-up (a long crash
// recovery) does not end the process (its default action), until it exits.
// One SIGHUP received while no reloadOnSIGHUP runs is kept and applied when
// the next one starts.
func subscribeSIGHUP() (ch <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c, func() { signal.Stop(c) }
}

// reloadOnSIGHUP makes SIGHUP (from ch, subscribeSIGHUP) reload the broker's
// topic sections until stop.
func reloadOnSIGHUP(b *broker.Broker, ch <-chan os.Signal, log interface{ Error(string, ...any) }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ch:
				if err := b.ReloadTopics(); err != nil {
					log.Error("reload failed; the topic configuration is unchanged", "err", err)
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
