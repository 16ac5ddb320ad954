// Package peerbench runs the issue-7 workloads against the peers (NATS
// JetStream, NSQ, Redis Streams) through their official Go clients, and
// against metaq through `metaq bench`, and reports benchkit.Results.
package peerbench

import (
	"context"
	"sync/atomic"

	"github.com/metaqgo/metaq/benchkit"
)

// Driver is one connected client of one peer. The workloads in
// workloads.go are written once against it.
type Driver interface {
	// Prepare creates what the topics need before they are used: a stream
	// per topic (JetStream); a channel per topic when consume is set (NSQ),
	// so published messages are kept for the consumer.
	Prepare(ctx context.Context, topics []string, consume bool) error
	// Publish publishes msg round-robin over topics on one connection with
	// at most window messages unacknowledged, until ctx is done or limit
	// messages (when limit > 0) were sent. It returns once every sent
	// message is acknowledged; acked counts acknowledgements as they arrive.
	Publish(ctx context.Context, topics []string, msg []byte, window int, limit int64, acked *atomic.Int64) error
	// PublishSync publishes one message at a time until ctx is done and
	// records each request's round trip in h.
	PublishSync(ctx context.Context, topic string, msg []byte, h *benchkit.Histogram, acked *atomic.Int64) error
	// Drain reads n messages of topic from its beginning as fast as it can.
	Drain(ctx context.Context, topic string, n int64, got *atomic.Int64) error
	// Subscribe delivers messages published on topic from now on to fn
	// (never concurrently) until stop is called.
	Subscribe(ctx context.Context, topic string, fn func(body []byte)) (stop func(), err error)
	// Send publishes one message without waiting for its acknowledgement.
	// msg must not be modified afterwards.
	Send(ctx context.Context, topic string, msg []byte) error
	Close() error
}

// BatchPublisher is implemented by drivers whose peer has a batched publish
// (publish-batch): NSQ's MPUB, Redis XADD pipelines.
type BatchPublisher interface {
	// PublishBatch publishes msg to topic in batches of batch messages with
	// at most inflight batches unacknowledged on the one connection, until
	// ctx is done. It returns once every sent batch is acknowledged; acked
	// counts messages.
	PublishBatch(ctx context.Context, topic string, msg []byte, batch, inflight int, acked *atomic.Int64) error
	// BatchForm describes the batched publish for the notes.
	BatchForm() string
}
