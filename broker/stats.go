package broker

import "sync/atomic"

// CountBadRequest counts a request answered 400 for bad input outside the
// text protocol (the HTTP gateway's), in bad_requests and
// metaq_bad_requests_total.
func (s *Server) CountBadRequest() { s.stats.badReqs.Add(1) }

// counters are the broker-wide totals `stats` reports (MetaQ's names).
type counters struct {
	cmdPut    atomic.Int64
	cmdGet    atomic.Int64
	cmdOffset atomic.Int64
	getMiss   atomic.Int64
	getFailed atomic.Int64
	putFailed atomic.Int64
	longPolls atomic.Int64 // gets parked since start
	badReqs   atomic.Int64 // 400 replies
}
