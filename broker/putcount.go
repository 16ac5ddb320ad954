package broker

// Per-connection put bookkeeping (reader only). A put used to pay three
// atomic adds (the broker's cmd_put, its topic's puts and put bytes) and a
// lookup of its topic by name in the topic table's map; on a pipelined
// connection a read brings hundreds of puts, usually to one topic. The
// reader now counts them in plain fields and adds the sums to the shared
// counters once per read (flushPutCounts, before the read's replies are
// handed off and before a `stats` reply is rendered), so a client that has
// an acknowledgement — or asks `stats` after its puts on the same
// connection — sees its puts counted (docs/operations.md, "broker counters").
// The topic of the last put is remembered with the topic table's map it
// came from: the table is copy-on-write, so any add, change or drop of a
// topic stores a new map and the remembered topic is looked up again.

// putCounts are the reader's counts not yet added to the shared counters.
type putCounts struct {
	cmd   int64                   // puts to add to stats.cmdPut
	ts    *topicState             // the topic puts/bytes are for (nil: none pending)
	m     *map[string]*topicState // the topic table's map ts was current in
	base  int64                   // ts.puts when the first pending put was counted
	puts  int64                   // puts to add to ts.puts
	bytes int64                   // bytes to add to ts.putBytes
}

// putTopicCache is the topic of the connection's last accepted put and the
// topic table's map (topicTable.m) it was found in.
type putTopicCache struct {
	m  *map[string]*topicState
	ts *topicState
}

// cachedPutTopic is Server.putTopic through the connection's last-topic
// cache: a hit costs an atomic load, a pointer and a name compare. Only
// accepted topics are cached, so every refusal still goes through putTopic.
func (c *conn) cachedPutTopic(topic []byte, partition int32) (*topicState, *PutError) {
	m := c.srv.topics.m.Load()
	if ts := c.topicCache.ts; ts != nil && c.topicCache.m == m && ts.name == string(topic) {
		return ts, nil
	}
	ts, perr := c.srv.putTopic(topic, partition)
	if perr == nil {
		c.topicCache = putTopicCache{m: m, ts: ts}
	}
	return ts, perr
}

// countPut counts one put to ts and returns the topic's put count with it
// (for the latency sampling, sampleStart).
func (c *conn) countPut(ts *topicState) int64 {
	pc := &c.putCounts
	pc.cmd++
	if pc.ts != ts {
		c.flushTopicCounts()
		pc.ts, pc.m, pc.base = ts, c.topicCache.m, ts.puts.Load()
	}
	pc.puts++
	return pc.base + pc.puts
}

// flushPutCounts adds the pending counts to the shared counters.
func (c *conn) flushPutCounts() {
	if n := c.putCounts.cmd; n != 0 {
		c.srv.stats.cmdPut.Add(n)
		c.putCounts.cmd = 0
	}
	c.flushTopicCounts()
}

func (c *conn) flushTopicCounts() {
	pc := &c.putCounts
	ts := pc.ts
	if ts == nil {
		return
	}
	// A topic whose settings changed since has a new state that carried the
	// counters over (topicTable.reloadSettings): the counts go there. While
	// the table is the map ts came from (cachedPutTopic), ts is current.
	if m := c.srv.topics.m.Load(); m != pc.m {
		if cur := (*m)[ts.name]; cur != nil {
			ts = cur
		}
	}
	if pc.puts != 0 {
		ts.puts.Add(pc.puts)
	}
	if pc.bytes != 0 {
		ts.putBytes.Add(pc.bytes)
	}
	*pc = putCounts{cmd: pc.cmd}
}
