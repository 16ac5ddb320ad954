package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/metaqgo/metaq/client"
)

// Exit codes of the metaq command. Scripts can rely on them; they are listed in
// `metaq --help` and docs/operations.md.
const (
	ExitOK          = 0   // success
	ExitFailure     = 1   // any other failure (broker: start failed, or forced exit by a second signal)
	ExitUsage       = 2   // bad command line, flag or argument; invalid server.ini
	ExitNotFound    = 3   // topic, group, broker or message not found
	ExitUnavailable = 4   // ZooKeeper or a broker could not be reached / did not answer in time
	ExitRefused     = 5   // refused: live consumers block `offsets reset`, a broker rejected a request
	ExitTimeout     = 6   // `consume --count N --timeout D` ended before N messages arrived
	ExitInterrupted = 130 // interrupted by SIGINT/SIGTERM before the work was done
)

const exitCodesHelp = `Exit codes:
  0    success
  1    error
  2    usage error (bad flag or argument, invalid server.ini)
  3    not found (topic, group, broker, message)
  4    unavailable (ZooKeeper or a broker unreachable or too slow)
  5    refused (offsets reset while the group has live consumers; broker rejected a request)
  6    timed out (consume --timeout before --count messages arrived)
  130  interrupted`

// ExitError is an error that carries the process exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

func withCode(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

func usageErr(format string, args ...any) error    { return withCode(ExitUsage, format, args...) }
func notFoundErr(format string, args ...any) error { return withCode(ExitNotFound, format, args...) }
func unavailableErr(format string, args ...any) error {
	return withCode(ExitUnavailable, format, args...)
}
func refusedErr(format string, args ...any) error { return withCode(ExitRefused, format, args...) }

// errText is an error as the CLI shows it: after "metaq: " (or in a table), without the client
// library's own "metaq client: " prefixes.
func errText(err error) string {
	return strings.ReplaceAll(err.Error(), "metaq client: ", "")
}

// silentExit ends the command with code and no further message (it was printed already).
type silentExit struct{ code int }

func (s silentExit) Error() string { return fmt.Sprintf("exit status %d", s.code) }

// ExitCode maps an error returned by a command to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var s silentExit
	if errors.As(err, &s) {
		return s.code
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	var be *client.BrokerError
	if errors.As(err, &be) {
		switch be.Code {
		case 404:
			return ExitNotFound
		case 403, 500, 503:
			return ExitRefused
		}
		return ExitFailure
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	var ce *client.ConnError
	if errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) {
		return ExitUnavailable // client.ErrTimeout is a DeadlineExceeded too
	}
	return ExitFailure
}
