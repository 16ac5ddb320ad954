package broker

import (
	"strings"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

// The mput scratch follows the block, not the count in the header: a
// 4-byte block announcing protocol.MaxBatchCount messages made the reader
// allocate (and keep for the life of the connection) scratch for all of
// them. A refused frame leaves no large scratch behind; a good one keeps
// it for the next frame (given back when the connection goes quiet).
func TestBatchScratchFollowsTheBlock(t *testing.T) {
	c := &conn{srv: &Server{}}
	ts := &topicState{name: "t", settings: TopicSettings{NumPartitions: 1}}
	if _, _, bad := c.splitBatch(ts, 0, []byte("0 0\n"), protocol.MaxBatchCount); bad == "" {
		t.Fatal("a 4-byte block of 10000 entries was accepted")
	}
	if n := cap(c.batch.msgs); n > maxKeptBatchMsgs {
		t.Fatalf("a refused 4-byte frame left scratch for %d messages", n)
	}

	const n = 1000
	good := []byte(strings.Repeat("1 0\nx", n))
	msgs, _, bad := c.splitBatch(ts, 0, good, n)
	if bad != "" || len(msgs) != n {
		t.Fatalf("good frame: %d messages, %q", len(msgs), bad)
	}
	clear(msgs)
	if !c.batch.big() {
		t.Fatalf("the scratch of a good %d-message frame was not kept for the next one", n)
	}
	// A refused frame (one byte too many) drops it.
	if _, _, bad := c.splitBatch(ts, 0, append(good, 'y'), n); bad == "" {
		t.Fatal("a frame with a trailing byte was accepted")
	}
	if c.batch.big() {
		t.Fatalf("a refused frame kept scratch for %d messages", cap(c.batch.msgs))
	}
}
