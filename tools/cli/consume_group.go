package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/metaqgo/metaq/client"
)

// joinGroup makes the run a member of --group with a client.Consumer: it registers, takes its
// share of the partitions (MetaQ's balancing), starts from the group's committed offsets (--from
// where there are none), and commits what was printed. The returned stop closes the consumer:
// it commits and leaves the group.
//
// Only printed messages are committed: the handler hands its message to the printer and
// returns nil once it reached stdout. When the printer stops (--count, --timeout, Ctrl-C) the
// handlers still waiting return only when Close cancels their ctx, with an error — and a
// message whose handler gave up that way is not consumed (client.Handler), so it is not
// committed either.
func (c *consumeRun) joinGroup(ctx context.Context) (stop func(), err error) {
	a, o := c.app, c.o
	// The consumer opens a ZooKeeper session of its own and waits for it; connecting here first
	// fails fast (exit 4) when no ZooKeeper server listens.
	if _, err := a.zkClient(ctx); err != nil {
		return nil, err
	}
	cfg := a.clientConfig(slog.LevelWarn)
	cfg.Consumer = client.ConsumerOptions{
		CommitInterval: o.commitInterval,
		MaxFetchBytes:  o.fetchSize,
		MaxWait:        max(o.maxWait, time.Millisecond), // the client reads 0 as its default
	}
	cfg.Trace = o.trace
	switch c.start.kind {
	case "earliest":
		cfg.Consumer.From = client.FromEarliest
	case "latest":
		cfg.Consumer.From = client.FromLatest
	case "time":
		cfg.Consumer.From = client.FromTime(c.start.at)
	case "offset":
		zc, err := a.zkClient(ctx)
		if err != nil {
			return nil, err
		}
		cfg.Consumer.OffsetStore = offsetStart{client.NewZKOffsetStore(zc, o.group), func(ctx context.Context, p client.Partition) (int64, error) {
			addr, err := a.brokerByID(ctx, p.BrokerID)
			if err != nil {
				return 0, err
			}
			return c.start.resolve(ctx, a.admin(), addr, o.topic, p.Partition)
		}}
	}
	cons, err := client.NewConsumer(cfg, o.group)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if err := cons.Subscribe(o.topic, o.subscription(), c.handle); err != nil {
		_ = cons.Close()
		return nil, usageErr("%v", err)
	}
	if err := cons.Start(ctx); err != nil {
		_ = cons.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, a.zkUnreachable(err)
	}
	a.logf("joined group %s as %s_%s", o.group, o.group, cons.ID())
	return func() {
		if err := cons.Close(); err != nil {
			a.warnf("leaving group %s: %v", o.group, err)
		}
	}, nil
}

// handle is the group consumer's handler: it returns nil once the printer wrote m to stdout.
func (c *consumeRun) handle(ctx context.Context, m *client.Message) error {
	printed := make(chan struct{}, 1)
	select {
	case c.out <- delivery{msgs: []client.Message{*m}, printed: printed}:
		select {
		case <-printed:
			return nil
		case <-c.printerDone:
			select {
			case <-printed: // acknowledged as the printer stopped
				return nil
			default:
			}
		}
	case <-c.printerDone:
	}
	// The printer stopped without printing m. Returning an error now would have the retry
	// policy redeliver it; Close, which follows, cancels ctx: then m stays unconsumed.
	<-ctx.Done()
	return ctx.Err()
}

// offsetStart is the offset store of a group consuming --from <offset>: a partition the
// group has not committed starts at the valid offset nearest to it (the broker's `offset`).
type offsetStart struct {
	client.OffsetStore
	start func(ctx context.Context, p client.Partition) (int64, error)
}

func (s offsetStart) Load(ctx context.Context, topic string, p client.Partition) (client.Offset, bool, error) {
	o, ok, err := s.OffsetStore.Load(ctx, topic, p)
	if err != nil || ok {
		return o, ok, err
	}
	off, err := s.start(ctx, p)
	return client.Offset{MsgID: -1, Offset: off}, err == nil, err
}
