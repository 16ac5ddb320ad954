package cli

import (
	"context"
	"time"

	"github.com/metaqgo/metaq/client"
)

// refreshEvery bounds how often an anonymous consumer re-reads where a partition is served.
const refreshEvery = 2 * time.Second

// refreshAddr re-reads where a ZooKeeper partition is served (client.FetchAddr: its master, else
// its lowest slave) — at once after a connection error (force), else at most every
// refreshEvery — and switches the assignment over. So `metaq consume` falls back to a slave when
// the master's node is gone and returns to the master when it is back; the offset carries over
// unchanged because every node of a group holds the same log (docs/replication.md).
func (c *consumeRun) refreshAddr(ctx context.Context, as *assignment, force bool) {
	if as.p.BrokerID < 0 || (!force && time.Since(as.resolved) < refreshEvery) {
		return // a --broker partition has one address
	}
	as.resolved = time.Now()
	zc, err := c.app.zkClient(ctx)
	if err != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bs, err := zc.Brokers(rctx)
	if err != nil {
		return
	}
	for _, b := range bs {
		if b.ID != as.p.BrokerID {
			continue
		}
		if addr := client.FetchAddr(b); addr != "" && addr != as.addr {
			role := "its master"
			if addr != b.Master {
				role = "a slave (the master is not registered)"
			}
			c.app.logf("partition %s: reading from %s now, %s, at offset %d", as.p, addr, role, as.offset)
			as.addr = addr
		}
		return
	}
}
