package delay_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// TestRollForwardBeyondRetention schedules deliverAt messages due five
// retention periods ahead (retention 3s, tiny segments, a retention pass
// every 200ms) and restarts the broker twice while they wait: the
// %SCHEDULE% records they were put as are deleted by retention, yet every
// message is delivered exactly once, through the records the timer
// re-appended ahead of retention.
func TestRollForwardBeyondRetention(t *testing.T) {
	dir := t.TempDir()
	opts := brokertest.Options{Dir: dir,
		ExtraINI:  "deletePolicy=delete,3s\ndeleteWhen=@every 200ms\n",
		StoreConf: func(c *store.Config) { c.SegmentSize = 8 << 10 }}
	b := runBroker(t, opts)
	c := b.Dial()
	const n = 30
	due := time.Now().Add(15 * time.Second).UnixMilli()
	ids := make([]int64, n)
	for i := range ids {
		ids[i], _, _ = putProps(t, c, "other", 0, "deliverAt="+strconv.FormatInt(due+int64(i)*20, 10), "far"+strconv.Itoa(i), int32(i))
	}
	gone := func() bool { // the first put's record was deleted by retention
		c.Send(fmt.Sprintf("query id %d 99\r\n", ids[0]))
		r := c.Reply()
		return r.Kind == protocol.ReplyResult && r.Code == 404
	}
	// Filler traffic keeps segments rolling so retention has whole segments to delete.
	fill := func(until func() bool) {
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; !until(); i++ {
			if time.Now().After(deadline) {
				t.Fatal("condition not reached")
			}
			c.Put("test", 0, fmt.Sprintf("filler-%0400d", i), int32(1000+i%1000))
			time.Sleep(2 * time.Millisecond)
		}
	}
	restart := func() {
		b.Stop()
		b = runBroker(t, opts)
		c = b.Dial()
	}
	fill(func() bool { return time.Now().UnixMilli() > due-11000 })
	restart()
	fill(gone)
	restart()
	if !gone() {
		t.Fatal("the original %SCHEDULE% record is back after a restart?")
	}
	got := collect(t, c, "other", 0, n)
	for i := 0; i < n; i++ {
		if k := "far" + strconv.Itoa(i); got[k] != 1 {
			t.Errorf("%s delivered %d times", k, got[k])
		}
	}
	if len(got) != n {
		t.Errorf("delivered %d distinct messages, want %d: %v", len(got), n, got)
	}
	// Delivered copies name the id the producer was given.
	rs := get(t, c, "other", 0, 0, 0)
	if len(rs) == 0 {
		t.Fatal("no delivered record readable")
	}
	orig, _ := protocol.PropertyRaw(rs[0].Properties, "origMsgId")
	if _, rolls := protocol.PropertyRaw(rs[0].Properties, "rolls"); rolls || string(orig) != strconv.FormatInt(ids[indexOf(string(rs[0].Data))], 10) {
		t.Errorf("delivered properties %q (want origMsgId=%d, no rolls)", rs[0].Properties, ids[indexOf(string(rs[0].Data))])
	}
}

func indexOf(body string) int {
	i, _ := strconv.Atoi(body[len("far"):])
	return i
}
