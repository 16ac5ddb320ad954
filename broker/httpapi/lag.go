package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/zkmeta"
)

// lagReadsPerSecond bounds the ZooKeeper reads of the lag tracker, so a
// cluster with many groups and partitions costs ZooKeeper a steady trickle
// instead of a burst every interval (a pass then takes longer than the
// interval, and the next pass starts right after it).
const lagReadsPerSecond = 200

// lagReadTimeout bounds each ZooKeeper read of a pass (not the pass, which
// takes as long as its reads at lagReadsPerSecond need).
var lagReadTimeout = time.Minute

// lagTracker reads, in the background, the committed offsets of every
// consumer group for the partitions this broker serves, and caches them.
// The lag itself is computed at scrape time against the store's current
// max offsets, so it moves with every put even between two refreshes.
type lagTracker struct {
	zk       *zkmeta.Client
	store    *store.Store
	brokerID int
	interval time.Duration
	maxSer   int
	log      *slog.Logger

	mu        sync.Mutex
	offsets   []committed    // last completed pass
	members   map[string]int // group → registered consumers (groups with offsets here)
	refreshed time.Time
	errors    int64
	passes    int64
	kick      chan struct{}
}

type committed struct {
	group, topic string
	partition    int32
	offset       int64
}

func newLagTracker(zk *zkmeta.Client, st *store.Store, brokerID int, interval time.Duration, maxSeries int, log *slog.Logger) *lagTracker {
	return &lagTracker{zk: zk, store: st, brokerID: brokerID, interval: interval, maxSer: maxSeries, log: log,
		members: map[string]int{}, kick: make(chan struct{}, 1)}
}

// run refreshes until ctx ends.
func (l *lagTracker) run(ctx context.Context) {
	pace := time.NewTicker(time.Second / lagReadsPerSecond)
	defer pace.Stop()
	next := time.NewTimer(0)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		case <-l.kick:
		}
		err := l.pass(ctx, pace.C)
		l.mu.Lock()
		if err != nil && ctx.Err() == nil {
			l.errors++
			l.log.Warn("reading consumer offsets from ZooKeeper for lag metrics", "err", err)
		}
		l.mu.Unlock()
		next.Reset(l.interval)
	}
}

