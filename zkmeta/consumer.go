package zkmeta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// ConsumerInfo is one registered consumer of a group.
type ConsumerInfo struct {
	Node   string   // node name under ids/: <group>_<consumerId>, MetaQ's consumer id string
	ID     string   // the consumerId part
	Topics []string // subscribed topics, in the order registered
}

// BrokerInfo is a broker id with the addresses of its master and slaves.
type BrokerInfo struct {
	ID     int
	Master string         // "host:port" from meta://host:port; "" when no master is registered
	Slaves map[int]string // slave id → "host:port"; nil when none
}

// PartitionKind selects the topic directory partitions are read from.
type PartitionKind int

const (
	// Publish reads topics-pub: master partitions that accept puts.
	Publish PartitionKind = iota
	// Subscribe reads topics-sub: partitions that accept gets (masters and slaves).
	Subscribe
)

func (k PartitionKind) String() string {
	if k == Publish {
		return "publish"
	}
	return "subscribe"
}

// TopicPartitions is a topic's partitions across the cluster, as producers (Publish) or consumers
// (Subscribe) see them.
type TopicPartitions struct {
	Topic string
	Kind  PartitionKind
	// Partitions sorted by broker id, then partition. For Publish, only partitions whose broker
	// has a registered master (an address to send to).
	Partitions []Partition
	// Brokers holds the addresses of every broker id that appears in Partitions.
	Brokers map[int]BrokerInfo
}

// RegisterConsumer registers consumerID in group: the ephemeral node
// /consumers/<group>/ids/<group>_<consumerID> with the topics joined by ','. The client keeps it
// alive (re-created after a session expiry). It waits until the node exists; on error the
// registration goes on in the background (call Remove on the returned node to cancel it). Change
// the topics with the node's Set.
func (c *Client) RegisterConsumer(ctx context.Context, group, consumerID string, topics []string) (*EphemeralNode, error) {
	if err := ValidateName("group", group); err != nil {
		return nil, err
	}
	if err := validConsumerID(consumerID); err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := ValidateName("topic", t); err != nil {
			return nil, err
		}
	}
	n, err := c.Ephemeral(c.paths.ConsumerNode(group, consumerID), FormatTopics(topics))
	if err != nil {
		return nil, err
	}
	return n, n.Wait(ctx)
}

func readConsumers(c *Client, r reader, group string) ([]ConsumerInfo, error) {
	dir := c.FullPath(c.paths.GroupIDs(group))
	kids, err := r.children(dir)
	if err != nil {
		return nil, err
	}
	out := []ConsumerInfo{}
	for _, k := range kids {
		data, ok, err := r.get(join(dir, k))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		out = append(out, ConsumerInfo{Node: k, ID: strings.TrimPrefix(k, group+"_"), Topics: ParseTopics(data)})
	}
	return out, nil
}

// Consumers lists group's registered consumers, sorted by node name (MetaQ's balancing order).
func (c *Client) Consumers(ctx context.Context, group string) ([]ConsumerInfo, error) {
	return read(ctx, c, func(r reader) ([]ConsumerInfo, error) { return readConsumers(c, r, group) })
}

// WatchConsumers sends group's consumers now and after every change (a consumer joins, leaves or
// changes its topics). The channel keeps only the latest list, is re-armed after every change,
// reconnection and session expiry, and is closed when ctx is done or the client closes.
func (c *Client) WatchConsumers(ctx context.Context, group string) <-chan []ConsumerInfo {
	return watch(ctx, c, "consumers of "+group, func(r reader) ([]ConsumerInfo, error) { return readConsumers(c, r, group) })
}

func readBroker(c *Client, r reader, id int) (BrokerInfo, error) {
	dir := c.FullPath(c.paths.BrokerIDDir(id))
	bi := BrokerInfo{ID: id}
	kids, err := r.children(dir)
	if err != nil {
		return bi, err
	}
	for _, k := range kids {
		slave := -2
		if k == "master" {
			slave = MasterSlaveID
		} else if n, ok := strings.CutPrefix(k, "slave"); ok {
			if v, err := strconv.Atoi(n); err == nil && v >= 0 {
				slave = v
			}
		}
		if slave == -2 {
			continue
		}
		data, ok, err := r.get(join(dir, k))
		if err != nil {
			return bi, err
		}
		if !ok {
			continue
		}
		addr, err := ParseBrokerURI(string(data))
		if err != nil {
			c.log.Printf("zkmeta: ignoring %s/%s: %v", c.paths.BrokerIDDir(id), k, err)
			continue
		}
		if slave == MasterSlaveID {
			bi.Master = addr
		} else {
			if bi.Slaves == nil {
				bi.Slaves = map[int]string{}
			}
			bi.Slaves[slave] = addr
		}
	}
	return bi, nil
}

