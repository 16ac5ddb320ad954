package broker

import (
	"github.com/metaqgo/metaq/broker/store"
)

// replyKind says how the writer renders a queued reply.
type replyKind uint8

const (
	replyResult     replyKind = iota // result <code> <len> <opaque>\r\n<body>
	replyValue                       // value <len> <opaque>\r\n<records from res>
	replyPut                         // result 200 (or 500 when the flush failed) with "<msgId> <partition> <offset>"
	replyRaw                         // arena bytes as they are: a request of the broker (`check`, txconn.go)
	replyArenaValue                  // value <len> <opaque>\r\n<arena bytes>: a pop reply (popconn.go)
	replyBatch                       // an mput's result 200, rendered like replyResult (batchput.go)
)

// reply is one queued reply. Replies are plain values in a reused slice, so
// queueing one does not allocate. A result body is copied into the queue's
// arena (bodyStart:bodyEnd); a value body stays in the mapped commit log (res)
// until the writer has written it.
type reply struct {
	kind      replyKind
	code      int
	opaque    int32
	bodyStart int
	bodyEnd   int
	res       *store.ReadResult
	flush     *store.Flush // replyPut, replyResult: the group commit that must succeed first (nil: async flush)
	msgID     int64
	offset    int64
	partition int32
	t0        int64 // replyPut: sampled start (metrics.go), 0 = not sampled
	// needsWriteOut: a result (transactions) acknowledging an async-flush
	// append, failed like a put's when the connection's write-out fails.
	needsWriteOut bool
}

// outQueue is the list of replies a connection's writer has not taken yet.
// It is owned by conn.mu (see conn.go for the lock rules); the writer swaps
// the whole queue out under the lock and renders it without the lock.
type outQueue struct {
	replies []reply
	// arena holds the result bodies of the replies, reused batch after batch.
	// It stays a plain slice rather than a bytebufferpool buffer: rendering
	// 100 replies of 30 bytes took 2.2 µs with this arena, 3.5 µs with one
	// pooled buffer per batch and 28.5 µs with one per reply (micro-benchmark
	// of 2026-12-01, issue 12 item 7), and nothing here is handed between
	// owners, so a pool has nothing to share.
	arena []byte
	bytes int // bytes these replies will put on the wire (estimate for backpressure)
}

func (q *outQueue) reset() {
	for i := range q.replies {
		q.replies[i] = reply{}
	}
	q.replies = q.replies[:0]
	q.arena = q.arena[:0]
	q.bytes = 0
}

// releaseAll drops the read results of replies that will never be written.
func (q *outQueue) releaseAll() {
	for i := range q.replies {
		if r := q.replies[i].res; r != nil {
			r.Release()
			q.replies[i].res = nil
		}
	}
	q.reset()
}

const replyHeaderEstimate = 40

func (q *outQueue) addResult(code int, body []byte, opaque int32) {
	q.replies = append(q.replies, resultReply(q, code, body, opaque))
	q.bytes += replyHeaderEstimate
}

func (q *outQueue) addResultString(code int, body string, opaque int32) {
	q.replies = append(q.replies, resultReply(q, code, body, opaque))
	q.bytes += replyHeaderEstimate
}

// resultReply copies body into q's arena (counting its bytes) and returns
// the result reply that refers to it.
func resultReply[B string | []byte](q *outQueue, code int, body B, opaque int32) reply {
	start := len(q.arena)
	q.arena = append(q.arena, body...)
	q.bytes += len(body)
	return reply{kind: replyResult, code: code, opaque: opaque, bodyStart: start, bodyEnd: len(q.arena)}
}

func (q *outQueue) addValue(res *store.ReadResult, opaque int32) {
	q.replies = append(q.replies, reply{kind: replyValue, opaque: opaque, res: res})
	q.bytes += replyHeaderEstimate + res.Bytes
}

// failUnflushedPuts turns the queued successful replies of async-flush puts
// into failures (their records could not be written out, store.WriteOut)
// and returns how many there were.
func (q *outQueue) failUnflushedPuts(code int, body string) (n int) {
	for i := range q.replies {
		r := &q.replies[i]
		if (r.kind != replyPut && r.kind != replyBatch && !r.needsWriteOut) || r.flush != nil {
			continue
		}
		*r = resultReply(q, code, body, r.opaque)
		n++
	}
	return n
}

func (q *outQueue) addPut(f *store.Flush, msgID int64, partition int32, offset int64, opaque int32) {
	q.replies = append(q.replies, reply{kind: replyPut, opaque: opaque, flush: f, msgID: msgID, partition: partition, offset: offset})
	q.bytes += 2 * replyHeaderEstimate
}
