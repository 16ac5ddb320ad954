package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/metaqgo/metaq/client"
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
	kind := zkmeta.Subscribe
	if pub {
		kind = zkmeta.Publish
	}
	zc, octx, cancel, err := a.zkRequest(ctx)
	if err != nil {
		return zkmeta.TopicPartitions{}, err
	}
	defer cancel()
	tp, err := zc.Partitions(octx, topic, kind)
	if err != nil {
		return tp, zkErr(err)
	}
	return tp, nil
}

// brokerList reads the registered brokers from ZooKeeper.
func (a *App) brokerList(ctx context.Context) ([]zkmeta.BrokerInfo, error) {
	zc, octx, cancel, err := a.zkRequest(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	bs, err := zc.Brokers(octx)
	return bs, zkErr(err)
}

// topicNotRegistered is the error for a topic ZooKeeper knows no partition of.
func (a *App) topicNotRegistered(topic string) error {
	return notFoundErr("topic %s is not registered in ZooKeeper %s (root %s)", topic, a.ZK, a.ZKRoot)
}

// brokerByID finds a registered broker's address (client.FetchAddr: its master, else a slave).
func (a *App) brokerByID(ctx context.Context, id int) (string, error) {
	bs, err := a.brokerList(ctx)
	if err != nil {
		return "", err
	}
	for _, b := range bs {
		if b.ID == id {
			if addr := client.FetchAddr(b); addr != "" {
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
