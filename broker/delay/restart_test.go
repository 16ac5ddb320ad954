package delay_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// collect reads topic/partition from 0 until want distinct bodies arrived
// and returns how often each was delivered.
func collect(t *testing.T, c *brokertest.Client, topic string, part int, want int) map[string]int {
	t.Helper()
	got := map[string]int{}
	var off int64
	for len(got) < want {
		for _, r := range waitRecords(t, c, topic, part, off) {
			got[string(r.Data)]++
			off = r.QueueOffset + 1
		}
	}
	// Anything more already there (duplicates)?
	for {
		rs := get(t, c, topic, part, off, 0)
		if len(rs) == 0 {
			break
		}
		for _, r := range rs {
			got[string(r.Data)]++
			off = r.QueueOffset + 1
		}
	}
	return got
}

func putPending(t *testing.T, c *brokertest.Client, n int) {
	t.Helper()
	base := time.Now().Add(time.Second).UnixMilli()
	for i := 0; i < n; i++ {
		props := "deliverAt=" + strconv.FormatInt(base+int64(i%40)*50, 10)
		if i%3 == 0 {
			props = "delay=" + strconv.Itoa(1+i%4)
		}
		putProps(t, c, "other", 0, props, "m"+strconv.Itoa(i), int32(i))
	}
}

func TestPendingSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	b := runBroker(t, brokertest.Options{Dir: dir})
	c := b.Dial()
	const n = 600
	putPending(t, c, n)
	b.Stop() // long before they are due
	b = runBroker(t, brokertest.Options{Dir: dir})
	c = b.Dial()
	got := collect(t, c, "other", 0, n)
	for k, v := range got {
		if v != 1 {
			t.Errorf("%s delivered %d times after a clean restart", k, v)
		}
	}
	// Stopped again after delivery: nothing is delivered a second time.
	b.Stop()
	b = runBroker(t, brokertest.Options{Dir: dir})
	c = b.Dial()
	putProps(t, c, "other", 0, "delay=1", "marker", 1)
	got = collect(t, c, "other", 0, n+1)
	for k, v := range got {
		if v != 1 {
			t.Errorf("%s delivered %d times after a second restart", k, v)
		}
	}
}

func TestTimerIndexRebuilt(t *testing.T) {
	dir := t.TempDir()
	b := runBroker(t, brokertest.Options{Dir: dir})
	c := b.Dial()
	const n = 300
	putPending(t, c, n)
	b.Stop()
	// Lose the whole index (and, in a second variant, corrupt its checkpoint).
	if err := os.RemoveAll(filepath.Join(dir, "delay", "timer")); err != nil {
		t.Fatal(err)
	}
	b = runBroker(t, brokertest.Options{Dir: dir})
	c = b.Dial()
	got := collect(t, c, "other", 0, n)
	if len(got) != n {
		t.Fatalf("%d of %d delivered", len(got), n)
	}
	putPending(t, c, 30)
	b.Stop()
	ck := filepath.Join(dir, "delay", "timer", "index.ck")
	if err := os.WriteFile(ck, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	b = runBroker(t, brokertest.Options{Dir: dir})
	c = b.Dial()
	if got := collect(t, c, "other", 0, n); len(got) != n {
		t.Fatalf("%d of %d delivered after a corrupt checkpoint", len(got), n)
	}
}

func TestStatsDelay(t *testing.T) {
	b := runBroker(t, brokertest.Options{})
	c := b.Dial()
	putProps(t, c, "other", 0, "deliverAt="+strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "later", 1)
	putProps(t, c, "other", 0, "delay=18", "lvl", 2)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.Send("stats delay 3\r\n")
		r := c.Reply()
		body := string(r.Body)
		if r.Code != 200 {
			t.Fatalf("%+v", r)
		}
		if containsLine(body, "delay_pending 2") && containsLine(body, "delay_timer_pending 1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats delay:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsLine(body, line string) bool {
	for _, l := range splitLines(body) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		l := s[:i]
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		}
		out = append(out, l)
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}
