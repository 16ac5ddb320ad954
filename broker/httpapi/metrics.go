package httpapi

import (
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/store"
)

// Metric families (docs/observability.md lists them with their meaning).
// Everything except the latency histograms is read at scrape time from
// counters the broker and the store keep anyway: the data path pays nothing
// for /metrics.
//
// Cardinality with many partitions: per-topic families carry only the
// topic label, and only for the first MetricsMaxTopics topics used since
// start (later ones are summed under topic="_other", so the set of series
// only grows and counters stay monotonic); nothing is labelled by partition
// except consumer lag, capped at MetricsMaxLagSeries series (largest first),
// with complete per group/topic totals beside it.

const otherTopic = "_other"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dMsgsIn      = desc("metaq_messages_in_total", "Messages appended, per topic, since the broker started.", "topic")
	dBytesIn     = desc("metaq_bytes_in_total", "Message body bytes accepted by put, per topic.", "topic")
	dMsgsOut     = desc("metaq_messages_out_total", "Messages served by get, per topic.", "topic")
	dBytesOut    = desc("metaq_bytes_out_total", "Record bytes served by get, per topic.", "topic")
	dTopicPutErr = desc("metaq_topic_put_errors_total", "Refused puts, per topic.", "topic")
	dTopicGets   = desc("metaq_topic_get_requests_total", "Get requests, per topic.", "topic")
	dTopicMiss   = desc("metaq_topic_get_misses_total", "Gets answered without messages (404/301), per topic.", "topic")
	dTopicParts  = desc("metaq_topic_partitions", "Partitions this broker serves for the topic.", "topic")
	dTopicKept   = desc("metaq_topic_messages", "Messages kept on this broker (max - min offset over partitions).", "topic")

	dRequests   = desc("metaq_requests_total", "Requests by command.", "command")
	dPutErrors  = desc("metaq_put_errors_total", "Puts answered with an error (every cause, failed group commits included).")
	dGetErrors  = desc("metaq_get_errors_total", "Gets that failed reading the store.")
	dBadReqs    = desc("metaq_bad_requests_total", "Requests answered 400.")
	dLongPolls  = desc("metaq_long_polls_total", "Gets parked waiting for a message.")
	dConns      = desc("metaq_connections", "Open client connections.")
	dWaiters    = desc("metaq_long_poll_waiters", "Gets parked now.")
	dInfo       = desc("metaq_broker_info", "Constant 1, labelled with the broker's identity.", "broker_id", "role", "version")
	dStartTime  = desc("metaq_broker_start_time_seconds", "Unix time the broker started.")
	dStoreBytes = desc("metaq_store_commitlog_bytes", "Bytes of commit log kept (write position - oldest kept byte).")
	dWritePos   = desc("metaq_store_write_position_bytes", "Commit-log write position.")
	dUnflushed  = desc("metaq_store_unflushed_bytes", "Bytes written but not yet fsynced.")
	dDispLag    = desc("metaq_store_dispatch_lag_bytes", "Bytes written but not yet indexed.")
	dSegments   = desc("metaq_store_segments", "Commit-log segment files.")
	dParts      = desc("metaq_store_partitions", "Partitions with data.")
	dTopics     = desc("metaq_store_topics", "Topics with data.")
	dIndexFiles = desc("metaq_store_open_index_files", "Index files open.")
	dStorePuts  = desc("metaq_store_put_messages_total", "Messages appended to the commit log since the store opened.")
	dStorePutB  = desc("metaq_store_put_bytes_total", "Record bytes appended since the store opened.")
	dStoreErr   = desc("metaq_store_put_errors_total", "Appends refused by the store (I/O error, disk full, closed).")
	dFsyncs     = desc("metaq_store_fsyncs_total", "Commit-log fsync rounds.")
	dRounds     = desc("metaq_store_group_commits_total", "Completed group-commit rounds (sync flush).")
	dRolls      = desc("metaq_store_segment_rolls_total", "Segments started since open.")
	dDeleted    = desc("metaq_store_segments_deleted_total", "Segments deleted by retention since open.")
	dCorrupt    = desc("metaq_store_corrupt_reads_total", "Records refused by read verification.")
	dWriteErr   = desc("metaq_store_write_error", "1 while a sticky write error refuses appends.")
	dSyncFlush  = desc("metaq_store_sync_flush", "1 in sync-flush (group commit) mode, 0 in async mode.")
	dDiskFree   = desc("metaq_store_disk_free_bytes", "Free bytes (for unprivileged users) on dataPath's file system.")
	dDiskTotal  = desc("metaq_store_disk_total_bytes", "Size of dataPath's file system.")
)

