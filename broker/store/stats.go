package store

import (
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// counters are updated without the append lock.
type counters struct {
	fsyncs            atomic.Int64
	fsyncNanos        atomic.Int64
	rounds            atomic.Int64
	dispatchedRecords atomic.Int64
	indexWrites       atomic.Int64
	checkpoints       atomic.Int64
	segmentsDeleted   atomic.Int64
	corruptReads      atomic.Int64
	indexRepairs      atomic.Int64 // damaged index ranges rebuilt from the commit log (repair.go)
	zeroFilled        atomic.Int64
	fillWaits         atomic.Int64 // appends that waited for a zero-fill chunk (tests)
	stageWaits        atomic.Int64 // appends that waited for the staging buffer to drain (stage.go; tests)
	inlineDispatches  atomic.Int64 // dispatch batches run by the goroutine that made them visible (dispatch.go; tests)
	coldReads         atomic.Int64 // direct reads of cold commit-log bytes (coldread.go)
	coldReadBytes     atomic.Int64
	coldUnitReads     atomic.Int64
}

// Stats are counters for MetaQ's `stats` command and for metrics. Counters
// marked "since open" restart at zero on every Open.
type Stats struct {
	PutMessages int64 // messages appended since open
	PutBytes    int64 // record bytes appended since open
	PutErrors   int64 // appends refused since open (I/O, disk full, closed)

	CommitLogMin       int64 // physical offset of the oldest byte kept
	CommitLogMax       int64 // physical write position (next record's offset)
	FlushedPosition    int64 // durable below this
	DispatchedPosition int64 // indexed below this
	DispatchLag        int64 // bytes written but not yet indexed
	UnflushedBytes     int64 // bytes written but not yet durable
	Segments           int   // commit-log segment files
	SegmentRolls       int64 // since open
	SegmentsDeleted    int64 // by retention, since open
	ZeroFilledBytes    int64 // commit-log bytes zero-filled ahead of the writer, since open (prefill.go)

	Fsyncs            int64         // commit-log flush rounds that synced, since open
	GroupCommits      int64         // completed group-commit rounds (sync mode), since open
	AvgFsync          time.Duration // mean fsync round duration
	DispatchedRecords int64         // records indexed since open
	IndexWrites       int64         // index pwrites since open
	IndexBufferBytes  int64         // memory holding partitions' newest units (indextail.go)
	OpenIndexFiles    int
	Checkpoints       int64
	CorruptReads      int64 // records refused by read verification, since open
	IndexRepairs      int64 // index units that failed verification on a read, rebuilt from the commit log (repair.go), since open
	ColdReads         int64 // direct reads of commit-log bytes not in the page cache (coldread.go), since open
	ColdReadBytes     int64 // bytes they read
	ColdUnitReads     int64 // direct reads of cold index units (coldunits.go), since open

	SyncFlush  bool   // group-commit mode
	WriteError string // sticky error refusing appends ("" = none)
	Partitions int
	Topics     []TopicStats
}

// TopicStats are one topic's figures.
type TopicStats struct {
	Topic       string
	Partitions  int
	Messages    int64 // sum over partitions of max - min (messages kept)
	PutMessages int64 // appended since open
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	var st Stats
	puts := make(map[string]int64)
	ls := s.clog.stats(func() { // topic put counters are kept under the append lock
		s.partsMu.RLock()
		for name, t := range s.topics {
			puts[name] = t.puts
		}
		s.partsMu.RUnlock()
	})
	st.PutMessages, st.PutBytes, st.PutErrors = ls.puts, ls.putBytes, ls.putErrors
	st.SegmentRolls = ls.rolls
	st.CommitLogMax = ls.wpos
	if ls.err != nil {
		st.WriteError = ls.err.Error()
	}

	st.CommitLogMin = s.clog.minPos()
	st.FlushedPosition = s.clog.flushedPos()
	st.DispatchedPosition = s.dispatched.Load()
	st.DispatchLag = max(0, st.CommitLogMax-st.DispatchedPosition)
	st.UnflushedBytes = max(0, st.CommitLogMax-st.FlushedPosition)
	st.Segments = len(s.clog.segments())
	st.SegmentsDeleted = s.counters.segmentsDeleted.Load()
	st.ZeroFilledBytes = s.counters.zeroFilled.Load()
	st.Fsyncs = s.counters.fsyncs.Load()
	st.GroupCommits = s.counters.rounds.Load()
	if st.Fsyncs > 0 {
		st.AvgFsync = time.Duration(s.counters.fsyncNanos.Load() / st.Fsyncs)
	}
	st.DispatchedRecords = s.counters.dispatchedRecords.Load()
	st.IndexWrites = s.counters.indexWrites.Load()
	st.IndexBufferBytes = s.tailBytesHeld()
	st.OpenIndexFiles = s.files.openCount()
	st.Checkpoints = s.counters.checkpoints.Load()
	st.CorruptReads = s.counters.corruptReads.Load()
	st.IndexRepairs = s.counters.indexRepairs.Load()
	st.ColdReads, st.ColdReadBytes = s.counters.coldReads.Load(), s.counters.coldReadBytes.Load()
	st.ColdUnitReads = s.counters.coldUnitReads.Load()
	st.SyncFlush = s.sync

	// The topics that Topics lists, counted in place: no partition lists
	// built and sorted (a broker with 10,000 partitions answers `stats` and
	// metrics scrapes without them).
	s.partsMu.RLock()
	for name, t := range s.topics {
		ts := TopicStats{Topic: name, PutMessages: puts[name]}
		for _, p := range t.parts {
			if min, max, ok := p.stored(); ok {
				ts.Partitions++
				ts.Messages += max - min
			}
		}
		if ts.Partitions > 0 {
			st.Partitions += ts.Partitions
			st.Topics = append(st.Topics, ts)
		}
	}
	s.partsMu.RUnlock()
	slices.SortFunc(st.Topics, func(a, b TopicStats) int { return strings.Compare(a.Topic, b.Topic) })
	return st
}

// PartitionInfo is one partition's offsets.
type PartitionInfo struct {
	Partition int32
	Min, Max  int64
}

// TopicInfo lists a topic's partitions.
type TopicInfo struct {
	Topic      string
	Partitions []PartitionInfo
}

// stored is p's offset range as Topics and Stats report it: ok when p was
// ever assigned a queue offset.
func (p *partition) stored() (min, max int64, ok bool) {
	if max = p.next.Load(); max <= 0 {
		return 0, 0, false
	}
	return p.min.Load(), max, true
}

// Topics returns every topic with at least one stored record (ever
// assigned a queue offset), sorted by name, partitions sorted by number.
func (s *Store) Topics() []TopicInfo {
	s.partsMu.RLock()
	var out []TopicInfo
	for name, t := range s.topics {
		ti := TopicInfo{Topic: name}
		for id, p := range t.parts {
			if min, max, ok := p.stored(); ok {
				ti.Partitions = append(ti.Partitions, PartitionInfo{Partition: id, Min: min, Max: max})
			}
		}
		if len(ti.Partitions) > 0 {
			sort.Slice(ti.Partitions, func(i, j int) bool { return ti.Partitions[i].Partition < ti.Partitions[j].Partition })
			out = append(out, ti)
		}
	}
	s.partsMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}
