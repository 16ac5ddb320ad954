package client

import "sync/atomic"

// PartitionSelector picks the partition a message is sent to.
//
// Select gets the topic's partitions sorted by (broker id, partition) —
// never empty — and returns an index into them. Ordered reports whether the
// message must stay on the partition Select chose: the producer then never
// retries it on another partition (a failure is reported instead, so that
// messages of one key are never reordered) and does not steer it away from a
// broker it believes down. Implementations must be safe for concurrent use.
type PartitionSelector interface {
	Select(msg *Message, partitions []Partition) int
	Ordered(msg *Message) bool
}

// RoundRobin spreads messages over every partition in turn (the default).
// Messages are not ordered: a failed send is retried on another partition.
func RoundRobin() PartitionSelector { return &roundRobin{} }

// roundRobin's counter has a cache line of its own: an 8-byte allocation
// shares its line with others, and a write to one of them on another CPU
// (a callback's counter on the connection's reader) cost the next send a
// miss here. A topic with one partition does not move it at all.
type roundRobin struct {
	n atomic.Uint64
	_ [56]byte
}

func (r *roundRobin) Select(_ *Message, parts []Partition) int {
	if len(parts) == 1 {
		return 0
	}
	return int((r.n.Add(1) - 1) % uint64(len(parts)))
}

func (r *roundRobin) Ordered(*Message) bool { return false }

// HashByKey sends every message with the same key to the same partition
// (FNV-1a of the key modulo the partition count), which keeps them in order:
// the key is Message.ShardKey, else Keys[0]. Messages without a key go
// round-robin and are not ordered. When the partition count changes (a broker
// joins or leaves), keys move to other partitions — as in MetaQ, ordering
// holds between changes of the cluster, not across them.
func HashByKey() PartitionSelector { return &hashByKey{} }

type hashByKey struct{ rr roundRobin }

func shardKey(m *Message) string {
	if m.ShardKey != "" {
		return m.ShardKey
	}
	if len(m.Keys) > 0 {
		return m.Keys[0]
	}
	return ""
}

func (h *hashByKey) Select(m *Message, parts []Partition) int {
	k := shardKey(m)
	if k == "" {
		return h.rr.Select(m, parts)
	}
	x := uint32(2166136261)
	for i := 0; i < len(k); i++ {
		x ^= uint32(k[i])
		x *= 16777619
	}
	return int(x % uint32(len(parts)))
}

func (h *hashByKey) Ordered(m *Message) bool { return shardKey(m) != "" }

// OrderedSelector makes a selector from a function; every message it places
// is ordered (never retried on another partition).
func OrderedSelector(f func(msg *Message, partitions []Partition) int) PartitionSelector {
	return orderedFunc(f)
}

type orderedFunc func(msg *Message, partitions []Partition) int

func (f orderedFunc) Select(m *Message, parts []Partition) int { return f(m, parts) }
func (f orderedFunc) Ordered(*Message) bool                    { return true }
