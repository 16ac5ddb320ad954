package cli

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/benchkit"
)

// zk-offsets (docs/scaling.md): the write rate a ZooKeeper ensemble (--zk) sustains for
// offset-commit-like writes — set-data of a ~40-byte value on --partitions nodes — one write per
// request (--zk-inflight requests pipelined on one session), then in multi-ops of --zk-multi
// set-datas. The nodes live under <zkRoot>/bench-zk-<time> and are deleted afterwards.

type zkBenchOpts struct {
	inflight int
	multi    int
}

func (a *App) benchZK(ctx context.Context, o *benchOpts) error {
	zc, err := a.zkClient(ctx)
	if err != nil {
		return err
	}
	base := "/bench-zk-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	n := o.partitions
	data := []byte("281474976710656-123456789") // the size of an offset node's value
	conn := zc.Conn()
	full := func(i int) string { return zc.FullPath(base + "/" + strconv.Itoa(i)) }
	if err := zc.EnsurePath(ctx, base); err != nil {
		return benchErr(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := zc.DeleteTree(cctx, base); err != nil {
			a.warnf("bench zk-offsets: removing %s: %v", base, err)
		}
	}()
	// Create the nodes, pipelined (not measured).
	if err := zkPipelined(ctx, o.zk.inflight, n, func(i int) error {
		_, err := conn.Create(full(i), data, 0, zk.WorldACL(zk.PermAll))
		return err
	}, nil); err != nil {
		return benchErr(fmt.Errorf("creating %d nodes: %w", n, err))
	}
	var results []benchkit.Result
	run := func(workload, desc string, per int, op func(i int) error) {
		r := benchkit.Result{System: "zookeeper", Workload: workload, MsgSize: len(data)}
		var done atomic.Int64
		dctx, cancel := context.WithTimeout(ctx, o.duration)
		start := time.Now()
		err := zkPipelined(dctx, o.zk.inflight, 0, op, func() { done.Add(int64(per)) })
		el := time.Since(start)
		cancel()
		if err != nil && ctx.Err() == nil && dctx.Err() == nil {
			r.Error = err.Error()
		} else {
			r.SetThroughput(done.Load(), el)
			r.Notes = desc
		}
		results = append(results, r)
	}
	var next atomic.Int64
	run("zk-set", fmt.Sprintf("set-data of %d bytes on %d nodes, one per request, %d requests in flight on one session (%s)", len(data), n, o.zk.inflight, a.ZK),
		1, func(int) error {
			i := int(next.Add(1) % int64(n))
			_, err := conn.Set(full(i), data, -1)
			return err
		})
	m := o.zk.multi
	run("zk-multi", fmt.Sprintf("multi-ops of %d set-datas on %d nodes, %d multis in flight on one session; msgs = node writes (%s)", m, n, o.zk.inflight, a.ZK),
		m, func(int) error {
			ops := make([]any, m)
			for k := range ops {
				ops[k] = &zk.SetDataRequest{Path: full(int(next.Add(1) % int64(n))), Data: data, Version: -1}
			}
			_, err := conn.Multi(ops...)
			return err
		})
	for _, r := range results {
		if a.JSON {
			if err := benchkit.WriteJSON(a.Stdout, r); err != nil {
				return err
			}
		}
	}
	if !a.JSON {
		writeBenchTable(a.Stdout, results)
	}
	for _, r := range results {
		if r.Error != "" {
			return silentExit{ExitFailure}
		}
	}
	return nil
}

// zkPipelined runs op from inflight goroutines until ctx ends, or for i in [0, count) when
// count > 0; ok runs after each success. The first error stops it.
func zkPipelined(ctx context.Context, inflight, count int, op func(i int) error, ok func()) error {
	var next atomic.Int64
	var errOnce sync.Once
	var first error
	var wg sync.WaitGroup
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if count > 0 && i >= count {
					return
				}
				if err := op(i); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				if ok != nil {
					ok()
				}
			}
		}()
	}
	wg.Wait()
	return first
}
