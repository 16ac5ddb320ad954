package store

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The async flusher's fdatasync without a blocked thread.
//
// In async-flush mode (unflushThreshold > 0) the flusher fdatasyncs the
// commit log every few hundred microseconds to milliseconds under load
// (one per 1,000 messages by default), ~1 ms each on the development VM.
// A plain fdatasync(2) is a blocking system call: the Go runtime marks the
// flusher's P as in a syscall, sysmon retakes it after 20 µs and wakes
// another thread to run it, keeps polling every 20 µs while that recurs,
// and when the call returns the thread finds its P gone and parks again —
// a handful of futex wake-ups and context switches per fsync on both cores
// the broker shares with its clients. With one P more than the cores the
// retake is mostly skipped (bench/README.md, "One P more than the cores":
// broker CPU −7%), at a cost in single-put latency.
//
// So in async mode the commit log submits each fdatasync to an io_uring
// of its own (IORING_OP_FSYNC with IORING_FSYNC_DATASYNC). The kernel runs
// it on its io-wq worker thread (a thread of this process: its CPU is the
// broker's in /proc/<pid>/stat), and signals an eventfd registered with the
// ring when it completes; the flusher waits by reading that eventfd, which
// the Go netpoller waits on like a socket. No goroutine holds a P in a
// system call, nothing is retaken. Measured with interleaved runs of
// `bench/ab.sh … produce --window 1000 --duration 5s` (bench/README.md,
// "The async flusher's fdatasync through io_uring").
//
// Sync-flush mode keeps the plain call: there the put waits for the fsync,
// and its completion through the netpoller reaches the flusher later than
// the returning system call does (durable publish 5% lower in the same A/B).
//
// Where io_uring is unavailable (kernels before 5.1, which lack it or its
// fsync op; seccomp profiles that refuse io_uring_setup;
// kernel.io_uring_disabled = 2) or a submission fails for a reason that is
// the ring's, not the disk's, the log falls back to fdatasync(2) for good
// and logs it once. An error the fsync itself reports (EIO, ENOSPC) is
// returned as fdatasync(2) would return it.
//
// Lock rule: mu serialises submissions and completions and is held across
// the wait (one fsync at a time per log; the flusher already holds flushMu).

// Offsets and constants of the io_uring ABI (include/uapi/linux/io_uring.h).
const (
	ioringOffSQRing      = 0
	ioringOffCQRing      = 0x8000000
	ioringOffSQEs        = 0x10000000
	ioringFeatSingleMmap = 1 << 0
	ioringOpFsync        = 3
	ioringFsyncDatasync  = 1 << 0
	ioringRegisterEvfd   = 4
	ioringEntries        = 4 // one op at a time; the smallest ring
	ioringSQESize        = 64
	ioringCQESize        = 16
)

// ioringParams is struct io_uring_params (120 bytes).
type ioringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// ioringSQE is struct io_uring_sqe (64 bytes) as far as an fsync uses it.
type ioringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, opFlags  uint32
	userData      uint64
	_             [3]uint64
}

// ioringCQE is struct io_uring_cqe (16 bytes).
type ioringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// The kernel's sizes (a layout mistake fails the build, not an fsync).
var (
	_ [120]byte           = [unsafe.Sizeof(ioringParams{})]byte{}
	_ [ioringSQESize]byte = [unsafe.Sizeof(ioringSQE{})]byte{}
	_ [ioringCQESize]byte = [unsafe.Sizeof(ioringCQE{})]byte{}
)

// fsyncRing is one io_uring used for fdatasync only.
type fsyncRing struct {
	mu     sync.Mutex
	fd     int      // the ring; -1 once closed
	ev     *os.File // the eventfd, non-blocking: reads park in the netpoller
	maps   [][]byte // the ring mappings, unmapped at close
	sqTail *uint32
	sqMask uint32
	sqArr  unsafe.Pointer
	sqes   unsafe.Pointer
	cqHead *uint32
	cqTail *uint32
	cqMask uint32
	cqes   unsafe.Pointer
	broken bool         // a failure of the ring itself: plain fdatasync from now on
	ops    atomic.Int64 // fsyncs completed through the ring (tests)
}

// ringOff turns the ring off for logs opened afterwards (tests; on by
// default).
var ringOff atomic.Bool

// errRingBroken marks a failure of the ring, not of the fsync; errRingClosed
// (which also matches it) a ring already closed.
var (
	errRingBroken = errors.New("io_uring fsync unavailable")
	errRingClosed = errors.Join(errRingBroken, errors.New("io_uring closed"))
)

