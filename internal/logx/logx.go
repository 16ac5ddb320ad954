// Package logx rate-limits repeated log lines: a slog.Handler wrapper that
// lets the first records of a message through in full and then, per
// interval, writes one line saying how many more there were, instead of
// one line per record. It is what keeps a client that loops on a failing
// request (a put while the disk is full, a bad request, a refused topic)
// from flooding the log: 2,647,981 ERROR lines in 60 s before, one line
// plus one count every 10 s after.
//
// Records are keyed by level and message: the attributes (topic, error,
// connection) do not count, so repeats that differ only in them are
// summarised together; the summary carries the attributes of the first
// record it stands for and a `repeated` count. Messages should therefore be
// constant strings, with the variable parts in attributes.
//
// Lock rules: Limiter.mu guards keys and the entries; it is never held while
// the wrapped handler writes.
package logx

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Options tune a Limiter; zero values take the defaults.
type Options struct {
	Interval time.Duration // summary interval (default 10s)
	Burst    int           // records of a message written in full per interval (default 1)
	MaxKeys  int           // distinct messages tracked (default 4096); beyond, expired ones are dropped, then new ones pass unlimited
}

// Default values of Options.
const (
	DefaultInterval = 10 * time.Second
	DefaultBurst    = 1
	DefaultMaxKeys  = 4096
)

type key struct {
	level slog.Level
	msg   string
}

type entry struct {
	start      time.Time // of the current window
	count      int       // records written in full in the window
	suppressed int       // records held back in the window
	first      slog.Record
	h          slog.Handler // handler (with the attributes) of first
	timer      *time.Timer
}

// Limiter is the state shared by a Handler and every handler derived from
// it with WithAttrs/WithGroup.
type Limiter struct {
	interval time.Duration
	burst    int
	maxKeys  int
	now      func() time.Time

	flushing sync.WaitGroup // summaries being written by timers (Stop waits for them)

	mu      sync.Mutex
	keys    map[key]*entry
	stopped bool
	total   int64 // records suppressed since start
}

// Handler is a rate-limiting slog.Handler.
type Handler struct {
	next slog.Handler
	l    *Limiter
}

// NewHandler wraps next.
func NewHandler(next slog.Handler, o Options) *Handler {
	l := &Limiter{interval: o.Interval, burst: o.Burst, maxKeys: o.MaxKeys, now: time.Now, keys: map[key]*entry{}}
	if l.interval <= 0 {
		l.interval = DefaultInterval
	}
	if l.burst <= 0 {
		l.burst = DefaultBurst
	}
	if l.maxKeys <= 0 {
		l.maxKeys = DefaultMaxKeys
	}
	return &Handler{next: next, l: l}
}

// New returns a logger writing through a new rate-limiting handler over
// l's handler, and that handler's Limiter (Stop it when done). A logger
// that is rate-limited already is returned as is, with a nil Limiter.
func New(l *slog.Logger, o Options) (*slog.Logger, *Limiter) {
	if _, ok := l.Handler().(*Handler); ok {
		return l, nil
	}
	h := NewHandler(l.Handler(), o)
	return slog.New(h), h.l
}

// Limiter returns the handler's shared state.
func (h *Handler) Limiter() *Limiter { return h.l }

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// WithAttrs implements slog.Handler; the result shares the limits.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), l: h.l}
}

// WithGroup implements slog.Handler; the result shares the limits.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), l: h.l}
}

// Handle implements slog.Handler: the record is written, or counted for the
// interval's summary.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if h.l.admit(h.next, r) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// admit decides whether r is written now.
func (l *Limiter) admit(h slog.Handler, r slog.Record) bool {
	k := key{r.Level, r.Message}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return true
	}
	e := l.keys[k]
	if e == nil {
		if len(l.keys) >= l.maxKeys && !l.pruneLocked(now) {
			return true // too many distinct messages to track: let it through
		}
		e = &entry{start: now}
		l.keys[k] = e
	} else if e.timer == nil && now.Sub(e.start) >= l.interval {
		e.start, e.count = now, 0 // a quiet window passed
	}
	if e.count < l.burst {
		e.count++
		return true
	}
	if e.suppressed == 0 {
		e.first, e.h = r.Clone(), h
	}
	e.suppressed++
	l.total++
	if e.timer == nil {
		e.timer = time.AfterFunc(e.start.Add(l.interval).Sub(now), func() { l.flush(k) })
	}
	return false
}

// pruneLocked drops entries whose window ended without anything held back;
// it reports whether there is room.
func (l *Limiter) pruneLocked(now time.Time) bool {
	for k, e := range l.keys {
		if e.timer == nil && now.Sub(e.start) >= l.interval {
			delete(l.keys, k)
		}
	}
	return len(l.keys) < l.maxKeys
}

// flush writes k's summary at the end of its window (timer goroutine). The
// next window starts with the burst spent, so a flood that goes on is
// reported by one summary per interval; after a quiet interval the next
// record is written in full again.
func (l *Limiter) flush(k key) {
	l.mu.Lock()
	e := l.keys[k]
	if e == nil || e.timer == nil || l.stopped {
		l.mu.Unlock()
		return
	}
	n, first, h := e.suppressed, e.first, e.h
	e.timer, e.suppressed, e.first, e.h = nil, 0, slog.Record{}, nil
	e.start, e.count = l.now(), l.burst
	interval := l.interval
	l.flushing.Add(1)
	l.mu.Unlock()
	defer l.flushing.Done()
	writeSummary(h, first, n, interval)
}

func writeSummary(h slog.Handler, first slog.Record, n int, interval time.Duration) {
	if n == 0 || h == nil {
		return
	}
	r := slog.NewRecord(time.Now(), first.Level, first.Message+" (repeated "+strconv.Itoa(n)+" times in the last "+interval.String()+")", first.PC)
	first.Attrs(func(a slog.Attr) bool {
		r.AddAttrs(a)
		return true
	})
	r.AddAttrs(slog.Int("repeated", n))
	_ = h.Handle(context.Background(), r)
}

// Suppressed is the number of records held back since start (each one
// counted in a summary line).
func (l *Limiter) Suppressed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Stop writes the pending summaries now and stops limiting: records after
// it are written in full. Call it before the wrapped handler's output goes
// away (a test's log, a closed file).
func (l *Limiter) Stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	type pending struct {
		h     slog.Handler
		first slog.Record
		n     int
	}
	var out []pending
	for _, e := range l.keys {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		if e.suppressed > 0 {
			out = append(out, pending{e.h, e.first, e.suppressed})
		}
	}
	l.keys = map[key]*entry{}
	interval := l.interval
	l.mu.Unlock()
	l.flushing.Wait()
	for _, p := range out {
		writeSummary(p.h, p.first, p.n, interval)
	}
}
