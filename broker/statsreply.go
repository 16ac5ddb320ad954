package broker

import (
	"crypto/md5"
	"encoding/hex"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaqgo/metaq/broker/store"

	"github.com/metaqgo/metaq/protocol"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// handleStats answers MetaQ's `stats [item]`: a body of `key value` lines
// between STATS and END. Items: none (system), topics, offsets, realtime,
// config (the server.ini), help, or a topic name.
func (c *conn) handleStats(cmd *protocol.Command) {
	s := c.srv
	c.flushPutCounts() // this connection's puts before it (putcount.go)
	item := string(cmd.Item)
	if item == "config" {
		c.statsConfig(cmd.Opaque)
		return
	}
	b := protocol.AppendStatsStart(nil)
	switch item {
	case "":
		b = s.appendSystemStats(b)
	case "topics":
		b = s.appendTopicsStats(b)
	case "offsets":
		b = s.appendOffsetsStats(b)
	case "realtime":
		b = s.appendRealtimeStats(b)
	case "delay":
		b = s.appendDelayStats(b, true)
	case "pop":
		b = s.appendPopStats(b, true) // popserve.go
	case "help":
		for _, l := range []string{
			"stats: system counters",
			"stats topics: partitions and message count per topic",
			"stats offsets: min/max offset per partition",
			"stats realtime: counters since the previous `stats realtime`",
			"stats delay: delayed messages, retries and dead letters (per level)",
			"stats pop: broker-managed delivery (per group and topic)",
			"stats config: the server.ini this broker runs with",
			"stats <topic>: one topic",
		} {
			b = append(b, l...)
			b = append(b, "\r\n"...)
		}
	default:
		b = s.appendTopicStats(b, item)
	}
	b = protocol.AppendStatsEnd(b)
	c.rq.addResult(protocol.StatusSuccess, b, cmd.Opaque)
}

func (c *conn) statsConfig(opaque int32) {
	path := c.srv.opts.ConfigPath
	if path == "" {
		c.rq.addResultString(protocol.StatusNotFound, "Config file not found: the broker was started without one", opaque)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		c.rq.addResultString(protocol.StatusInternalServerError, "Read config file error:"+err.Error(), opaque)
		return
	}
	c.rq.addResult(protocol.StatusSuccess, data, opaque)
}

func (s *Server) appendSystemStats(b []byte) []byte {
	st := s.store.Stats()
	// total_messages and topics count the users' topics, as MetaQ's did; the broker's own
	// records (system topics, e.g. the delay timer's progress records, written in the
	// background) are counted apart, in system_messages.
	var total, system int64
	nTopics := 0
	for _, t := range st.Topics {
		n := t.Messages
		if protocol.IsSystemTopic(t.Topic) {
			system += n
			continue
		}
		total += n
		nTopics++
	}
	b = protocol.AppendStatInt(b, "pid", int64(os.Getpid()))
	b = protocol.AppendStatInt(b, "broker_id", int64(s.opts.BrokerID))
	b = protocol.AppendStatInt(b, "port", int64(s.Port()))
	b = protocol.AppendStatInt(b, "uptime", int64(time.Since(s.start)/time.Second))
	b = protocol.AppendStat(b, "version", Version)
	b = protocol.AppendStatInt(b, "curr_connections", int64(s.NumConnections()))
	b = protocol.AppendStatInt(b, "threads", int64(runtime.NumGoroutine()))
	b = protocol.AppendStatInt(b, "cmd_put", s.stats.cmdPut.Load())
	b = protocol.AppendStatInt(b, "cmd_get", s.stats.cmdGet.Load())
	b = protocol.AppendStatInt(b, "cmd_offset", s.stats.cmdOffset.Load())
	txs := s.tx.Stats()
	b = protocol.AppendStatInt(b, "tx_begin", txs.Begun)
	b = protocol.AppendStatInt(b, "tx_xa_begin", txs.XABegun)
	b = protocol.AppendStatInt(b, "tx_commit", txs.Committed)
	b = protocol.AppendStatInt(b, "tx_rollback", txs.RolledBack)
	b = protocol.AppendStatInt(b, "get_miss", s.stats.getMiss.Load())
	b = protocol.AppendStatInt(b, "put_failed", s.stats.putFailed.Load())
	b = protocol.AppendStatInt(b, "total_messages", total)
	b = protocol.AppendStatInt(b, "topics", int64(nTopics))
	b = protocol.AppendStat(b, "config_checksum", s.configChecksum())
	// metaq additions
	b = protocol.AppendStatInt(b, "system_messages", system)
	b = protocol.AppendStatInt(b, "get_failed", s.stats.getFailed.Load())
	b = protocol.AppendStatInt(b, "long_polls", s.stats.longPolls.Load())
	b = protocol.AppendStatInt(b, "bad_requests", s.stats.badReqs.Load())
	b = appendTxStats(b, txs)
	b = s.putBudget.appendStats(b)
	b = appendStoreStats(b, st)
	b = appendDiskStats(b, s.opts.DataPath)
	b = s.appendDelayStats(b, false)
	b = s.appendPopStats(b, false)
	b = s.appendReplicationStats(b) // replication.go
	return b
}

func (s *Server) configChecksum() string {
	if s.opts.ConfigPath == "" {
		return "0"
	}
	data, err := os.ReadFile(s.opts.ConfigPath)
	if err != nil {
		return "0"
	}
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}

func (s *Server) appendTopicsStats(b []byte) []byte {
	seen := map[string]bool{}
	for _, t := range s.store.Topics() {
		var n int64
		for _, p := range t.Partitions {
			n += p.Max - p.Min
		}
		seen[t.Topic] = true
		b = append(b, t.Topic...)
		b = append(b, " partitions "...)
		b = strconv.AppendInt(b, int64(len(t.Partitions)), 10)
		b = append(b, " message_count "...)
		b = strconv.AppendInt(b, n, 10)
		b = append(b, "\r\n"...)
	}
	for _, name := range s.configuredTopics() {
		if !seen[name] {
			b = append(b, name...)
			b = append(b, " *Empty*\r\n"...)
		}
	}
	return b
}

func (s *Server) configuredTopics() []string {
	if l, ok := s.opts.Topics.(interface{ Explicit() []string }); ok {
		names := l.Explicit()
		sort.Strings(names)
		return names
	}
	return nil
}

func (s *Server) appendOffsetsStats(b []byte) []byte {
	for _, t := range s.store.Topics() {
		for _, p := range t.Partitions {
			b = append(b, t.Topic...)
			b = append(b, " part "...)
			b = strconv.AppendInt(b, int64(p.Partition), 10)
			b = append(b, " min_offset "...)
			b = strconv.AppendInt(b, p.Min, 10)
			b = append(b, " max_offset "...)
			b = strconv.AppendInt(b, p.Max, 10)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func (s *Server) appendTopicStats(b []byte, topic string) []byte {
	var parts int
	var msgs int64
	code := 1 // MetaQ: 0 topic exists, 1 unknown, 2 accepted but no data yet
	for _, t := range s.store.Topics() {
		if t.Topic == topic {
			code = 0
			parts = len(t.Partitions)
			for _, p := range t.Partitions {
				msgs += p.Max - p.Min
			}
		}
	}
	ts := s.topics.all()[topic]
	if code == 1 {
		if _, ok := s.opts.Topics.Lookup(topic); ok {
			code = 2
		}
	}
	b = append(b, topic...)
	b = append(b, "\r\n"...)
	b = protocol.AppendStatInt(b, "resultCode", int64(code))
	b = protocol.AppendStatInt(b, "partitions", int64(parts))
	b = protocol.AppendStatInt(b, "message_count", msgs)
	if ts != nil {
		b = protocol.AppendStatInt(b, "bytes", ts.putBytes.Load())
		b = protocol.AppendStatInt(b, "topic_put", ts.puts.Load())
		b = protocol.AppendStatInt(b, "topic_get", ts.gets.Load())
		b = protocol.AppendStatInt(b, "topic_offset", ts.offsets.Load())
		b = protocol.AppendStatInt(b, "topic_get_miss", ts.getMiss.Load())
		b = protocol.AppendStatInt(b, "topic_put_failed", ts.putFailed.Load())
	}
	return b
}

// realtime keeps the counters of the previous `stats realtime` so the reply
// shows what happened since then, with the elapsed time (MetaQ's realtime
// stats are windowed counters too).
type realtimeSnap struct {
	at                              time.Time
	put, get, offset, miss, putFail int64
}

func (s *Server) appendRealtimeStats(b []byte) []byte {
	now := time.Now()
	cur := realtimeSnap{at: now, put: s.stats.cmdPut.Load(), get: s.stats.cmdGet.Load(), offset: s.stats.cmdOffset.Load(),
		miss: s.stats.getMiss.Load(), putFail: s.stats.putFailed.Load()}
	s.rtMu.Lock()
	prev := s.rtPrev
	s.rtPrev = cur
	s.rtMu.Unlock()
	if prev.at.IsZero() {
		prev = realtimeSnap{at: s.start}
	}
	ms := max(now.Sub(prev.at).Milliseconds(), 1)
	line := func(b []byte, key string, n int64) []byte {
		b = append(b, key...)
		b = append(b, " Count="...)
		b = strconv.AppendInt(b, n, 10)
		b = append(b, ",Count/Duration="...)
		b = strconv.AppendFloat(b, float64(n)*1000/float64(ms), 'f', 1, 64)
		b = append(b, "/s,Duration="...)
		b = strconv.AppendInt(b, ms, 10)
		b = append(b, "ms\r\n"...)
		return b
	}
	b = line(b, "realtime_put", cur.put-prev.put)
	b = line(b, "realtime_get", cur.get-prev.get)
	b = line(b, "realtime_offset", cur.offset-prev.offset)
	b = line(b, "realtime_get_miss", cur.miss-prev.miss)
	b = line(b, "realtime_put_failed", cur.putFail-prev.putFail)
	return b
}

// appendStoreStats adds the storage engine's figures (metaq additions).
func appendStoreStats(b []byte, st store.Stats) []byte {
	b = protocol.AppendStatInts(b,
		protocol.IntStat{Key: "store_put_messages", V: st.PutMessages},
		protocol.IntStat{Key: "store_put_bytes", V: st.PutBytes},
		protocol.IntStat{Key: "store_put_errors", V: st.PutErrors},
		protocol.IntStat{Key: "commitlog_min", V: st.CommitLogMin},
		protocol.IntStat{Key: "commitlog_max", V: st.CommitLogMax},
		protocol.IntStat{Key: "flushed_position", V: st.FlushedPosition},
		protocol.IntStat{Key: "dispatch_lag", V: st.DispatchLag},
		protocol.IntStat{Key: "unflushed_bytes", V: st.UnflushedBytes},
		protocol.IntStat{Key: "segments", V: int64(st.Segments)},
		protocol.IntStat{Key: "fsyncs", V: st.Fsyncs},
		protocol.IntStat{Key: "group_commits", V: st.GroupCommits},
		protocol.IntStat{Key: "avg_fsync_us", V: st.AvgFsync.Microseconds()},
		protocol.IntStat{Key: "cold_read_bytes", V: st.ColdReadBytes},
		protocol.IntStat{Key: "partitions", V: int64(st.Partitions)})
	if st.SyncFlush {
		b = protocol.AppendStat(b, "flush_mode", "sync")
	} else {
		b = protocol.AppendStat(b, "flush_mode", "async")
	}
	if st.WriteError != "" {
		b = protocol.AppendStat(b, "write_error", strings.ReplaceAll(st.WriteError, "\r\n", " "))
	}
	return b
}
