package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// progress redraws one status line ("\r…") on stderr while a long command runs: the count so
// far and the rate over the last interval. It is only enabled on a terminal, so piped or
// redirected output stays clean.
type progress struct {
	w     io.Writer
	label string
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// newProgress returns a progress line, or nil when it must stay quiet: stderr is not a
// terminal, or stdout is the same terminal and carries the command's own output (unless
// quietOut says the command prints nothing per message).
func (a *App) newProgress(label string, quietOut bool) *progress {
	if !isTerminal(a.Stderr) || (!quietOut && isTerminal(a.Stdout)) {
		return nil
	}
	p := &progress{w: a.Stderr, label: label, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) add(n int64) {
	if p != nil {
		p.n.Add(n)
	}
}

func (p *progress) loop() {
	defer close(p.done)
	start := time.Now()
	last, lastN := start, int64(0)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case now := <-t.C:
			n := p.n.Load()
			rate := float64(n-lastN) / now.Sub(last).Seconds()
			last, lastN = now, n
			fmt.Fprintf(p.w, "\r\033[K%s %d messages, %.0f msg/s, %s", p.label, n, rate, now.Sub(start).Round(time.Second))
		}
	}
}

// finish erases the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.stop) })
	<-p.done
}