// newFsyncRing sets a ring up; an error means io_uring cannot be used here.
func newFsyncRing() (*fsyncRing, error) {
	var p ioringParams
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, ioringEntries, uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, e
	}
	r := &fsyncRing{fd: int(fd)}
	ok := false
	defer func() {
		if !ok {
			r.release()
		}
	}()
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*ioringCQESize
	mapRing := func(off int64, n int) ([]byte, error) {
		b, err := unix.Mmap(r.fd, off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err == nil {
			r.maps = append(r.maps, b)
		}
		return b, err
	}
	var sq, cq []byte
	var err error
	if p.features&ioringFeatSingleMmap != 0 {
		if sq, err = mapRing(ioringOffSQRing, max(sqSize, cqSize)); err != nil {
			return nil, err
		}
		cq = sq
	} else {
		if sq, err = mapRing(ioringOffSQRing, sqSize); err != nil {
			return nil, err
		}
		if cq, err = mapRing(ioringOffCQRing, cqSize); err != nil {
			return nil, err
		}
	}
	sqes, err := mapRing(ioringOffSQEs, int(p.sqEntries)*ioringSQESize)
	if err != nil {
		return nil, err
	}
	sqBase, cqBase := unsafe.Pointer(&sq[0]), unsafe.Pointer(&cq[0])
	r.sqTail = (*uint32)(unsafe.Add(sqBase, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(sqBase, p.sqOff.ringMask))
	r.sqArr = unsafe.Add(sqBase, p.sqOff.array)
	r.sqes = unsafe.Pointer(&sqes[0])
	r.cqHead = (*uint32)(unsafe.Add(cqBase, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cqBase, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(cqBase, p.cqOff.ringMask))
	r.cqes = unsafe.Add(cqBase, p.cqOff.cqes)

	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	r.ev = os.NewFile(uintptr(efd), "io_uring-eventfd")
	e32 := int32(efd)
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, fd, ioringRegisterEvfd, uintptr(unsafe.Pointer(&e32)), 1, 0, 0); e != 0 {
		return nil, e
	}
	ok = true
	return r, nil
}

// fdatasync flushes fd's data through the ring. errRingBroken (wrapped):
// the ring cannot do it (closed, or a failure of the ring itself); the
// caller makes the plain call. Any other error is the fsync's own.
func (r *fsyncRing) fdatasync(fd int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return errRingClosed
	}
	if r.broken {
		return errRingBroken
	}
	for {
		res, err := r.submitWaitLocked(fd)
		if err != nil {
			r.broken = true
			return errors.Join(errRingBroken, err)
		}
		switch {
		case res == 0:
			r.ops.Add(1)
			return nil
		case res == -int32(unix.EINTR) || res == -int32(unix.EAGAIN):
			continue
		case res == -int32(unix.EINVAL) || res == -int32(unix.EOPNOTSUPP) || res == -int32(unix.ENOSYS):
			// The kernel does not know this op: the ring's limit, not the disk's.
			r.broken = true
			return errors.Join(errRingBroken, unix.Errno(-res))
		default:
			return unix.Errno(-res)
		}
	}
}

// submitWaitLocked submits one fsync of fd and waits for its completion:
// the CQE's result (0 or -errno), or an error of the ring itself.
func (r *fsyncRing) submitWaitLocked(fd int) (int32, error) {
	tail := atomic.LoadUint32(r.sqTail)
	i := tail & r.sqMask
	*(*ioringSQE)(unsafe.Add(r.sqes, uintptr(i)*ioringSQESize)) = ioringSQE{
		opcode: ioringOpFsync, fd: int32(fd), opFlags: ioringFsyncDatasync, userData: uint64(tail),
	}
	*(*uint32)(unsafe.Add(r.sqArr, uintptr(i)*4)) = i
	atomic.StoreUint32(r.sqTail, tail+1) // publishes the entry (a release store)
	for {
		// Submission only: returns at once (the fsync goes to the io-wq
		// worker), so no P is given up for it (RawSyscall).
		n, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if e == unix.EINTR || e == unix.EAGAIN || e == unix.EBUSY {
			continue
		}
		if e != 0 {
			return 0, e
		}
		if n != 1 {
			return 0, errors.New("io_uring_enter submitted nothing")
		}
		break
	}
	var b [8]byte
	for {
		head := atomic.LoadUint32(r.cqHead)
		if head != atomic.LoadUint32(r.cqTail) {
			c := (*ioringCQE)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*ioringCQESize))
			res, ud := c.res, c.userData
			atomic.StoreUint32(r.cqHead, head+1)
			if ud != uint64(tail) { // not ours (cannot happen: one op at a time)
				continue
			}
			return res, nil
		}
		// The completion signals the eventfd after posting the CQE; a count
		// left from an op whose CQE was already seen just loops once more.
		if _, err := r.ev.Read(b[:]); err != nil {
			return 0, err
		}
	}
}

// close releases the ring (the log is closing; no fsync in flight: mu).
// Idempotent; a nil ring (none was set up) closes nothing.
func (r *fsyncRing) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.release()
}

// release frees what the ring holds (idempotent: fd is -1 afterwards).
func (r *fsyncRing) release() {
	if r.ev != nil {
		_ = r.ev.Close()
		r.ev = nil
	}
	for _, m := range r.maps {
		_ = unix.Munmap(m)
	}
	r.maps = nil
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}
