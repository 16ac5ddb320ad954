// Package sockwrite writes to a socket without waiting for it: the broker's
// long-poll wakers (broker/longpoll.go) and the client's lone async sends
// (client/asyncwrite.go) hand their bytes to the kernel from whatever
// goroutine they run on, and leave what the socket does not take to the
// connection's writer goroutine.
package sockwrite

import (
	"errors"
	"syscall"
)

// Once writes b with one non-blocking write(2) and returns how much the
// socket took. A full socket is not an error (n < len(b), nil), and neither
// is a write that was not attempted (the connection closing, or a write
// deadline in the past: 0, nil) — the writer's blocking write that follows
// reports those. Other errors are the socket's.
func Once(raw syscall.RawConn, b []byte) (n int, err error) {
	if rerr := raw.Write(func(fd uintptr) bool {
		for {
			n, err = syscall.Write(int(fd), b)
			if err != syscall.EINTR {
				return true // one attempt: never wait for the socket
			}
		}
	}); rerr != nil {
		return 0, nil
	}
	if errors.Is(err, syscall.EAGAIN) {
		return 0, nil
	}
	return max(n, 0), err
}