// brokerCollector reads a broker's counters at scrape time.
type brokerCollector struct {
	srv      *broker.Server
	dataPath string
	ha       *ha.Node // nil without replication: the broker is a master

	mu        sync.Mutex
	own       map[string]bool // topics with their own series (first maxTopics seen)
	maxTopics int
}

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dMsgsIn, dBytesIn, dMsgsOut, dBytesOut, dTopicPutErr, dTopicGets, dTopicMiss,
		dTopicParts, dTopicKept, dRequests, dPutErrors, dGetErrors, dBadReqs, dLongPolls, dConns, dWaiters, dInfo,
		dStartTime, dStoreBytes, dWritePos, dUnflushed, dDispLag, dSegments, dParts, dTopics, dIndexFiles, dStorePuts,
		dStorePutB, dStoreErr, dFsyncs, dRounds, dRolls, dDeleted, dCorrupt, dWriteErr, dSyncFlush, dDiskFree, dDiskTotal} {
		ch <- d
	}
}

// label returns the topic label for topic: itself while it is among the
// first maxTopics seen, otherwise "_other". Assignment is sticky.
func (c *brokerCollector) labelLocked(topic string) string {
	if c.own[topic] {
		return topic
	}
	if len(c.own) < c.maxTopics {
		c.own[topic] = true
		return topic
	}
	return otherTopic
}

