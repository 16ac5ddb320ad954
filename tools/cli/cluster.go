package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
)

// partitionSpec is a --partition value: "<brokerId>-<partition>" or a bare partition number
// (BrokerID -1: "whichever broker serves it", allowed when only one does).
type partitionSpec struct {
	BrokerID  int
	Partition int
	Set       bool
}

func parsePartitionSpec(s string) (partitionSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return partitionSpec{}, nil
	}
	if p, err := zkmeta.ParsePartition(s); err == nil {
		return partitionSpec{BrokerID: p.BrokerID, Partition: p.Partition, Set: true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return partitionSpec{}, usageErr("bad --partition %q: want <partition> or <brokerId>-<partition>", s)
	}
	return partitionSpec{BrokerID: -1, Partition: n, Set: true}, nil
}

// resolve picks the cluster partition the spec names among parts.
func (ps partitionSpec) resolve(topic string, parts []zkmeta.Partition) (zkmeta.Partition, error) {
	var match []zkmeta.Partition
	for _, p := range parts {
		if p.Partition == ps.Partition && (ps.BrokerID < 0 || p.BrokerID == ps.BrokerID) {
			match = append(match, p)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) == 0:
		return zkmeta.Partition{}, notFoundErr("topic %s has no partition %s (partitions: %s)", topic, ps, partitionList(parts))
	default:
		return zkmeta.Partition{}, usageErr("partition %d of topic %s exists on several brokers (%s); write --partition <brokerId>-<partition>",
			ps.Partition, topic, partitionList(match))
	}
}

func (ps partitionSpec) String() string {
	if ps.BrokerID < 0 {
		return strconv.Itoa(ps.Partition)
	}
	return fmt.Sprintf("%d-%d", ps.BrokerID, ps.Partition)
}

func partitionList(parts []zkmeta.Partition) string {
	if len(parts) == 0 {
		return "none"
	}
	s := make([]string, 0, len(parts))
	for _, p := range parts {
		s = append(s, p.String())
	}
	if len(s) > 12 {
		s = append(s[:12], fmt.Sprintf("… %d in all", len(parts)))
	}
	return strings.Join(s, " ")
}

// topicPartitions reads a topic's partitions as consumers see them (topics-sub) with the
// addresses of their brokers; pub=true reads what producers see (topics-pub, masters only).
func (a *App) topicPartitions(ctx context.Context, topic string, pub bool) (zkmeta.TopicPartitions, error) {
	if err := zkmeta.ValidateName("topic", topic); err != nil {
		return zkmeta.TopicPartitions{}, usageErr("%v", err)
	}
	zc, err := a.zkClient(ctx)
	if err != nil {
		return zkmeta.TopicPartitions{}, err
	}
	kind := zkmeta.Subscribe
	if pub {
		kind = zkmeta.Publish
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	tp, err := zc.Partitions(octx, topic, kind)
	if err != nil {
		return tp, zkErr(err)
	}
	return tp, nil
}

// readAddr is the address to read a partition from: the broker's master, else a slave.
func readAddr(bi zkmeta.BrokerInfo) string {
	if bi.Master != "" {
		return bi.Master
	}
	for _, s := range bi.Slaves {
		return s
	}
	return ""
}

// brokerByID finds a registered broker's master address.
func (a *App) brokerByID(ctx context.Context, id int) (string, error) {
	zc, err := a.zkClient(ctx)
	if err != nil {
		return "", err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	bs, err := zc.Brokers(octx)
	if err != nil {
		return "", zkErr(err)
	}
	for _, b := range bs {
		if b.ID == id {
			if addr := readAddr(b); addr != "" {
				return addr, nil
			}
		}
	}
	return "", notFoundErr("broker %d is not registered in ZooKeeper %s (root %s)", id, a.ZK, a.ZKRoot)
}

// resolveBrokerArg accepts "host:port" or a broker id looked up in ZooKeeper.
func (a *App) resolveBrokerArg(ctx context.Context, s string) (string, error) {
	if id, err := strconv.Atoi(s); err == nil {
		return a.brokerByID(ctx, id)
	}
	if !strings.Contains(s, ":") {
		return "", usageErr("bad broker %q: want host:port or a broker id", s)
	}
	return s, nil
}

func zkErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*ExitError); ok {
		return err
	}
	if err == context.DeadlineExceeded {
		return unavailableErr("ZooKeeper did not answer in time")
	}
	return fmt.Errorf("ZooKeeper: %w", err)
}

// minMax asks a partition's broker for its min and max offsets.
func (a *App) minMax(ctx context.Context, addr, topic string, partition int) (int64, int64, error) {
	c, err := a.broker(ctx, addr)
	if err != nil {
		return 0, 0, err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	return c.MinMax(octx, topic, partition)
}

// parseTime reads a --from/--to time: RFC 3339 (2026-11-29T12:00:00Z, with or without
// fractional seconds; a local time without zone is also accepted), "-<duration>" meaning that
// long ago (-10m), or unix milliseconds with an "@" prefix (@1764417600000).
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err == nil && d >= 0 {
			return now.Add(-d), nil
		}
	}
	if strings.HasPrefix(s, "@") {
		ms, err := strconv.ParseInt(s[1:], 10, 64)
		if err == nil && ms >= 0 {
			return time.UnixMilli(ms), nil
		}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q: want RFC 3339 (2006-01-02T15:04:05Z07:00), -<duration> (-10m) or @<unix ms>", s)
}
