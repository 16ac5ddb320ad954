package store

import "time"

// FlushObserver is told about every flush round that synced the commit log:
// how long the fdatasync took and how many appends the round acknowledged
// (its group-commit size; 0 in async mode, where rounds have no members).
// It runs on the flusher goroutine, once per round, never per message: it
// must be quick (a histogram observation) and must not call the store.
type FlushObserver func(fsync time.Duration, members int)

// SetFlushObserver installs fn (nil removes it). Metrics use it for the
// fsync-latency and group-commit-size histograms.
func (s *Store) SetFlushObserver(fn FlushObserver) { s.clog.setFlushObserver(fn) }

func (l *commitLog) setFlushObserver(fn FlushObserver) {
	if fn == nil {
		l.flushObs.Store(nil)
		return
	}
	l.flushObs.Store(&fn)
}

// observeFlush reports a completed round to the observer, if any.
func (l *commitLog) observeFlush(fsync time.Duration, f *Flush) {
	if fsync <= 0 {
		return
	}
	if fn := l.flushObs.Load(); fn != nil {
		n := 0
		if f != nil {
			n = f.n
		}
		(*fn)(fsync, n)
	}
}
