package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// assignment is a partition read anonymously.
type assignment struct {
	addr     string
	p        zkmeta.Partition
	offset   int64     // next offset to fetch
	resolved time.Time // addr last read from ZooKeeper (consume_fallback.go)
}

// readAnonymously reads every partition of the topic (or the --partition one) from --from,
// without a group: nothing is registered or committed. One goroutine per partition fetches
// with client.Admin and hands the batches to the printer; the returned stop waits for them.
func (c *consumeRun) readAnonymously(ctx context.Context) (stop func(), err error) {
	assigns, err := c.anonymousAssignments(ctx)
	if err != nil {
		return nil, err
	}
	var filter *protocol.TagFilter
	if o := c.o; o.tag != "" && o.tag != "*" {
		filter = protocol.ParseTagFilter(o.tag)
	}
	var wg sync.WaitGroup
	for _, as := range assigns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.fetch(ctx, as, filter)
		}()
	}
	return wg.Wait, nil
}

// anonymousAssignments lists every partition to read (or the --partition one) with its start.
func (c *consumeRun) anonymousAssignments(ctx context.Context) ([]*assignment, error) {
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
		var parts []int
		if ps.Set {
			parts = []int{ps.Partition}
		} else if parts, err = c.probePartitions(ctx); err != nil {
			return nil, err
		}
		for _, p := range parts {
			assigns = append(assigns, &assignment{addr: o.broker, p: zkmeta.Partition{BrokerID: -1, Partition: p}})
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
			assigns = append(assigns, &assignment{addr: client.FetchAddr(tp.Brokers[p.BrokerID]), p: p})
		}
	}
	for _, as := range assigns {
		if as.offset, err = c.start.resolve(ctx, a.admin(), as.addr, o.topic, as.p.Partition); err != nil {
			return nil, err
		}
	}
	return assigns, nil
}

// probePartitions finds a standalone broker's partitions of the topic: 0, 1, … until the
// broker says the partition does not exist.
func (c *consumeRun) probePartitions(ctx context.Context) ([]int, error) {
	o := c.o
	var parts []int
	for p := 0; p < 65536; p++ {
		_, err := c.app.admin().MinOffset(ctx, o.broker, o.topic, p)
		if isNotFound(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return nil, notFoundErr("broker %s does not serve topic %s", o.broker, o.topic)
	}
	return parts, nil
}

// isNotFound reports whether a broker answered 404 (protocol.StatusNotFound): it does not
// serve the topic or partition, or has no such message.
func isNotFound(err error) bool {
	var be *client.BrokerError
	return errors.As(err, &be) && be.Code == protocol.StatusNotFound
}

// fetch reads one partition until ctx ends, handing batches to the printer. Connection
// failures are retried with backoff; a partition the broker refuses (or no longer serves)
// ends the run.
func (c *consumeRun) fetch(ctx context.Context, as *assignment, filter *protocol.TagFilter) {
	a, o := c.app, c.o
	req := client.FetchRequest{Topic: o.topic, Partition: as.p.Partition, MaxBytes: o.fetchSize, MaxWait: o.maxWait, Tags: o.tag, Where: o.where}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		c.refreshAddr(ctx, as, false) // consume_fallback.go
		req.Offset = as.offset
		start := time.Now()
		res, err := a.admin().FetchWith(ctx, as.addr, req)
		switch {
		case err != nil:
		case res.Moved:
			a.logf("partition %s: offset %d is out of range, moving to %d", as.p, as.offset, res.NextOffset)
			if res.NextOffset == as.offset { // nothing to skip to: wait like an empty fetch
				sleepCtx(ctx, o.maxWait)
			}
			as.offset = res.NextOffset
		case len(res.Messages) == 0:
			// Nothing new. An answer long before --max-wait is --max-wait 0, or a partition
			// the broker does not serve (any more): ask.
			if time.Since(start) < o.maxWait/2 || o.maxWait == 0 {
				if _, err = a.admin().MinOffset(ctx, as.addr, o.topic, as.p.Partition); err == nil {
					sleepCtx(ctx, 200*time.Millisecond)
				}
			}
		default:
			msgs := res.Messages[:0]
			for _, m := range res.Messages {
				if filter == nil || filter.MatchTag(m.Tag) {
					msgs = append(msgs, m)
				}
			}
			as.offset = res.NextOffset
			if len(msgs) > 0 {
				select {
				case c.out <- delivery{msgs: msgs}:
				case <-ctx.Done():
					return
				}
			}
		}
		if err == nil {
			backoff = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		var be *client.BrokerError
		if errors.As(err, &be) && (be.Code == 404 || be.Code == 403 || be.Code == 400) {
			c.fail(fmt.Errorf("partition %s: %w", as.p, err))
			return
		}
		a.logf("partition %s: %v; retrying in %s", as.p, err, backoff)
		sleepCtx(ctx, backoff)
		c.refreshAddr(ctx, as, true) // the master may be gone: a slave serves the same offsets
		backoff = min(backoff*2, 5*time.Second)
	}
}