// refresh asks for a pass now (tests, the dashboard after a reset).
func (l *lagTracker) refresh() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// pass reads every group's offsets of this broker's partitions, one
// ZooKeeper read per tick of pace.
func (l *lagTracker) pass(ctx context.Context, pace <-chan time.Time) error {
	wait := func() error {
		select {
		case <-pace:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	served := map[string]bool{}
	for _, t := range l.store.Topics() {
		served[t.Topic] = true
	}
	p := l.zk.Paths()
	// Each read has its own deadline: a pass over many groups and
	// partitions lasts longer than any one of them (docs/observability.md).
	read := func(f func(context.Context) error) error {
		rctx, cancel := context.WithTimeout(ctx, lagReadTimeout)
		defer cancel()
		return f(rctx)
	}
	var groups []string
	err := read(func(rctx context.Context) (err error) {
		groups, err = l.zk.Groups(rctx)
		return err
	})
	if err != nil {
		return err
	}
	prefix := strconv.Itoa(l.brokerID) + "-"
	var out []committed
	members := map[string]int{}
	for _, g := range groups {
		if err := wait(); err != nil {
			return err
		}
		var topics []string
		err := read(func(rctx context.Context) (err error) {
			topics, err = l.zk.Children(rctx, p.GroupOffsets(g))
			return err
		})
		if errors.Is(err, zkmeta.ErrNoNode) {
			continue
		} else if err != nil {
			return err
		}
		here := false
		for _, t := range topics {
			if !served[t] {
				continue
			}
			if err := wait(); err != nil {
				return err
			}
			var kids []string
			err := read(func(rctx context.Context) (err error) {
				kids, err = l.zk.Children(rctx, p.Offsets(g, t))
				return err
			})
			if errors.Is(err, zkmeta.ErrNoNode) {
				continue
			} else if err != nil {
				return err
			}
			for _, k := range kids {
				if !strings.HasPrefix(k, prefix) {
					continue
				}
				part, err := zkmeta.ParsePartition(k)
				if err != nil {
					continue
				}
				if err := wait(); err != nil {
					return err
				}
				var data []byte
				err = read(func(rctx context.Context) (err error) {
					data, _, err = l.zk.Get(rctx, p.Offsets(g, t)+"/"+k)
					return err
				})
				if errors.Is(err, zkmeta.ErrNoNode) {
					continue
				} else if err != nil {
					return err
				}
				o, err := zkmeta.ParseOffset(data)
				if err != nil {
					continue
				}
				here = true
				out = append(out, committed{group: g, topic: t, partition: int32(part.Partition), offset: o.Offset})
			}
		}
		if here {
			if err := wait(); err != nil {
				return err
			}
			var ids []string
			err := read(func(rctx context.Context) (err error) {
				ids, err = l.zk.Children(rctx, p.GroupIDs(g))
				return err
			})
			if err != nil && !errors.Is(err, zkmeta.ErrNoNode) {
				return err
			}
			members[g] = len(ids)
		}
	}
	l.mu.Lock()
	l.offsets, l.members, l.refreshed = out, members, time.Now()
	l.passes++
	l.mu.Unlock()
	return nil
}

var (
	dLag        = desc("metaq_consumer_lag_messages", "Messages not yet consumed by a group on one of this broker's partitions (max offset - committed offset); at most metricsMaxLagSeries series, largest first.", "group", "topic", "partition")
	dGroupLag   = desc("metaq_consumer_group_lag_messages", "Sum of a group's lag over this broker's partitions of a topic.", "group", "topic")
	dMembers    = desc("metaq_consumer_group_members", "Consumers registered in a group that has committed offsets on this broker.", "group")
	dLagAge     = desc("metaq_consumer_lag_refresh_timestamp_seconds", "Unix time of the last completed read of consumer offsets from ZooKeeper.")
	dLagErrors  = desc("metaq_consumer_lag_refresh_errors_total", "Failed reads of consumer offsets from ZooKeeper.")
	dLagDropped = desc("metaq_consumer_lag_series_dropped", "Per-partition lag series left out by metricsMaxLagSeries at the last scrape.")
)

func (l *lagTracker) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dLag, dGroupLag, dMembers, dLagAge, dLagErrors, dLagDropped} {
		ch <- d
	}
}

// Lag is one partition's lag (also used by the JSON API).
type Lag struct {
	Group, Topic string
	Partition    int32
	Committed    int64
	Max          int64
	Lag          int64
}

// lags computes the current lag of every cached committed offset.
func (l *lagTracker) lags() ([]Lag, map[string]int, time.Time, int64) {
	l.mu.Lock()
	offs, members, at, errs := l.offsets, l.members, l.refreshed, l.errors
	l.mu.Unlock()
	out := make([]Lag, 0, len(offs))
	for _, o := range offs {
		hi := l.store.MaxOffset(o.topic, o.partition)
		out = append(out, Lag{Group: o.group, Topic: o.topic, Partition: o.partition, Committed: o.offset, Max: hi, Lag: max(0, hi-o.offset)})
	}
	return out, members, at, errs
}

func (l *lagTracker) Collect(ch chan<- prometheus.Metric) {
	lags, members, at, errs := l.lags()
	type gt struct{ g, t string }
	sums := map[gt]int64{}
	for _, x := range lags {
		sums[gt{x.Group, x.Topic}] += x.Lag
	}
	for k, v := range sums {
		gauge(ch, dGroupLag, float64(v), k.g, k.t)
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i].Lag > lags[j].Lag })
	dropped := 0
	if len(lags) > l.maxSer {
		dropped = len(lags) - l.maxSer
		lags = lags[:l.maxSer]
	}
	for _, x := range lags {
		gauge(ch, dLag, float64(x.Lag), x.Group, x.Topic, strconv.Itoa(int(x.Partition)))
	}
	for g, n := range members {
		gauge(ch, dMembers, float64(n), g)
	}
	if !at.IsZero() {
		gauge(ch, dLagAge, float64(at.UnixNano())/1e9)
	}
	counter(ch, dLagErrors, float64(errs))
	gauge(ch, dLagDropped, float64(dropped))
}
