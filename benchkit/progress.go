package benchkit

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Progress prints a live one-line status ("\r" rewritten in place) while a
// benchmark runs. It is silent unless enabled, which NewProgress decides by
// whether the file is a terminal, so redirected output stays clean.
type Progress struct {
	w       io.Writer
	enabled bool
	label   string
	count   func() int64

	mu        sync.Mutex
	start     time.Time
	lastT     time.Time
	lastN     int64
	width     int
	stop      chan struct{}
	done      chan struct{}
	stopOnce  sync.Once
	startOnce sync.Once
}

// NewProgress returns a progress line on f, enabled only when f is a
// terminal. count returns the number of messages done so far and must be
// safe to call from another goroutine (e.g. an atomic load).
func NewProgress(f *os.File, label string, count func() int64) *Progress {
	return NewProgressWriter(f, IsTerminal(f), label, count)
}

// NewProgressWriter is NewProgress with the decision made by the caller.
func NewProgressWriter(w io.Writer, enabled bool, label string, count func() int64) *Progress {
	return &Progress{w: w, enabled: enabled, label: label, count: count,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Enabled reports whether the line is printed at all.
func (p *Progress) Enabled() bool { return p.enabled }

// Start begins redrawing the line every interval (default 500 ms).
func (p *Progress) Start(interval time.Duration) {
	p.startOnce.Do(func() {
		if interval <= 0 {
			interval = 500 * time.Millisecond
		}
		now := time.Now()
		p.mu.Lock()
		p.start, p.lastT = now, now
		p.mu.Unlock()
		if !p.enabled {
			close(p.done)
			return
		}
		go func() {
			defer close(p.done)
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case now := <-t.C:
					p.draw(now)
				}
			}
		}()
	})
}

// Stop ends the line and erases it, leaving the cursor at column 0.
func (p *Progress) Stop() {
	p.Start(0) // make Stop safe without Start
	p.stopOnce.Do(func() {
		close(p.stop)
		<-p.done
		if p.enabled {
			p.mu.Lock()
			fmt.Fprint(p.w, "\r\x1b[K")
			p.mu.Unlock()
		}
	})
}

func (p *Progress) draw(now time.Time) {
	n := p.count()
	p.mu.Lock()
	defer p.mu.Unlock()
	line := p.line(now, n)
	pad := p.width - len(line)
	p.width = len(line)
	if pad < 0 {
		pad = 0
	}
	fmt.Fprintf(p.w, "\r%s%*s", line, pad, "")
}

// line formats the status for n messages at time now and advances the
// interval used for the current rate. Callers hold p.mu.
func (p *Progress) line(now time.Time, n int64) string {
	el := now.Sub(p.start).Seconds()
	var avg, cur float64
	if el > 0 {
		avg = float64(n) / el
	}
	if dt := now.Sub(p.lastT).Seconds(); dt > 0 {
		cur = float64(n-p.lastN) / dt
	}
	p.lastT, p.lastN = now, n
	return fmt.Sprintf("%s  %5.1fs  %s msgs  %s (now %s)", p.label, el, FormatCount(n), FormatRate(avg), FormatRate(cur))
}

// FormatCount writes n with thousands separators: 1234567 -> "1,234,567".
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// FormatRate writes a per-second rate compactly: 850/s, 4.6k/s, 228k/s, 1.41M/s.
func FormatRate(r float64) string { return formatSI(r) + "/s" }

func formatSI(v float64) string {
	switch a := abs(v); {
	case a >= 1e9:
		return trim(v/1e9, a/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6, a/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3, a/1e3) + "k"
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// trim prints v with 3 significant digits (a = |v|).
func trim(v, a float64) string {
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
