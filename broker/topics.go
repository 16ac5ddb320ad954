package broker

import (
	"sync"
	"sync/atomic"

	"github.com/metaqgo/metaq/broker/store"
)

// TopicSettings are what the broker needs to know about an accepted topic.
type TopicSettings struct {
	NumPartitions   int
	AcceptPublish   bool
	AcceptSubscribe bool
}

// TopicPolicy decides which topics this broker accepts (MetaQ's
// `[topic=…]` sections, wildcards included).
type TopicPolicy interface {
	Lookup(topic string) (TopicSettings, bool)
}

// topicState is the broker's per-topic state: the interned name (so the hot
// path never allocates a string per request), settings and counters.
//
// Line 0 holds everything a put reads or counts (handlePut, putAppend,
// topicWritten), the other counters line 1; the struct is 128 bytes so the
// allocator's size class puts it on a line boundary. With puts round-robin
// over 1,000 topics each put finds its topic's state cold, and at 112 bytes
// at any alignment the put's fields straddled two lines
// (TestTopicStateLayout).
type topicState struct {
	// Line 0: the put's.
	name     string
	settings TopicSettings
	rr       atomic.Uint32                  // partition -1: round-robin choice
	notified atomic.Bool                    // OnTopic fired
	ref      atomic.Pointer[store.TopicRef] // the store's handle on the topic (storeRef), set at its first put
	puts     atomic.Int64
	putBytes atomic.Int64

	// Line 1.
	putFailed atomic.Int64
	gets      atomic.Int64
	getMiss   atomic.Int64
	offsets   atomic.Int64
	getMsgs   atomic.Int64 // messages served by get (metrics.go)
	getBytes  atomic.Int64 // record bytes served by get
	_         [64 - 6*8]byte
}

// topicTable interns accepted topics. Reads are lock-free (an immutable map
// behind an atomic pointer); adding a topic copies the map under mu, which
// happens once per topic.
//
// Only a write interns a topic (get: put, mput, a transaction's put, a
// resent dead letter), or a read of a partition that holds records (a topic
// written before the broker started): what the table holds is bounded by
// what the store holds. The read-only commands (get, offset, seek, pop,
// query key) resolve a topic not interned yet with lookup, which answers
// from a state of its own that is not kept: with a wildcard section
// (`[topic=*]`) they took any name, and interning each one grew the
// broker-wide table without bound, copying the whole map at every insert.
type topicTable struct {
	policy TopicPolicy
	m      atomic.Pointer[map[string]*topicState]
	mu     sync.Mutex // serializes writers of m
	// gone holds the states of topics a reload no longer accepts (guarded
	// by mu): their counters stay in TopicCounters, and a topic accepted
	// again counts on from them, so that the per-topic metrics never go
	// down (docs/observability.md). Bounded by the topics ever interned.
	gone map[string]*topicState
}

func (t *topicTable) init(p TopicPolicy) {
	t.policy = p
	m := map[string]*topicState{}
	t.m.Store(&m)
}

// get returns the interned state of an accepted topic, adding it on first
// use. It returns nil when no section accepts the topic. Known topics cost a
// map lookup and no allocation.
func (t *topicTable) get(name []byte) *topicState {
	if ts := (*t.m.Load())[string(name)]; ts != nil {
		return ts
	}
	settings, ok := t.policy.Lookup(string(name))
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if ts := old[string(name)]; ts != nil {
		return ts
	}
	ts := &topicState{name: string(name), settings: settings}
	if g := t.gone[ts.name]; g != nil { // accepted again since a reload dropped it
		ts.carry(g)
		delete(t.gone, ts.name)
	}
	m := make(map[string]*topicState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[ts.name] = ts
	t.m.Store(&m)
	return ts
}

// lookup returns the state of an accepted topic for a read-only command
// (nil when no section accepts it) without interning it: a topic not
// interned yet that has no records in partition (the store's MaxOffset is
// 0; partition -1: any) is answered from a new state that is not kept, so
// reads see it as the empty topic it is (offset 0, get 404) and its read
// counters are not kept either. One that has records is interned.
func (t *topicTable) lookup(name []byte, partition int32, st *store.Store) *topicState {
	if ts := (*t.m.Load())[string(name)]; ts != nil {
		return ts
	}
	settings, ok := t.policy.Lookup(string(name))
	if !ok {
		return nil
	}
	if partition >= 0 && partition < int32(settings.NumPartitions) && st != nil && st.MaxOffset(string(name), partition) > 0 {
		return t.get(name)
	}
	return &topicState{name: string(name), settings: settings}
}

// all returns every topic interned and accepted now.
func (t *topicTable) all() map[string]*topicState { return *t.m.Load() }

// counted returns all and the topics a reload dropped since (their
// counters frozen).
func (t *topicTable) counted() []*topicState {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := *t.m.Load()
	out := make([]*topicState, 0, len(m)+len(t.gone))
	for _, ts := range m {
		out = append(out, ts)
	}
	for _, ts := range t.gone {
		out = append(out, ts)
	}
	return out
}

// carry copies the counters of from, the state n replaces.
func (n *topicState) carry(from *topicState) {
	for _, p := range [][2]*atomic.Int64{{&n.puts, &from.puts}, {&n.putBytes, &from.putBytes}, {&n.putFailed, &from.putFailed},
		{&n.gets, &from.gets}, {&n.getMiss, &from.getMiss}, {&n.offsets, &from.offsets}, {&n.getMsgs, &from.getMsgs}, {&n.getBytes, &from.getBytes}} {
		p[0].Store(p[1].Load())
	}
}

// choosePartition picks a partition for `put … -1`.
func (ts *topicState) choosePartition() int32 {
	n := ts.settings.NumPartitions
	if n <= 1 {
		return 0
	}
	return int32(ts.rr.Add(1) % uint32(n))
}
