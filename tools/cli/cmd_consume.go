package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

type consumeOpts struct {
	topic          string
	group          string
	from           string
	count          int64
	tag            string
	timeout        time.Duration
	format         string
	partition      string
	broker         string
	maxWait        time.Duration
	fetchSize      int
	commitInterval time.Duration
	quiet          bool
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
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long (0 = no limit)")
	f.StringVar(&o.format, "format", formatText, "output: text (the body), json, or verbose (header line + body)")
	f.StringVarP(&o.partition, "partition", "p", "", "only this partition: <brokerId>-<partition>, or <partition> (anonymous mode only)")
	f.StringVar(&o.broker, "broker", "", "read from this broker (host:port) directly, without ZooKeeper (anonymous mode only)")
	f.DurationVar(&o.maxWait, "max-wait", time.Second, "how long the broker holds a fetch while no message is available (long polling)")
	f.IntVar(&o.fetchSize, "fetch-size", 1<<20, "most bytes per fetch")
	f.DurationVar(&o.commitInterval, "commit-interval", time.Second, "with --group: how often offsets are committed")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print no messages, only a summary at the end")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// assignment is a partition being read.
type assignment struct {
	addr     string
	brokerID int
	p        zkmeta.Partition
	offset   int64 // next offset to fetch
}

// delivered is a batch of messages of one partition handed from a fetcher to the printer.
type delivered struct {
	p    zkmeta.Partition
	msgs []message
}

// consumer is the state of one `metaq consume` run.
type consumer struct {
	app    *App
	o      *consumeOpts
	filter *protocol.TagFilter
	start  position
	out    chan delivered
	cancel context.CancelFunc // ends the run (fatal fetch error)

	mu       sync.Mutex
	printed  map[zkmeta.Partition]zkmeta.Offset // next offset after the last printed message
	dirty    map[zkmeta.Partition]bool
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
	if o.count < 0 || o.timeout < 0 || o.fetchSize < 1 || o.maxWait < 0 || o.commitInterval <= 0 {
		return usageErr("--count, --timeout, --max-wait must be >= 0, --fetch-size and --commit-interval > 0")
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
	c := &consumer{
		app: a, o: o, start: startPos,
		out:     make(chan delivered, 16),
		printed: map[zkmeta.Partition]zkmeta.Offset{},
		dirty:   map[zkmeta.Partition]bool{},
	}
	if o.tag != "" && o.tag != "*" {
		c.filter = protocol.ParseTagFilter(o.tag)
	}

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

	var wg sync.WaitGroup
	var group *groupMember
	if o.group == "" {
		assigns, err := c.anonymousAssignments(ctx)
		if err != nil {
			return err
		}
		for _, as := range assigns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.fetch(ctx, as)
			}()
		}
	} else {
		group, err = c.joinGroup(ctx)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			group.run(ctx)
		}()
	}

	prog := a.newProgress("consume "+o.topic+":", o.quiet)
	w := bufio.NewWriterSize(a.Stdout, 64<<10)
	var n int64
	startT := time.Now()
	var commitTick <-chan time.Time
	if group != nil {
		t := time.NewTicker(o.commitInterval)
		defer t.Stop()
		commitTick = t.C
	}
	reason := ""
	var outErr error
print:
	for {
		select {
		case d := <-c.out:
			for i := range d.msgs {
				m := &d.msgs[i]
				if !o.quiet {
					if err := printMessage(w, o.format, m); err != nil {
						outErr = fmt.Errorf("writing output: %w", err)
						reason = "error"
						break print
					}
				}
				n++
				prog.add(1)
				c.mu.Lock()
				c.printed[d.p] = zkmeta.Offset{MsgID: m.MsgID, Offset: m.Offset + 1}
				c.dirty[d.p] = true
				c.mu.Unlock()
				if o.count > 0 && n >= o.count {
					reason = "count"
					break print
				}
			}
			if len(c.out) == 0 {
				_ = w.Flush()
			}
		case <-commitTick:
			_ = w.Flush()
			group.commit(ctx)
		case <-timedOut:
			reason = "timeout"
			break print
		case <-parent.Done():
			reason = "interrupted"
			break print
		case <-ctx.Done():
			reason = "error"
			break print
		}
	}
	_ = w.Flush()
	prog.finish()
	cancel()
	wg.Wait()
	if group != nil {
		group.leave()
	}
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

