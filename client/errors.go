package client

import (
	"context"
	"errors"
	"strconv"

	"github.com/metaqgo/metaq/protocol"
)

// Errors returned by the client.
var (
	// ErrClosed: the Producer, Consumer, Admin or connection was closed.
	ErrClosed = errors.New("metaq client: closed")
	// ErrTimeout: a request got no reply within its deadline (a put that
	// timed out may still have been stored). errors.Is(ErrTimeout,
	// context.DeadlineExceeded) is true: a deadline taken from the caller's
	// context may be reported either way. A request that timed out on a
	// broker's connection fails with an error that names the broker and for
	// which errors.Is(err, ErrTimeout) holds; compare with errors.Is.
	ErrTimeout error = timeoutError{}
	// ErrNoPartitions: no broker publishes the topic (nothing in ZooKeeper's
	// topics-pub for it, or every broker is gone).
	ErrNoPartitions = errors.New("metaq client: no partition available for topic")
	// ErrBrokerGone: the broker left the cluster (its ZooKeeper registration
	// vanished) while a request was in flight.
	ErrBrokerGone = errors.New("metaq client: broker left the cluster")
	// ErrStarted: Subscribe after Start, or Start twice.
	ErrStarted = errors.New("metaq client: consumer already started")
)

// BrokerError is a reply other than success: MetaQ's status code and the
// broker's message.
type BrokerError struct {
	Addr    string // broker address
	Code    int    // protocol.Status*
	Message string
}

func (e *BrokerError) Error() string {
	return "metaq client: broker " + e.Addr + " answered " + strconv.Itoa(e.Code) + " " +
		protocol.StatusText(e.Code) + ": " + e.Message
}

// Retriable reports whether another attempt (on another partition) may
// succeed: 500 (the broker failed, or does not accept the topic) and 503
// (busy, shutting down). 400 and 403 are final.
func (e *BrokerError) Retriable() bool {
	return e.Code == protocol.StatusInternalServerError || e.Code == protocol.StatusServiceUnavailable
}

// ConnError reports a broker connection that failed or could not be made;
// requests in flight on it failed with it. Retriable.
type ConnError struct {
	Addr string
	Err  error
}

func (e *ConnError) Error() string { return "metaq client: broker " + e.Addr + ": " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// IsRetriable reports whether err may go away on another attempt or another
// partition: connection failures, timeouts, a broker leaving, and broker
// errors 500/503.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return be.Retriable()
	}
	var ce *ConnError
	return errors.As(err, &ce) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrBrokerGone)
}

func brokerErr(addr string, code int, body []byte) error {
	return &BrokerError{Addr: addr, Code: code, Message: string(body)}
}

type timeoutError struct{}

func (timeoutError) Error() string        { return "metaq client: request timed out" }
func (timeoutError) Timeout() bool        { return true }
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// brokerTimeout is ErrTimeout naming the broker that did not answer, so
// that a CLI's or a log's "request timed out" says which one. One per
// connection: a timeout allocates nothing.
type brokerTimeout struct{ addr string }

func (e *brokerTimeout) Error() string {
	return "metaq client: broker " + e.addr + ": request timed out"
}
func (e *brokerTimeout) Timeout() bool { return true }
func (e *brokerTimeout) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}
