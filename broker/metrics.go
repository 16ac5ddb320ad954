package broker

import (
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// What the HTTP side (broker/httpapi) reads: snapshots of the counters the
// broker keeps anyway for `stats`, taken at scrape time, so metrics cost the
// data path nothing but the few atomic adds it already does. Latencies are
// sampled: one put and one get in latencySampleEvery per topic is timed
// (two clock reads and a histogram observation), the others cost one mask
// test. See docs/observability.md.

// latencySampleEvery must be a power of two.
const latencySampleEvery = 64

// LatencyObserver receives sampled request latencies in seconds.
// Put: from the request being parsed to its reply being rendered (after its
// group commit in sync-flush mode). Get: the broker's work for an answered
// get (store read and reply queued); parked long polls are not timed.
type LatencyObserver interface {
	ObservePut(seconds float64)
	ObserveGet(seconds float64)
}

type latencyObserver struct{ o LatencyObserver }

// monoBase anchors sample timestamps to the monotonic clock.
var monoBase = time.Now()

// SetLatencyObserver installs o (nil removes it).
func (s *Server) SetLatencyObserver(o LatencyObserver) {
	if o == nil {
		s.lat.Store(nil)
		return
	}
	s.lat.Store(&latencyObserver{o})
}

// sampleStart returns a start timestamp for every latencySampleEvery-th
// request (n is the topic's request count), 0 for the others.
func (s *Server) sampleStart(n int64) int64 {
	if n&(latencySampleEvery-1) != 0 || s.lat.Load() == nil {
		return 0
	}
	return int64(time.Since(monoBase)) | 1 // never 0
}

func (s *Server) observePut(t0 int64) {
	if t0 == 0 {
		return
	}
	if o := s.lat.Load(); o != nil {
		o.o.ObservePut(float64(int64(time.Since(monoBase))-t0) / 1e9)
	}
}

func (s *Server) observeGet(t0 int64) {
	if t0 == 0 {
		return
	}
	if o := s.lat.Load(); o != nil {
		o.o.ObserveGet(float64(int64(time.Since(monoBase))-t0) / 1e9)
	}
}

// TopicCounters are one topic's counters since the broker started.
type TopicCounters struct {
	Topic           string
	Partitions      int // configured
	AcceptPublish   bool
	AcceptSubscribe bool
	Puts            int64 // put requests
	PutBytes        int64 // message body bytes accepted
	PutFailed       int64
	Gets            int64 // get requests
	GetMessages     int64 // messages served
	GetBytes        int64 // record bytes served
	GetMiss         int64
	Offsets         int64
}

// TopicCounters returns the counters of every topic used since start
// (unordered), those a reload no longer accepts included (frozen), so that
// the per-topic metrics never go down.
func (s *Server) TopicCounters() []TopicCounters {
	m := s.topics.counted()
	out := make([]TopicCounters, 0, len(m))
	for _, ts := range m {
		out = append(out, TopicCounters{
			Topic: ts.name, Partitions: ts.settings.NumPartitions,
			AcceptPublish: ts.settings.AcceptPublish, AcceptSubscribe: ts.settings.AcceptSubscribe,
			Puts: ts.puts.Load(), PutBytes: ts.putBytes.Load(), PutFailed: ts.putFailed.Load(),
			Gets: ts.gets.Load(), GetMessages: ts.getMsgs.Load(), GetBytes: ts.getBytes.Load(),
			GetMiss: ts.getMiss.Load(), Offsets: ts.offsets.Load(),
		})
	}
	return out
}

// Counters are the broker-wide totals (`stats`).
type Counters struct {
	Puts, Gets, Offsets int64
	GetMiss, GetFailed  int64
	PutFailed           int64
	LongPolls           int64 // gets parked since start
	BadRequests         int64
	Connections         int
	LongPollWaiters     int // gets parked now
	Started             time.Time
}

// Counters returns a snapshot of the broker-wide counters.
func (s *Server) Counters() Counters {
	c := Counters{
		Puts: s.stats.cmdPut.Load(), Gets: s.stats.cmdGet.Load(), Offsets: s.stats.cmdOffset.Load(),
		GetMiss: s.stats.getMiss.Load(), GetFailed: s.stats.getFailed.Load(), PutFailed: s.stats.putFailed.Load(),
		LongPolls: s.stats.longPolls.Load(), BadRequests: s.stats.badReqs.Load(), Started: s.start,
	}
	s.mu.Lock()
	c.Connections = len(s.conns)
	for cn := range s.conns {
		c.LongPollWaiters += int(cn.parked.Load())
	}
	s.mu.Unlock()
	return c
}

// Store is the broker's store.
func (s *Server) Store() *store.Store { return s.store }

// BrokerID is the configured brokerId.
func (s *Server) BrokerID() int { return s.opts.BrokerID }

// LookupTopic reports how the broker's topic policy treats topic.
func (s *Server) LookupTopic(topic string) (TopicSettings, bool) { return s.opts.Topics.Lookup(topic) }
