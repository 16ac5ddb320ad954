package store

// partCache is a private (single-goroutine or lock-guarded) lookup of
// partitions by topic and id, for the two hot paths that resolve a partition
// per message: the appender (guarded by the append lock, commitLog.mu) and the dispatcher (its own
// goroutine). A topic is found through a one-entry "last topic" cache (a
// string compare; messages usually come in runs of one topic) or a map;
// partitions of a topic are found in a slice indexed by id (ids below
// denseParts) or a map. With 10,000 partitions this avoids hashing a
// (topic, partition) key into a 10,000-entry map for every message.
type partCache struct {
	last   *partSet
	topics map[string]*partSet
}

// denseParts bounds the partition ids kept in a partSet's slice (8 bytes
// per id up to the largest seen); larger ids go to its map.
const denseParts = 1 << 16

type partSet struct {
	name   string // the topic, shared with topicState.name
	dense  []*partition
	sparse map[int32]*partition
}

func newPartCache() partCache { return partCache{topics: make(map[string]*partSet)} }

// get returns the cached partition, or nil.
func (c *partCache) get(topic string, id int32) *partition {
	t := c.last
	if t == nil || t.name != topic {
		if t = c.topics[topic]; t == nil {
			return nil
		}
		c.last = t
	}
	return t.get(id)
}

// getBytes is get for a topic held as bytes (no allocation).
func (c *partCache) getBytes(topic []byte, id int32) *partition {
	t := c.last
	if t == nil || t.name != string(topic) {
		if t = c.topics[string(topic)]; t == nil {
			return nil
		}
		c.last = t
	}
	return t.get(id)
}

func (t *partSet) get(id int32) *partition {
	if uint32(id) < uint32(len(t.dense)) {
		return t.dense[id]
	}
	if id >= denseParts && t.sparse != nil {
		return t.sparse[id]
	}
	return nil
}

// set returns the topic's partSet, created empty if it is not cached yet.
func (c *partCache) set(name string) *partSet {
	t := c.topics[name]
	if t == nil {
		t = &partSet{name: name}
		c.topics[name] = t
	}
	return t
}

// put caches p.
func (c *partCache) put(p *partition) {
	t := c.set(p.topic.name)
	c.last = t
	id := p.id
	if id < denseParts {
		if int(id) >= len(t.dense) {
			n := max(int(id)+1, 2*len(t.dense))
			n = min(n, denseParts)
			d := make([]*partition, n)
			copy(d, t.dense)
			t.dense = d
		}
		t.dense[id] = p
		return
	}
	if t.sparse == nil {
		t.sparse = make(map[int32]*partition)
	}
	t.sparse[id] = p
}

// TopicRef is a handle on one topic in the appender's partition cache. A
// caller that appends to many topics in turn (a broker taking puts for 1,000
// topics round-robin, where the one-entry "last topic" cache always misses)
// resolves each topic once with Store.TopicRef and passes the handle in
// Message.Ref: the appender then indexes the topic's partition slice instead
// of hashing the topic's name into a map for every message. A handle is only
// used for the store that made it and for the topic it names (an append whose
// Topic differs, e.g. a put rewritten into a system topic, ignores it), so a
// stale or wrong handle costs the lookup it was meant to save, nothing else.
type TopicRef struct {
	l   *commitLog
	set *partSet // guarded by l.mu, as the appender's cache it belongs to
}

// TopicRef returns the handle on topic (nil for a name the store refuses).
func (s *Store) TopicRef(topic string) *TopicRef {
	if !validTopic(topic) {
		return nil
	}
	l := s.clog
	l.mu.Lock()
	defer l.mu.Unlock()
	return &TopicRef{l: l, set: l.appendParts.set(topic)}
}

// appendPartLocked finds the partition m is appended to (l.mu held): through
// m.Ref when it is this log's handle on m.Topic, else the cache's topic
// lookup; the first append to a partition creates it (nil: a bad topic).
func (l *commitLog) appendPartLocked(m *Message) *partition {
	if r := m.Ref; r != nil && r.l == l && r.set.name == m.Topic {
		if p := r.set.get(m.Partition); p != nil {
			return p
		}
	} else if p := l.appendParts.get(m.Topic, m.Partition); p != nil {
		return p
	}
	return l.appendPartitionLocked(m.Topic, m.Partition)
}
