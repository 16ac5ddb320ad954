package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// diskFullError is ErrDiskFull; it also matches ErrIO.
type diskFullError struct{}

func (diskFullError) Error() string        { return "store: disk full" }
func (diskFullError) Is(target error) bool { return target == ErrIO }

// corruptError is ErrCorrupt; it also matches ErrIO.
type corruptError struct{}

func (corruptError) Error() string        { return "store: corrupt record" }
func (corruptError) Is(target error) bool { return target == ErrIO }

// opError is an I/O failure classified as ErrDiskFull or ErrIO, keeping the
// operation and the system error (errors.Is sees all three).
type opError struct {
	kind error
	op   string
	err  error
}

func (e *opError) Error() string   { return fmt.Sprintf("%v: %s: %v", e.kind, e.op, e.err) }
func (e *opError) Unwrap() []error { return []error{e.kind, e.err} }

// ioError classifies err: ENOSPC (and EDQUOT) become ErrDiskFull, anything
// else ErrIO. nil stays nil; an already classified error is kept.
func ioError(op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	kind := ErrIO
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		kind = ErrDiskFull
	}
	return &opError{kind: kind, op: op, err: err}
}

// faultHooks inject I/O failures in tests. Config.hooks is unexported, so only
// this package's tests can set it. Each hook runs before the real system call
// with the file's path; a non-nil error is returned instead of making the
// call (e.g. syscall.ENOSPC to simulate a full disk, syscall.EIO for a dying
// one). Hooks are called from the store's goroutines and must be safe for
// concurrent use. A nil *faultHooks (production) just makes the calls.
type faultHooks struct {
	onFallocate func(path string) error // commit-log segment preallocation
	onFdatasync func(path string) error // commit-log segment flush
	onPwrite    func(path string) error // index and key-index writes
	onLogWrite  func(path string) error // commit-log writes of staged records (sync mode, stage.go)
	onZeroFill  func(path string) error // commit-log zero-fill writes (prefill.go)
}

// fallocate preallocates size bytes of f (the whole file) so that later writes
// through a mapping cannot fail for lack of space.
func (h *faultHooks) fallocate(f *os.File, size int64) error {
	if h != nil && h.onFallocate != nil {
		if err := h.onFallocate(f.Name()); err != nil {
			return err
		}
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err != unix.EINTR {
			return err
		}
	}
}

// fdatasync flushes f's data (and the metadata needed to read it back).
func (h *faultHooks) fdatasync(f *os.File) error {
	if err := h.before(f); err != nil {
		return err
	}
	return h.fdatasyncCall(f)
}

// before runs the fdatasync hook (its error replaces the call).
func (h *faultHooks) before(f *os.File) error {
	if h != nil && h.onFdatasync != nil {
		return h.onFdatasync(f.Name())
	}
	return nil
}

// fdatasyncCall is fdatasync(2) itself, without the hook.
func (h *faultHooks) fdatasyncCall(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// logWrite writes iov (staged commit-log bytes, maybe followed by zero
// padding; stage.go) at off in f.
func (h *faultHooks) logWrite(f *os.File, iov [][]byte, off int64) error {
	if h != nil && h.onLogWrite != nil {
		if err := h.onLogWrite(f.Name()); err != nil {
			return err
		}
	}
	for len(iov) > 0 {
		n, err := unix.Pwritev2(int(f.Fd()), iov, off, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 { // a short write: go on after what was written
			if n < len(iov[0]) {
				iov[0] = iov[0][n:]
				break
			}
			n -= len(iov[0])
			iov = iov[1:]
		}
	}
	return nil
}

// zeroPage pads staged writes (logWrite); never written to.
var zeroPage [pageSize]byte

const pageSize = 4096

// pwrite writes b at off in f.
func (h *faultHooks) pwrite(f *os.File, b []byte, off int64) error {
	if h != nil && h.onPwrite != nil {
		if err := h.onPwrite(f.Name()); err != nil {
			return err
		}
	}
	_, err := f.WriteAt(b, off)
	return err
}