type topicSums struct {
	in, bytesIn, out, bytesOut, putErr, gets, miss float64
	parts, kept                                    float64
	hasStore                                       bool
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.Store().Stats()
	tcs := c.srv.TopicCounters()
	sort.Slice(tcs, func(i, j int) bool { return tcs[i].Topic < tcs[j].Topic })

	sums := map[string]*topicSums{}
	c.mu.Lock()
	get := func(topic string) *topicSums {
		l := c.labelLocked(topic)
		s := sums[l]
		if s == nil {
			s = &topicSums{}
			sums[l] = s
		}
		return s
	}
	for _, t := range st.Topics {
		s := get(t.Topic)
		s.in += float64(t.PutMessages)
		s.kept += float64(t.Messages)
		s.parts += float64(t.Partitions)
		s.hasStore = true
	}
	for _, t := range tcs {
		s := get(t.Topic)
		s.bytesIn += float64(t.PutBytes)
		s.out += float64(t.GetMessages)
		s.bytesOut += float64(t.GetBytes)
		s.putErr += float64(t.PutFailed)
		s.gets += float64(t.Gets)
		s.miss += float64(t.GetMiss)
	}
	c.mu.Unlock()
	for topic, s := range sums {
		counter(ch, dMsgsIn, s.in, topic)
		counter(ch, dBytesIn, s.bytesIn, topic)
		counter(ch, dMsgsOut, s.out, topic)
		counter(ch, dBytesOut, s.bytesOut, topic)
		counter(ch, dTopicPutErr, s.putErr, topic)
		counter(ch, dTopicGets, s.gets, topic)
		counter(ch, dTopicMiss, s.miss, topic)
		gauge(ch, dTopicParts, s.parts, topic)
		gauge(ch, dTopicKept, s.kept, topic)
	}

	k := c.srv.Counters()
	counter(ch, dRequests, float64(k.Puts), "put")
	counter(ch, dRequests, float64(k.Gets), "get")
	counter(ch, dRequests, float64(k.Offsets), "offset")
	counter(ch, dPutErrors, float64(k.PutFailed))
	counter(ch, dGetErrors, float64(k.GetFailed))
	counter(ch, dBadReqs, float64(k.BadRequests))
	counter(ch, dLongPolls, float64(k.LongPolls))
	gauge(ch, dConns, float64(k.Connections))
	gauge(ch, dWaiters, float64(k.LongPollWaiters))
	role := ha.RoleMaster
	if c.ha != nil {
		role = c.ha.Role() // read at every scrape: a slave may be promoted, a master demoted
	}
	gauge(ch, dInfo, 1, strconv.Itoa(c.srv.BrokerID()), role.String(), broker.Version)
	gauge(ch, dStartTime, float64(k.Started.UnixNano())/1e9)

	gauge(ch, dStoreBytes, float64(st.CommitLogMax-st.CommitLogMin))
	gauge(ch, dWritePos, float64(st.CommitLogMax))
	gauge(ch, dUnflushed, float64(st.UnflushedBytes))
	gauge(ch, dDispLag, float64(st.DispatchLag))
	gauge(ch, dSegments, float64(st.Segments))
	gauge(ch, dParts, float64(st.Partitions))
	gauge(ch, dTopics, float64(len(st.Topics)))
	gauge(ch, dIndexFiles, float64(st.OpenIndexFiles))
	counter(ch, dStorePuts, float64(st.PutMessages))
	counter(ch, dStorePutB, float64(st.PutBytes))
	counter(ch, dStoreErr, float64(st.PutErrors))
	counter(ch, dFsyncs, float64(st.Fsyncs))
	counter(ch, dRounds, float64(st.GroupCommits))
	counter(ch, dRolls, float64(st.SegmentRolls))
	counter(ch, dDeleted, float64(st.SegmentsDeleted))
	counter(ch, dCorrupt, float64(st.CorruptReads))
	gauge(ch, dWriteErr, b2f(st.WriteError != ""))
	gauge(ch, dSyncFlush, b2f(st.SyncFlush))
	if free, total, ok := diskUsage(c.dataPath); ok {
		gauge(ch, dDiskFree, free)
		gauge(ch, dDiskTotal, total)
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// diskUsage is statfs of path: bytes available to unprivileged users, and
// the file system's size.
func diskUsage(path string) (free, total float64, ok bool) {
	if path == "" {
		return 0, 0, false
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return 0, 0, false
	}
	return float64(fs.Bavail) * float64(fs.Bsize), float64(fs.Blocks) * float64(fs.Bsize), true
}

// latencyHistograms receive the broker's sampled latencies and the store's
// flush rounds.
type latencyHistograms struct {
	put, get, fsync, group prometheus.Histogram
}

func newLatencyHistograms() *latencyHistograms {
	lat := []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	return &latencyHistograms{
		put: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "metaq_put_latency_seconds",
			Help: "Put latency, parse to reply (after the group commit in sync-flush mode); 1 put in 64 per topic is timed.", Buckets: lat}),
		get: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "metaq_get_latency_seconds",
			Help: "Broker time of answered gets (store read and reply queued; long-poll waits excluded); 1 get in 64 per topic is timed.", Buckets: lat}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "metaq_store_fsync_seconds",
			Help: "Duration of commit-log fdatasync rounds.", Buckets: lat}),
		group: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "metaq_store_group_commit_messages",
			Help: "Puts acknowledged by one group-commit round (sync flush).", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
	}
}

func (h *latencyHistograms) ObservePut(s float64) { h.put.Observe(s) }
func (h *latencyHistograms) ObserveGet(s float64) { h.get.Observe(s) }

func (h *latencyHistograms) register(r *prometheus.Registry) {
	r.MustRegister(h.put, h.get, h.fsync, h.group)
}

// flushObserver adapts the store's flush rounds to the histograms.
func (h *latencyHistograms) flushObserver(sync bool) store.FlushObserver {
	return func(d time.Duration, members int) {
		h.fsync.Observe(d.Seconds())
		if sync && members > 0 {
			h.group.Observe(float64(members))
		}
	}
}

// newRegistry is a private registry (not the global one): process and Go
// runtime metrics plus whatever the caller adds.
func newRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return r
}
