package store

// prefetchLine asks the CPU to load the cache line at p (a hint: it never
// faults, so p may be nil or stale).
//
//go:noescape
func prefetchLine(p *byte)
