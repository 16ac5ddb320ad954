package broker

import "sync/atomic"

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
