package cli

import (
	"bufio"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

type consumeOpts struct {
	topic          string
	group          string
	from           string
	count          int64
	tag            string
	where          string
	timeout        time.Duration
	format         string
	partition      string
	broker         string
	maxWait        time.Duration
	fetchSize      int
	commitInterval time.Duration
	quiet          bool
	trace          bool // with --group: write trace records (docs/trace.md)
}

func newConsumeCommand(app *App) *cobra.Command {
	var o consumeOpts
	cmd := &cobra.Command{
		Use:   "consume --topic <topic> [--group <group>] [--from earliest|latest|<time>] [--count N]",
		Short: "Receive messages from a topic and print them",
		Long: `Receive a topic's messages and print them, one per line (--format json: one JSON object per
line with msgId, topic, brokerId, partition, offset, tag, keys, storeTime, body).

With --group the command is a member of that consumer group, as MetaQ's consumers are: it
registers in ZooKeeper, shares the topic's partitions with the group's other consumers (MetaQ's
balancing), starts from the group's committed offsets and commits what it printed (every
--commit-interval and on exit). --from only applies to partitions the group has not committed
yet (use 'metaq offsets reset' to move a group). Without --group it reads every partition
anonymously and commits nothing.

--from: earliest (the oldest retained message), latest (only new messages), a time (RFC 3339,
-<duration> for that long ago, @<unix ms>: the first message stored at or after it), or a queue
offset. Default: earliest for a group without commits, latest without a group.

The command ends after --count messages, after --timeout, or on Ctrl-C. Exit status 6 when
--timeout ended it before --count messages arrived.`,
		Example: `  metaq consume --topic test --from earliest --count 1
  metaq consume -t orders -g billing --tag 'paid||refunded' --format json
  metaq consume -t orders --where "TAGS IN ('paid','refunded') AND amount > 100"
  metaq consume -t test --from 2026-11-29T08:00:00Z --timeout 10s
  metaq consume -t test --from -5m --broker 127.0.0.1:8123 --partition 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.consume(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.topic, "topic", "t", "", "topic (required)")
	f.StringVarP(&o.group, "group", "g", "", "consumer group (committed offsets); empty = anonymous, nothing committed")
	f.StringVar(&o.from, "from", "", "start: earliest, latest, a time (RFC 3339, -<duration>, @<unix ms>) or an offset")
	f.Int64VarP(&o.count, "count", "n", 0, "stop after this many messages (0 = no limit)")
	f.StringVar(&o.tag, "tag", "", "only messages with these tags: a or a||b (filtered by the broker, checked again here)")
	f.StringVar(&o.where, "where", "", "only messages matching this SQL92 expression over their properties, e.g. \"TAGS IN ('paid') AND amount > 100\" (filtered by the broker, checked again here)")
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long (0 = no limit)")
	f.StringVar(&o.format, "format", formatText, "output: text (the body), json, or verbose (header line + body)")
	f.StringVarP(&o.partition, "partition", "p", "", "only this partition: <brokerId>-<partition>, or <partition> (anonymous mode only)")
	f.StringVar(&o.broker, "broker", "", "read from this broker (host:port) directly, without ZooKeeper (anonymous mode only)")
	f.DurationVar(&o.maxWait, "max-wait", time.Second, "how long the broker holds a fetch while no message is available (long polling)")
	f.IntVar(&o.fetchSize, "fetch-size", 1<<20, "most bytes per fetch")
	f.DurationVar(&o.commitInterval, "commit-interval", time.Second, "with --group: how often offsets are committed")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print no messages, only a summary at the end")
	f.BoolVar(&o.trace, "trace", false, "with --group: write message-trace records of the deliveries to %TRACE% (see 'metaq trace')")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// delivery is what the printer gets: a fetched batch (anonymous reading), or one message a
// group consumer's handler waits on — printed is signalled once it has reached stdout.
type delivery struct {
	msgs    []client.Message
	printed chan struct{} // cap 1; nil for batches
}

// consumeRun is the state of one `metaq consume` run.
type consumeRun struct {
	app         *App
	o           *consumeOpts
	start       position
	out         chan delivery
	printerDone chan struct{} // closed when the printer stopped
	cancel      context.CancelFunc

	mu       sync.Mutex
	fetchErr error
}

func (a *App) consume(cmd *cobra.Command, o *consumeOpts) error {
	if a.JSON {
		o.format = formatJSON
	}
	if err := validFormat(o.format); err != nil {
		return err
	}
	if !protocol.ValidName(o.topic) {
		return usageErr("bad topic name %q", o.topic)
	}
	if o.group != "" {
		if err := zkmeta.ValidateName("group", o.group); err != nil {
			return usageErr("%v", err)
		}
		if o.broker != "" || o.partition != "" {
			return usageErr("--broker and --partition are for anonymous consumption; a group shares the partitions its own way")
		}
	}
	if o.trace && o.group == "" {
		return usageErr("--trace needs --group (anonymous reading has no handler calls to trace)")
	}
	if o.count < 0 || o.timeout < 0 || o.fetchSize < 1 || o.maxWait < 0 || o.commitInterval <= 0 {
		return usageErr("--count, --timeout, --max-wait must be >= 0, --fetch-size and --commit-interval > 0")
	}
	if err := checkWhere(o); err != nil {
		return err
	}
	from := o.from
	if from == "" {
		from = "latest"
		if o.group != "" {
			from = "earliest"
		}
	}
	startPos, err := parseResetTarget(from, time.Now())
	if err != nil {
		return err
	}
	c := &consumeRun{app: a, o: o, start: startPos, out: make(chan delivery, 16), printerDone: make(chan struct{})}

	parent := cmd.Context()
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	c.cancel = cancel
	var timedOut <-chan time.Time
	if o.timeout > 0 {
		t := time.NewTimer(o.timeout)
		defer t.Stop()
		timedOut = t.C
	}

	// stop ends the reading once the printer is done: the fetchers return, or the group
	// consumer commits what was printed and leaves the group.
	var stop func()
	if o.group == "" {
		stop, err = c.readAnonymously(ctx)
	} else {
		stop, err = c.joinGroup(ctx)
	}
	if err != nil {
		return err
	}
	startT := time.Now()
	n, reason, outErr := c.print(parent, ctx, timedOut)
	cancel()
	stop()
	if o.quiet {
		el := time.Since(startT)
		fmt.Fprintf(a.Stdout, "received %d message(s) from %s in %s\n", n, o.topic, el.Round(time.Millisecond))
	}
	c.mu.Lock()
	fetchErr := c.fetchErr
	c.mu.Unlock()
	switch {
	case outErr != nil:
		return outErr
	case fetchErr != nil && reason == "error":
		return fetchErr
	case reason == "timeout" && o.count > 0:
		a.warnf("timed out after %s with %d of %d message(s)", o.timeout, n, o.count)
		return silentExit{code: ExitTimeout}
	case reason == "interrupted" && o.count > 0:
		return silentExit{code: ExitInterrupted}
	}
	return nil
}

// print writes the delivered messages to stdout until --count, --timeout, Ctrl-C (parent) or
// a fatal fetch error (ctx). Group deliveries are acknowledged only once flushed to stdout, so
// the group never commits a message that was not printed.
func (c *consumeRun) print(parent, ctx context.Context, timedOut <-chan time.Time) (n int64, reason string, err error) {
	a, o := c.app, c.o
	defer close(c.printerDone)
	prog := a.newProgress("consume "+o.topic+":", o.quiet)
	defer prog.finish()
	w := bufio.NewWriterSize(a.Stdout, 64<<10)
	var acks []chan struct{} // printed into w, not flushed yet
	flush := func() error {
		if err := w.Flush(); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		for _, ack := range acks {
			ack <- struct{}{}
		}
		acks = acks[:0]
		return nil
	}
	for {
		select {
		case d := <-c.out:
			for i := range d.msgs {
				if !o.quiet {
					if err := printMessage(w, o.format, &d.msgs[i]); err != nil {
						return n, "error", fmt.Errorf("writing output: %w", err)
					}
				}
				n++
				prog.add(1)
				if o.count > 0 && n >= o.count {
					reason = "count"
					break
				}
			}
			if d.printed != nil {
				acks = append(acks, d.printed)
			}
			if reason != "" || len(c.out) == 0 {
				if err := flush(); err != nil {
					return n, "error", err
				}
			}
			if reason != "" {
				return n, reason, nil
			}
		case <-timedOut:
			return n, "timeout", flush()
		case <-parent.Done():
			return n, "interrupted", flush()
		case <-ctx.Done():
			return n, "error", flush()
		}
	}
}

// fail records a fatal fetch error and ends the run.
func (c *consumeRun) fail(err error) {
	c.mu.Lock()
	if c.fetchErr == nil {
		c.fetchErr = err
	}
	c.mu.Unlock()
	c.cancel()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