func readBrokers(c *Client, r reader) ([]BrokerInfo, error) {
	kids, err := r.children(c.FullPath(c.paths.BrokerIDs()))
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, k := range kids {
		if id, err := strconv.Atoi(k); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	out := []BrokerInfo{}
	for _, id := range ids {
		bi, err := readBroker(c, r, id)
		if err != nil {
			return nil, err
		}
		if bi.Master != "" || len(bi.Slaves) > 0 {
			out = append(out, bi)
		}
	}
	return out, nil
}

// Brokers lists the registered brokers (ids with a master or a slave), sorted by id.
func (c *Client) Brokers(ctx context.Context) ([]BrokerInfo, error) {
	return read(ctx, c, func(r reader) ([]BrokerInfo, error) { return readBrokers(c, r) })
}

// WatchBrokers sends the registered brokers now and after every change; see WatchConsumers for
// the channel's rules.
func (c *Client) WatchBrokers(ctx context.Context) <-chan []BrokerInfo {
	return watch(ctx, c, "brokers", func(r reader) ([]BrokerInfo, error) { return readBrokers(c, r) })
}

func readPartitions(c *Client, r reader, topic string, kind PartitionKind) (TopicPartitions, error) {
	tp := TopicPartitions{Topic: topic, Kind: kind, Partitions: []Partition{}, Brokers: map[int]BrokerInfo{}}
	dir := c.paths.TopicSub(topic)
	if kind == Publish {
		dir = c.paths.TopicPub(topic)
	}
	dir = c.FullPath(dir)
	kids, err := r.children(dir)
	if err != nil {
		return tp, err
	}
	seen := map[Partition]bool{}
	for _, k := range kids {
		id, slave, err := ParseBrokerRole(k)
		if err != nil {
			continue
		}
		if kind == Publish && slave >= 0 {
			continue // never write to a slave
		}
		data, ok, err := r.get(join(dir, k))
		if err != nil {
			return tp, err
		}
		if !ok {
			continue
		}
		n, _, err := ParseTopicBroker(data)
		if err != nil {
			c.log.Printf("zkmeta: ignoring %s/%s: %v", dir, k, err)
			continue
		}
		if _, done := tp.Brokers[id]; !done {
			bi, err := readBroker(c, r, id)
			if err != nil {
				return tp, err
			}
			if kind == Publish && bi.Master == "" {
				continue
			}
			tp.Brokers[id] = bi
		}
		for i := range n {
			p := Partition{BrokerID: id, Partition: i}
			if !seen[p] {
				seen[p] = true
				tp.Partitions = append(tp.Partitions, p)
			}
		}
	}
	sort.Slice(tp.Partitions, func(i, j int) bool { return tp.Partitions[i].Less(tp.Partitions[j]) })
	return tp, nil
}

// Partitions reads topic's partitions for publishing (topics-pub, masters only) or subscribing
// (topics-sub), sorted by (brokerId, partition), with the brokers' addresses.
func (c *Client) Partitions(ctx context.Context, topic string, kind PartitionKind) (TopicPartitions, error) {
	return read(ctx, c, func(r reader) (TopicPartitions, error) { return readPartitions(c, r, topic, kind) })
}

// WatchPartitions sends topic's partitions now and after every change of the topic's brokers,
// their partition counts or their addresses; see WatchConsumers for the channel's rules.
func (c *Client) WatchPartitions(ctx context.Context, topic string, kind PartitionKind) <-chan TopicPartitions {
	return watch(ctx, c, kind.String()+" partitions of "+topic, func(r reader) (TopicPartitions, error) {
		return readPartitions(c, r, topic, kind)
	})
}

// ClaimPartition tries to make consumerID the owner of a partition for group: the ephemeral node
// /consumers/<group>/owners/<topic>/<brokerId>-<partition> holding <group>_<consumerID> (MetaQ's
// consumer id string). ok is true when we own it (also when we already did); otherwise holder is
// the current owner's data, and the caller retries later (its node goes when its session does).
// Owner nodes are not re-created after a session expiry: rebalance on OnSessionExpired.
//
// When ctx ends while the request is in flight, ZooKeeper may still apply it: a cancelled claim
// may have created the owner node. Treat it as possibly held and call ReleasePartition (which
// only deletes our own node) when giving the partition up; the same holds for CommitOffset.
func (c *Client) ClaimPartition(ctx context.Context, group, topic string, p Partition, consumerID string) (ok bool, holder string, err error) {
	full := c.FullPath(c.paths.Owner(group, topic, p))
	me := ConsumerNodeName(group, consumerID)
	var got bool
	var who string
	err = c.do(ctx, func() error {
		for {
			err := c.createFull(full, []byte(me), zk.FlagEphemeral)
			if err == nil {
				got, who = true, me
				return nil
			}
			if !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			d, st, err := c.conn.Get(full)
			if errors.Is(err, zk.ErrNoNode) {
				continue // released meanwhile
			}
			if err != nil {
				return err
			}
			got = st.EphemeralOwner == c.conn.SessionID() && string(d) == me
			who = string(d)
			return nil
		}
	})
	if err != nil {
		return false, "", err
	}
	return got, who, nil
}

// ReleasePartition deletes the owner node when consumerID owns it in this session; anybody
// else's claim is left alone.
func (c *Client) ReleasePartition(ctx context.Context, group, topic string, p Partition, consumerID string) error {
	full := c.FullPath(c.paths.Owner(group, topic, p))
	me := ConsumerNodeName(group, consumerID)
	return c.do(ctx, func() error { return c.deleteIfOurs(full, []byte(me)) })
}

// PartitionOwner returns the owner of a partition in group ("" when nobody owns it).
func (c *Client) PartitionOwner(ctx context.Context, group, topic string, p Partition) (string, error) {
	d, _, err := c.Get(ctx, c.paths.Owner(group, topic, p))
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	return string(d), err
}

// CommitOffset stores group's position in a partition (persistent node, "<msgId>-<offset>").
func (c *Client) CommitOffset(ctx context.Context, group, topic string, p Partition, o Offset) error {
	return c.Put(ctx, c.paths.Offset(group, topic, p), []byte(o.String()))
}

// OffsetWrite is one offset of a CommitOffsets.
type OffsetWrite struct {
	Topic     string
	Partition Partition
	Offset    Offset
}

// MaxOffsetsMulti bounds the writes of one multi-op (ZooKeeper's request limit, jute.maxbuffer,
// is 1 MiB; an offset write is ~150 bytes).
const MaxOffsetsMulti = 500

// CommitOffsets writes several of group's offsets so that they all change or none does (an
// operator's reset: docs/operations.md), in one ZooKeeper multi-op per MaxOffsetsMulti writes
// (more than that are as many all-or-nothing steps, in order). Each node is written on the
// version read just before (or created when it did not exist), so a consumer's commit in
// between fails the step with zk.ErrBadVersion (zk.ErrNodeExists) instead of being overwritten
// half way, and a retry after a lost reply finds the step applied (every node holds its new
// value) rather than failing it. applied counts the writes of the steps that succeeded (all of
// them when err is nil).
func (c *Client) CommitOffsets(ctx context.Context, group string, ws []OffsetWrite) (applied int, err error) {
	for start := 0; start < len(ws); start += MaxOffsetsMulti {
		end := min(start+MaxOffsetsMulti, len(ws))
		if err := c.commitOffsetsStep(ctx, group, ws[start:end]); err != nil {
			return start, err
		}
	}
	return len(ws), nil
}

func (c *Client) commitOffsetsStep(ctx context.Context, group string, ws []OffsetWrite) error {
	full := make([]string, len(ws))
	data := make([][]byte, len(ws))
	ops := make([]any, len(ws))
	for i, w := range ws {
		p := c.paths.Offset(group, w.Topic, w.Partition)
		full[i], data[i] = c.FullPath(p), []byte(w.Offset.String())
		if err := c.EnsurePath(ctx, path.Dir(p)); err != nil {
			return err
		}
		_, st, err := c.Get(ctx, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			ops[i] = &zk.CreateRequest{Path: full[i], Data: data[i], Acl: c.nodeACL()}
		case err != nil:
			return err
		default:
			ops[i] = &zk.SetDataRequest{Path: full[i], Data: data[i], Version: st.Version}
		}
	}
	if c.beforeOffsetsMulti != nil {
		c.beforeOffsetsMulti()
	}
	attempt := 0
	return c.do(ctx, func() error {
		attempt++
		_, err := c.conn.Multi(ops...)
		if err == nil || isConnErr(err) || attempt == 1 {
			return err
		}
		// A retry: the first attempt may have been applied before its reply was lost.
		for i := range full {
			if d, _, gerr := c.conn.Get(full[i]); gerr != nil || string(d) != string(data[i]) {
				return err
			}
		}
		return nil
	})
}

// LoadOffset reads group's committed position in a partition, accepting MetaQ's legacy plain
// "<offset>" (MsgID -1). ok is false when nothing was committed.
func (c *Client) LoadOffset(ctx context.Context, group, topic string, p Partition) (o Offset, ok bool, err error) {
	d, _, err := c.Get(ctx, c.paths.Offset(group, topic, p))
	if errors.Is(err, zk.ErrNoNode) {
		return Offset{}, false, nil
	}
	if err != nil {
		return Offset{}, false, err
	}
	o, err = ParseOffset(d)
	if err != nil {
		return Offset{}, false, fmt.Errorf("%s: %w", c.paths.Offset(group, topic, p), err)
	}
	return o, true, nil
}

// Groups lists the consumer groups known to ZooKeeper, sorted.
func (c *Client) Groups(ctx context.Context) ([]string, error) {
	kids, err := c.Children(ctx, c.paths.Consumers())
	if errors.Is(err, zk.ErrNoNode) {
		return []string{}, nil
	}
	return kids, err
}

// Topics lists the topics some broker registered (below /brokers/topics), sorted.
func (c *Client) Topics(ctx context.Context) ([]string, error) {
	kids, err := c.Children(ctx, c.paths.BrokerTopics())
	if errors.Is(err, zk.ErrNoNode) {
		return []string{}, nil
	}
	return kids, err
}

// PartitionOffset is a committed offset of a group.
type PartitionOffset struct {
	Topic     string
	Partition Partition
	Offset    Offset
}

// PartitionOwner is an owned partition of a group.
type PartitionOwner struct {
	Topic     string
	Partition Partition
	Owner     string
}

// GroupInfo describes a consumer group.
type GroupInfo struct {
	Group     string
	Consumers []ConsumerInfo
	Owners    []PartitionOwner  // sorted by topic, then partition
	Offsets   []PartitionOffset // sorted by topic, then partition
}

// forEachPartitionNode visits <dir>/<topic>/<brokerId>-<partition> nodes in order.
func forEachPartitionNode(c *Client, r reader, dir string, visit func(topic string, p Partition, data []byte)) error {
	topics, err := r.children(dir)
	if err != nil {
		return err
	}
	for _, t := range topics {
		kids, err := r.children(join(dir, t))
		if err != nil {
			return err
		}
		var parts []Partition
		for _, k := range kids {
			if p, err := ParsePartition(k); err == nil {
				parts = append(parts, p)
			}
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i].Less(parts[j]) })
		for _, p := range parts {
			d, ok, err := r.get(join(join(dir, t), p.String()))
			if err != nil {
				return err
			}
			if ok {
				visit(t, p, d)
			}
		}
	}
	return nil
}

