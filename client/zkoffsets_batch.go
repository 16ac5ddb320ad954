package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Batched offset commits (docs/scaling.md). A consumer that owns many
// partitions commits them all every CommitInterval; one conditional write
// per partition (a read and a write, each a round trip) makes that cost
// 2 × partitions round trips per interval. CommitBatch writes the partitions
// whose node this store wrote last in ZooKeeper multi-ops of up to
// multiOps set-data requests, each on the version its own last write
// produced: no read, one round trip per multiOps partitions. A version
// that matches means nobody else wrote the node since, so the rules of
// Commit (never move a partition back, except this store's own rewind)
// hold without reading it. When a multi fails (a version moved: the
// partition changed hands meanwhile, or any other error), its partitions
// go through Commit one by one, which reads and compares.

// offsetCommit is one partition's commit of a batch.
type offsetCommit struct {
	topic string
	p     Partition
	o     Offset
}

// batchOffsetStore is an OffsetStore that can write many commits at once;
// errs[i] receives the outcome of cs[i].
type batchOffsetStore interface {
	CommitBatch(ctx context.Context, cs []offsetCommit, errs []error)
}

// multiOps bounds the set-data requests of one multi (ZooKeeper's request
// limit, jute.maxbuffer, is 1 MiB; an offset write is ~150 bytes).
const multiOps = 500

func (s *zkOffsetStore) CommitBatch(ctx context.Context, cs []offsetCommit, errs []error) {
	if s.writeHook.Load() != nil { // tests that delay writes see every one through Commit
		for i, c := range cs {
			errs[i] = s.Commit(ctx, c.topic, c.p, c.o)
		}
		return
	}
	var ops []any
	var idx []int
	var slow []int
	s.mu.Lock()
	for i, c := range cs {
		k := partKey{c.topic, c.p}
		from, known := s.own[k]
		v, hasV := s.ver[k]
		switch {
		case !known || !hasV:
			slow = append(slow, i)
		case from == c.o:
			errs[i] = nil // stored already
		default:
			ops = append(ops, &zk.SetDataRequest{Path: s.zk.FullPath(s.zk.Paths().Offset(s.group, c.topic, c.p)),
				Data: []byte(c.o.String()), Version: v})
			idx = append(idx, i)
		}
	}
	s.mu.Unlock()
	for start := 0; start < len(ops); start += multiOps {
		end := min(start+multiOps, len(ops))
		resp, err := s.multi(ctx, ops[start:end])
		if err != nil {
			if ctx.Err() != nil {
				for _, i := range idx[start:end] {
					errs[i] = ctx.Err()
				}
				continue
			}
			slow = append(slow, idx[start:end]...)
			continue
		}
		for j, i := range idx[start:end] {
			nv := int32(-1)
			if j < len(resp) && resp[j].Stat != nil {
				nv = resp[j].Stat.Version
			}
			s.rememberWrite(partKey{cs[i].topic, cs[i].p}, cs[i].o, nv)
			errs[i] = nil
		}
	}
	for _, i := range slow {
		errs[i] = s.Commit(ctx, cs[i].topic, cs[i].p, cs[i].o)
	}
}

// multi runs one multi-op; ctx bounds the wait (an abandoned multi is
// harmless: every write in it is conditional).
func (s *zkOffsetStore) multi(ctx context.Context, ops []any) ([]zk.MultiResponse, error) {
	type out struct {
		resp []zk.MultiResponse
		err  error
	}
	done := make(chan out, 1)
	conn := s.zk.Conn()
	go func() {
		r, err := conn.Multi(ops...)
		done <- out{r, err}
	}()
	select {
	case o := <-done:
		return o.resp, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commitBatch is commitAll through a batchOffsetStore: the workers whose
// committable position moved are written together. Each worker's commitMu
// is held across the write, as commit holds it across Commit.
func (c *Consumer) commitBatch(ctx context.Context, bs batchOffsetStore, ws []*partWorker) error {
	var cs []offsetCommit
	var owners []*partWorker
	for _, w := range ws {
		w.commitMu.Lock()
		if w.final || !w.tr.ready() || c.noCommit.Load() {
			w.commitMu.Unlock()
			continue
		}
		o := w.tr.committable()
		if o == w.lastCommitted {
			w.commitMu.Unlock()
			continue
		}
		cs = append(cs, offsetCommit{w.key.topic, w.key.p, o})
		owners = append(owners, w)
	}
	errs := make([]error, len(cs))
	if len(cs) > 0 {
		bs.CommitBatch(ctx, cs, errs)
	}
	var all []error
	for i, w := range owners {
		if errs[i] == nil {
			w.lastCommitted = cs[i].o
		} else {
			all = append(all, fmt.Errorf("%s/%s: %w", w.key.topic, w.key.p, errs[i]))
		}
		w.commitMu.Unlock()
	}
	if err := c.store.Flush(ctx); err != nil {
		all = append(all, err)
	}
	return errors.Join(all...)
}
