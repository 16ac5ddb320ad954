// Package pop is broker-managed delivery (docs/push.md): the members of a
// consumer group receive a topic's messages without owning partitions, each
// message is locked to one member for an invisibility time, and it ends with
// an acknowledgement, a release (redelivery after a delay) or a rejection
// (dead-letter queue). A message not acknowledged in time is delivered again
// to any member; after MaxDeliveries deliveries it goes to %DLQ%<group>.
//
// The state lives in the commit log (system topic %POP%) and is rebuilt
// from it at start (docs/push.md, "State and recovery").
package pop

import (
	"context"
	"errors"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// Delivery is one message handed to one receiver.
type Delivery struct {
	// Handle is the opaque receipt for Ack, Release, Reject and Extend
	// (`<topic>:<partition>:<queueOffset>:<attempt>`; treat it as opaque).
	// It is valid until the invisibility time ends or the message is
	// acknowledged, released or rejected; a handle of an earlier attempt is
	// refused with ErrStale.
	Handle      string
	Topic       string
	Partition   int32
	QueueOffset int64
	MsgID       int64
	// Attempt is 1 on the first delivery, 2 on the second, … Counted per
	// group; after a broker crash it is a lower bound (docs/push.md).
	Attempt int
	// Record is the message record (the record format of docs/protocol.md,
	// as a `get` returns it: protocol.DecodeRecord reads it). It is a copy
	// owned by the caller.
	Record []byte
}

// Filter selects the messages a receiver wants: nil = every message. The
// messages a filter skips count as done for the group (as `get` skips them
// for a consumer), so every member of a group should use the same filter.
type Filter = *protocol.TagFilter

// NewFilter compiles a tag expression (`*`, "" or `a||b`) and an optional
// SQL where expression (protocol/filter, docs/protocol.md "Expression
// filters") into a Filter. An expression that does not compile is an error
// the caller reports as a bad request.
func NewFilter(tags, where string) (Filter, error) {
	base := protocol.ParseTagFilter(tags)
	if where == "" {
		if base.All() {
			return nil, nil
		}
		return base, nil
	}
	expr, err := filter.Compile(where)
	if err != nil {
		return nil, err
	}
	if t, ok := expr.Tags(); ok && base.All() {
		base = protocol.NewTagFilter(t)
	}
	return base.WithRecordMatcher(expr), nil
}

// Service is broker-managed delivery, as the text protocol commands
// (`pop`, `ack`, `release`, `reject`, `extend`: docs/protocol.md) and the
// HTTP/WebSocket gateway use it. Every method is safe for concurrent use.
type Service interface {
	// Receive long-polls until at least one message of topic is
	// deliverable to group or ctx ends (then it returns nil, ctx.Err());
	// it returns up to max deliveries, each locked to this receiver for
	// invisible (clamped to [MinInvisible, MaxInvisible]). A topic this
	// broker does not serve is ErrUnknownTopic.
	Receive(ctx context.Context, group, topic string, filter Filter, max int, invisible time.Duration) ([]Delivery, error)
	// Ack ends a delivery: the message is done for the group and never
	// delivered to it again. It returns once the acknowledgement is
	// durable (in the commit log; fsynced in sync-flush mode); acks of many
	// callers share one record and one fsync.
	Ack(group, handle string) error
	// Release gives a message back: it is delivered again (to any member)
	// once delay has passed (0 = at once). Its attempt still counts
	// towards MaxDeliveries.
	Release(group, handle string, delay time.Duration) error
	// Reject ends a delivery by moving the message to %DLQ%<group> at once.
	Reject(group, handle string) error
	// Extend keeps the message locked to its receiver for invisible from
	// now (a slow handler's lock extension).
	Extend(group, handle string, invisible time.Duration) error
}

// Limits of Receive and Extend.
const (
	MinInvisible = 100 * time.Millisecond
	MaxInvisible = 12 * time.Hour
	MaxReceive   = 1024 // most deliveries one Receive returns
)

// Errors of Service. The text protocol answers ErrBadHandle and
// ErrBadRequest with 400, ErrStale and ErrUnknownTopic with 404, ErrClosed
// and ErrTooManyGroups with 503.
var (
	ErrBadRequest   = errors.New("pop: bad request")
	ErrBadHandle    = errors.New("pop: malformed handle")
	ErrStale        = errors.New("pop: the handle is not the current delivery of its message (acknowledged, released, timed out or redelivered)")
	ErrUnknownTopic = errors.New("pop: topic not served for subscription by this broker")
	ErrClosed       = errors.New("pop: service closed")
	// ErrTooManyGroups: a Receive of a new group while MaxGroups groups
	// have delivery state (popMaxGroups).
	ErrTooManyGroups = errors.New("pop: too many groups with delivery state on this broker")
)

// ErrUnavailable: this broker does not run the delivery service (a slave).
var ErrUnavailable = errors.New("pop: broker-managed delivery is not available on this broker (a slave); use the master")

// Disabled is a Service that refuses everything with ErrUnavailable (what a
// slave's Broker.Pop returns).
type Disabled struct{}

func (Disabled) Receive(context.Context, string, string, Filter, int, time.Duration) ([]Delivery, error) {
	return nil, ErrUnavailable
}
func (Disabled) Ack(string, string) error                    { return ErrUnavailable }
func (Disabled) Release(string, string, time.Duration) error { return ErrUnavailable }
func (Disabled) Reject(string, string) error                 { return ErrUnavailable }
func (Disabled) Extend(string, string, time.Duration) error  { return ErrUnavailable }
func (Disabled) Available() bool                             { return false }

// Availability is implemented by a Service whose availability changes while
// the broker runs (a slave promoted, or a master demoted, without a restart):
// a gateway asks it before it accepts a receiver.
type Availability interface {
	Available() bool
}
