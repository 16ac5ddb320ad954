package logx

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(strings.TrimSpace(w.b.String()), "\n")
}

var repeatedRE = regexp.MustCompile(`repeated=(\d+)`)

// count returns the full lines of msg and the sum of its summaries' counts.
func count(lines []string, msg string) (full, repeated int) {
	for _, l := range lines {
		if !strings.Contains(l, "msg=\""+msg) && !strings.Contains(l, "msg="+msg) {
			continue
		}
		if m := repeatedRE.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			repeated += n
			continue
		}
		full++
	}
	return full, repeated
}

// A flood of one message from many goroutines: its first record in full,
// every other one counted in summaries (whatever the timing), other
// messages unaffected, the attributes of derived loggers kept.
func TestFloodIsSummarised(t *testing.T) {
	var out lockedBuffer
	log, lim := New(slog.New(slog.NewTextHandler(&out, nil)), Options{Interval: 20 * time.Millisecond})
	// The limiter's clock stands still: summaries still come from the real
	// 20 ms timers, but a quiet window (which writes the next record in full
	// again, TestQuietIntervalResets) cannot happen because the flooding
	// goroutines were not scheduled for 20 ms on a loaded machine.
	frozen := time.Now()
	lim.now = func() time.Time { return frozen }
	conn := log.With("conn", 7)
	const goroutines, each = 8, 5000
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				conn.Error("append failed", "topic", "t"+strconv.Itoa(g), "err", "disk full")
			}
		}(g)
	}
	log.Info("something else")
	wg.Wait()
	lim.Stop()
	lines := out.lines()
	full, repeated := count(lines, "append failed")
	if full != 1 || full+repeated != goroutines*each {
		t.Fatalf("%d full lines, %d repeated; want 1 and %d\n%s", full, repeated, goroutines*each-1, strings.Join(lines, "\n"))
	}
	if len(lines) > 1000 {
		t.Fatalf("%d lines for %d records", len(lines), goroutines*each)
	}
	if f, _ := count(lines, "something else"); f != 1 {
		t.Fatalf("other message: %d lines", f)
	}
	for _, l := range lines {
		if strings.Contains(l, "repeated=") && (!strings.Contains(l, "conn=7") || !strings.Contains(l, "(repeated ")) {
			t.Fatalf("summary without the logger's attributes: %s", l)
		}
	}
	if lim.Suppressed() != goroutines*each-1 {
		t.Fatalf("Suppressed() = %d", lim.Suppressed())
	}
	// After Stop everything passes.
	log.Error("append failed")
	log.Error("append failed")
	if f, _ := count(out.lines(), "append failed"); f != 3 {
		t.Fatalf("after Stop: %d full lines", f)
	}
}

// Levels are distinct keys; a message that comes back after a quiet
// interval is written in full again.
func TestQuietIntervalResets(t *testing.T) {
	var out lockedBuffer
	h := NewHandler(slog.NewTextHandler(&out, nil), Options{Interval: time.Hour})
	log := slog.New(h)
	clock := time.Unix(1000, 0)
	var mu sync.Mutex
	h.l.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	log.Warn("bad request")
	log.Error("bad request")
	log.Warn("bad request") // held back
	mu.Lock()
	clock = clock.Add(3 * time.Hour)
	mu.Unlock()
	h.l.Stop()
	full, repeated := count(out.lines(), "bad request")
	if full != 2 || repeated != 1 {
		t.Fatalf("full %d repeated %d:\n%s", full, repeated, strings.Join(out.lines(), "\n"))
	}
	// A fresh limiter: after a quiet hour, the message is written in full.
	out = lockedBuffer{}
	h = NewHandler(slog.NewTextHandler(&out, nil), Options{Interval: time.Hour})
	h.l.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	log = slog.New(h)
	log.Info("closing idle connection")
	mu.Lock()
	clock = clock.Add(2 * time.Hour)
	mu.Unlock()
	log.Info("closing idle connection")
	h.l.Stop()
	if full, repeated := count(out.lines(), "closing idle connection"); full != 2 || repeated != 0 {
		t.Fatalf("after a quiet interval: full %d repeated %d", full, repeated)
	}
}

// Distinct messages beyond MaxKeys are not tracked (and not lost).
func TestMaxKeys(t *testing.T) {
	var out lockedBuffer
	log, lim := New(slog.New(slog.NewTextHandler(&out, nil)), Options{Interval: time.Hour, MaxKeys: 10})
	for i := 0; i < 100; i++ {
		log.Info(fmt.Sprintf("message %d", i))
	}
	lim.Stop()
	if n := len(out.lines()); n != 100 {
		t.Fatalf("%d lines, want 100", n)
	}
	// Wrapping a rate-limited logger again is a no-op.
	again, l2 := New(log, Options{})
	if again != log || l2 != nil {
		t.Fatal("double wrap")
	}
}
