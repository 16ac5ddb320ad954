package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/metaqgo/metaq/client"
)

// joinShared makes the run a member of --group through broker-managed
// delivery (client.PushConsumer, docs/push.md): no partition ownership, the
// broker hands each message to one member and redelivers it when it is not
// acknowledged within --invisible. A message is acknowledged once printed;
// the ones not printed when the run ends are released (or time out) and go
// to another member.
func (c *consumeRun) joinShared(ctx context.Context) (stop func(), err error) {
	a, o := c.app, c.o
	cfg := a.clientConfig(slog.LevelWarn)
	cfg.Trace = o.trace // the member's handler calls (docs/trace.md)
	if o.broker != "" {
		cfg.ZKConnect, cfg.Brokers = "", []string{o.broker}
	} else if _, err := a.zkClient(ctx); err != nil {
		return nil, err
	}
	cons, err := client.NewPushConsumer(cfg, o.group, client.PushOptions{
		Concurrency: o.concurrency,
		Invisible:   o.invisible,
		MaxWait:     max(o.maxWait, 100*time.Millisecond),
	})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if o.where != "" {
		err = cons.SubscribeWhere(o.topic, o.where, c.handle)
	} else {
		err = cons.Subscribe(o.topic, o.tag, c.handle)
	}
	if err != nil {
		_ = cons.Close()
		return nil, usageErr("%v", err)
	}
	if err := cons.Start(ctx); err != nil {
		_ = cons.Close()
		return nil, err
	}
	a.logf("receiving %s as a shared member of group %s", o.topic, o.group)
	return func() {
		if err := cons.Close(); err != nil {
			a.warnf("leaving group %s: %v", o.group, err)
		}
	}, nil
}