// fail records a fatal fetch error and ends the run.
func (c *consumer) fail(err error) {
	c.mu.Lock()
	if c.fetchErr == nil {
		c.fetchErr = err
	}
	c.mu.Unlock()
	c.cancel()
}

// anonymousAssignments lists every partition to read (or the --partition one) with its start.
func (c *consumer) anonymousAssignments(ctx context.Context) ([]*assignment, error) {
	a, o := c.app, c.o
	ps, err := parsePartitionSpec(o.partition)
	if err != nil {
		return nil, err
	}
	var assigns []*assignment
	if o.broker != "" {
		if ps.Set && ps.BrokerID >= 0 {
			return nil, usageErr("with --broker, --partition is the broker's partition number, not %s", ps)
		}
		conn, err := a.broker(ctx, o.broker)
		if err != nil {
			return nil, err
		}
		var parts []int
		if ps.Set {
			parts = []int{ps.Partition}
		} else if parts, err = probePartitions(ctx, a, conn, o.topic); err != nil {
			return nil, err
		}
		for _, p := range parts {
			assigns = append(assigns, &assignment{addr: o.broker, brokerID: -1, p: zkmeta.Partition{BrokerID: -1, Partition: p}})
		}
	} else {
		tp, err := a.topicPartitions(ctx, o.topic, false)
		if err != nil {
			return nil, err
		}
		if len(tp.Partitions) == 0 {
			return nil, notFoundErr("topic %s is not registered in ZooKeeper %s (root %s); nothing to consume yet", o.topic, a.ZK, a.ZKRoot)
		}
		parts := tp.Partitions
		if ps.Set {
			p, err := ps.resolve(o.topic, parts)
			if err != nil {
				return nil, err
			}
			parts = []zkmeta.Partition{p}
		}
		for _, p := range parts {
			assigns = append(assigns, &assignment{addr: readAddr(tp.Brokers[p.BrokerID]), brokerID: p.BrokerID, p: p})
		}
	}
	for _, as := range assigns {
		off, err := c.startOffset(ctx, as)
		if err != nil {
			return nil, err
		}
		as.offset = off
	}
	return assigns, nil
}

