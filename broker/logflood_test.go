package broker_test

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

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/internal/logx"
)

// logCapture is a broker log kept in memory.
type logCapture struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logCapture) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

var repeatedAttr = regexp.MustCompile(`repeated=(\d+)`)

// lines returns the lines whose message starts with msg: how many were
// written in full, how many records their "repeated N times" summaries
// stand for, and how many lines that was.
func (w *logCapture) count(msg string) (full, repeated, lines int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range strings.Split(w.b.String(), "\n") {
		if !strings.Contains(l, `msg="`+msg) {
			continue
		}
		lines++
		if m := repeatedAttr.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			repeated += n
		} else {
			full++
		}
	}
	return full, repeated, lines
}

// Issue 11.5: a client looping on a failing put (the store failing as on a
// full disk), on bad requests and on a refused topic makes the broker log
// each message once in full and then a count per interval, not one line
// per request (2,647,981 ERROR lines in 60 s before).
func TestClientCannotFloodTheLog(t *testing.T) {
	var out logCapture
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := brokertest.RunBroker(t, brokertest.Options{Logger: log})
	broker.SetAppendFault(b.Server, func(topic string) error {
		if topic == "test" {
			return store.ErrDiskFull
		}
		return nil
	})
	const n = 5000
	start := time.Now()
	c := b.Dial()
	var w strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&w, "put test 0 5 0 %d\r\nhello", i)
		fmt.Fprintf(&w, "frobnicate %d\r\n", i)
		fmt.Fprintf(&w, "put nosuchtopic_ 0 5 0 %d\r\nhello", i)
	}
	c.Send(w.String())
	for i := 0; i < 3*n; i++ {
		if r := c.Reply(); r.Code == 200 {
			t.Fatalf("reply %d: %+v", i, r)
		}
	}
	b.Stop() // writes the pending counts
	// One line in full, plus one more for each quiet 10 s window there may
	// have been on a very loaded machine (then the next one is written in
	// full again).
	maxFull := 1 + int(time.Since(start)/logx.DefaultInterval)
	for _, msg := range []string{"append failed", "bad request", "put refused: the topic is not accepted"} {
		full, repeated, lines := out.count(msg)
		t.Logf("%q: %d lines for %d requests", msg, lines, full+repeated)
		if full < 1 || full > maxFull || full+repeated != n {
			t.Errorf("%q: %d full lines and %d counted in summaries; want 1 (at most %d) and %d in all", msg, full, repeated, maxFull, n)
		}
		if lines > 100 {
			t.Errorf("%q: %d log lines for %d requests", msg, lines, n)
		}
	}
}