// GroupOffsets lists group's committed offsets.
func (c *Client) GroupOffsets(ctx context.Context, group string) ([]PartitionOffset, error) {
	return read(ctx, c, func(r reader) ([]PartitionOffset, error) {
		out := []PartitionOffset{}
		err := forEachPartitionNode(c, r, c.FullPath(c.paths.GroupOffsets(group)), func(t string, p Partition, d []byte) {
			o, err := ParseOffset(d)
			if err != nil {
				c.log.Printf("zkmeta: ignoring offset of %s/%s in group %s: %v", t, p, group, err)
				return
			}
			out = append(out, PartitionOffset{Topic: t, Partition: p, Offset: o})
		})
		return out, err
	})
}

// GroupOwners lists group's owned partitions.
func (c *Client) GroupOwners(ctx context.Context, group string) ([]PartitionOwner, error) {
	return read(ctx, c, func(r reader) ([]PartitionOwner, error) {
		out := []PartitionOwner{}
		err := forEachPartitionNode(c, r, c.FullPath(c.paths.GroupOwners(group)), func(t string, p Partition, d []byte) {
			out = append(out, PartitionOwner{Topic: t, Partition: p, Owner: string(d)})
		})
		return out, err
	})
}

// DescribeGroup gathers group's consumers, owners and offsets (for `metaq groups describe`).
func (c *Client) DescribeGroup(ctx context.Context, group string) (*GroupInfo, error) {
	cons, err := c.Consumers(ctx, group)
	if err != nil {
		return nil, err
	}
	owners, err := c.GroupOwners(ctx, group)
	if err != nil {
		return nil, err
	}
	offs, err := c.GroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	return &GroupInfo{Group: group, Consumers: cons, Owners: owners, Offsets: offs}, nil
}

var consumerSeq atomic.Int64

// NewConsumerID generates a consumer id in MetaQ's style, <host>-<pid>-<unixMillis>-<seq>
// (MetaQ: <local address>-<pid>-<currentTimeMillis>-<counter>). The host name is reduced to
// [A-Za-z0-9.-]; the sequence number makes ids of one process unique, the pid and time those of
// different processes. The node name is then <group>_<id>.
func NewConsumerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, host)
	return fmt.Sprintf("%s-%d-%d-%d", host, os.Getpid(), time.Now().UnixMilli(), consumerSeq.Add(1))
}