// probePartitions finds a standalone broker's partitions of a topic: 0, 1, … until the broker
// says the partition does not exist.
func probePartitions(ctx context.Context, a *App, conn *brokerConn, topic string) ([]int, error) {
	var parts []int
	for p := 0; p < 65536; p++ {
		octx, cancel := a.opCtx(ctx)
		_, err := conn.Offset(octx, topic, p, 0)
		cancel()
		var be *BrokerError
		if errors.As(err, &be) && be.Code == 404 {
			break
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return nil, notFoundErr("broker %s does not serve topic %s", conn.addr, topic)
	}
	return parts, nil
}

func (c *consumer) startOffset(ctx context.Context, as *assignment) (int64, error) {
	conn, err := c.app.broker(ctx, as.addr)
	if err != nil {
		return 0, err
	}
	octx, cancel := c.app.opCtx(ctx)
	defer cancel()
	return c.start.resolve(octx, conn, c.o.topic, as.p.Partition)
}

// fetch reads one partition until ctx ends, handing batches to the printer.
func (c *consumer) fetch(ctx context.Context, as *assignment) {
	a, o := c.app, c.o
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := a.broker(ctx, as.addr)
		if err == nil {
			gctx, cancel := context.WithTimeout(ctx, o.maxWait+a.ConnectTimeout)
			var res getOutcome
			res, err = conn.Get(gctx, o.topic, c.groupName(), as.p.Partition, as.offset, o.fetchSize, o.maxWait, o.tag)
			cancel()
			if err == nil {
				backoff = 100 * time.Millisecond
				switch {
				case res.Moved:
					a.logf("partition %s: offset %d is out of range, moving to %d", as.p, as.offset, res.MovedTo)
					if res.MovedTo == as.offset { // nothing to skip to: wait like an empty fetch
						sleepCtx(ctx, o.maxWait)
					}
					as.offset = res.MovedTo
				case res.Empty:
					if o.maxWait == 0 {
						sleepCtx(ctx, 200*time.Millisecond)
					}
				default:
					msgs := res.Msgs[:0]
					for _, m := range res.Msgs {
						as.offset = m.Offset + 1
						if c.filter == nil || c.filter.MatchTag(m.Tag) {
							msgs = append(msgs, m)
						}
					}
					if len(msgs) > 0 {
						select {
						case c.out <- delivered{p: as.p, msgs: msgs}:
						case <-ctx.Done():
							return
						}
					}
				}
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		var be *BrokerError
		if errors.As(err, &be) && (be.Code == 404 || be.Code == 403 || be.Code == 400) {
			c.fail(fmt.Errorf("partition %s: %w", as.p, err))
			return
		}
		a.logf("partition %s: %v; retrying in %s", as.p, err, backoff)
		sleepCtx(ctx, backoff)
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *consumer) groupName() string {
	if c.o.group != "" {
		return c.o.group
	}
	return cliGroup
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ---- group membership (MetaQ's balancing) ----

// groupMember is this process as a consumer of a group: it registers, watches the group's
// consumers and the topic's partitions, owns its share of the partitions (MetaQ's balance:
// partitions and consumers sorted, each consumer gets ⌊P/C⌋ and the first P mod C one more),
// fetches them from their committed offsets and commits what was printed.
type groupMember struct {
	c     *consumer
	zc    *zkmeta.Client
	id    string
	node  *zkmeta.EphemeralNode
	owned map[zkmeta.Partition]*ownedPartition
}

type ownedPartition struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *consumer) joinGroup(ctx context.Context) (*groupMember, error) {
	zc, err := c.app.zkClient(ctx)
	if err != nil {
		return nil, err
	}
	// go-zookeeper v1.0.4 re-sends its watches on a new connection (sendSetWatches) on its loop
	// goroutine right after the session is established, reading the last zxid without a lock
	// while responses update it (go-zookeeper/zk PR #35, unmerged): a watch set in the first
	// moments of a session is a data race the race detector reports. Let that settle first.
	sleepCtx(ctx, 100*time.Millisecond)
	id := zkmeta.NewConsumerID()
	octx, cancel := c.app.opCtx(ctx)
	defer cancel()
	node, err := zc.RegisterConsumer(octx, c.o.group, id, []string{c.o.topic})
	if err != nil {
		if node != nil {
			_ = node.Remove(context.Background())
		}
		return nil, zkErr(fmt.Errorf("registering in group %s: %w", c.o.group, err))
	}
	c.app.logf("joined group %s as %s", c.o.group, zkmeta.ConsumerNodeName(c.o.group, id))
	return &groupMember{c: c, zc: zc, id: id, node: node, owned: map[zkmeta.Partition]*ownedPartition{}}, nil
}

// share computes the partitions the consumer me should own.
func share(parts []zkmeta.Partition, consumers []string, me string) []zkmeta.Partition {
	ps := append([]zkmeta.Partition(nil), parts...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Less(ps[j]) })
	cs := append([]string(nil), consumers...)
	sort.Strings(cs)
	idx := sort.SearchStrings(cs, me)
	if idx >= len(cs) || cs[idx] != me || len(ps) == 0 {
		return nil
	}
	per, extra := len(ps)/len(cs), len(ps)%len(cs)
	start := idx*per + min(idx, extra)
	n := per
	if idx < extra {
		n++
	}
	return ps[start : start+n]
}

// run rebalances on every change of the group or the topic until ctx ends.
func (g *groupMember) run(ctx context.Context) {
	c := g.c
	consumersCh := g.zc.WatchConsumers(ctx, c.o.group)
	partsCh := g.zc.WatchPartitions(ctx, c.o.topic, zkmeta.Subscribe)
	var consumers []zkmeta.ConsumerInfo
	var tp zkmeta.TopicPartitions
	haveC, haveP := false, false
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	defer g.releaseAll()
	for {
		select {
		case <-ctx.Done():
			return
		case cs, ok := <-consumersCh:
			if !ok {
				return
			}
			consumers, haveC = cs, true
		case p, ok := <-partsCh:
			if !ok {
				return
			}
			tp, haveP = p, true
		case <-retry.C:
		}
		if !haveC || !haveP {
			continue
		}
		var names []string
		for _, ci := range consumers {
			for _, t := range ci.Topics {
				if t == c.o.topic {
					names = append(names, ci.Node)
					break
				}
			}
		}
		want := share(tp.Partitions, names, zkmeta.ConsumerNodeName(c.o.group, g.id))
		if !g.rebalance(ctx, want, tp) {
			retry.Reset(500 * time.Millisecond) // a partition is still owned by someone else
		}
	}
}

// rebalance releases what is no longer ours and claims what is; false when a claim must be
// retried later.
func (g *groupMember) rebalance(ctx context.Context, want []zkmeta.Partition, tp zkmeta.TopicPartitions) bool {
	c := g.c
	keep := map[zkmeta.Partition]bool{}
	for _, p := range want {
		keep[p] = true
	}
	for p := range g.owned {
		if !keep[p] {
			g.release(p)
		}
	}
	complete := true
	for _, p := range want {
		if _, ok := g.owned[p]; ok {
			continue
		}
		octx, cancel := c.app.opCtx(ctx)
		ok, holder, err := g.zc.ClaimPartition(octx, c.o.group, c.o.topic, p, g.id)
		cancel()
		if err != nil || !ok {
			if err != nil && ctx.Err() == nil {
				c.app.logf("claiming %s: %v", p, err)
			} else if !ok {
				c.app.logf("partition %s is still owned by %s; retrying", p, holder)
			}
			complete = false
			continue
		}
		as := &assignment{addr: readAddr(tp.Brokers[p.BrokerID]), brokerID: p.BrokerID, p: p}
		octx, cancel = c.app.opCtx(ctx)
		off, committed, err := g.zc.LoadOffset(octx, c.o.group, c.o.topic, p)
		cancel()
		if err == nil && committed {
			as.offset = off.Offset
		} else if err == nil {
			as.offset, err = c.startOffset(ctx, as)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.app.warnf("partition %s: %v", p, err)
			}
			_ = g.zc.ReleasePartition(context.Background(), c.o.group, c.o.topic, p, g.id)
			complete = false
			continue
		}
		c.app.logf("owning %s from offset %d", p, as.offset)
		pctx, pcancel := context.WithCancel(ctx)
		op := &ownedPartition{cancel: pcancel, done: make(chan struct{})}
		g.owned[p] = op
		go func() {
			defer close(op.done)
			c.fetch(pctx, as)
		}()
	}
	return complete
}

// release stops fetching p, commits its position and gives up ownership.
func (g *groupMember) release(p zkmeta.Partition) {
	op := g.owned[p]
	op.cancel()
	<-op.done
	delete(g.owned, p)
	g.commitOne(p)
	ctx, cancel := g.c.app.opCtx(context.Background())
	defer cancel()
	_ = g.zc.ReleasePartition(ctx, g.c.o.group, g.c.o.topic, p, g.id)
	g.c.app.logf("released %s", p)
}

func (g *groupMember) releaseAll() {
	for p := range g.owned {
		g.release(p)
	}
}

func (g *groupMember) commitOne(p zkmeta.Partition) {
	c := g.c
	c.mu.Lock()
	o, ok := c.printed[p]
	dirty := c.dirty[p]
	delete(c.dirty, p)
	c.mu.Unlock()
	if !ok || !dirty {
		return
	}
	ctx, cancel := c.app.opCtx(context.Background())
	defer cancel()
	if err := g.zc.CommitOffset(ctx, c.o.group, c.o.topic, p, o); err != nil {
		c.app.warnf("committing offset %d of %s: %v", o.Offset, p, err)
		c.mu.Lock()
		c.dirty[p] = true
		c.mu.Unlock()
	}
}

// commit writes every changed position.
func (g *groupMember) commit(ctx context.Context) {
	c := g.c
	c.mu.Lock()
	var ps []zkmeta.Partition
	for p := range c.dirty {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		if ctx.Err() != nil {
			return
		}
		g.commitOne(p)
	}
}

// leave commits what is left and unregisters (after run has returned).
func (g *groupMember) leave() {
	g.commit(context.Background())
	ctx, cancel := g.c.app.opCtx(context.Background())
	defer cancel()
	_ = g.node.Remove(ctx)
}
