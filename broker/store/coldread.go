package store

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direct cold reads: a read of commit-log bytes that are not in the page
// cache at all (a consumer draining an old backlog) reads them with one
// O_DIRECT pread into a reused buffer and serves the records from there,
// instead of through the mapping.
//
// Why: filling the page cache is most of what a cold read costs. On the
// development VM (kernel 6.18, virtio disk) reading 1 GB of a dropped
// segment through the page cache (buffered read(2), or the mapping with
// MADV_WILLNEED + MADV_POPULATE_READ, readahead.go) took 0.8–2.6 s of
// system CPU — page allocation, page-cache insertion, the memory cgroup,
// and on a VM the host's work behind each freshly used guest page — against
// 0.08–0.10 s with 1 MiB O_DIRECT reads, which also ran the disk faster
// (1.1–1.4 GB/s against 0.26–0.7 GB/s). A broker serving a backlog at the
// disk's rate spent most of a core on it. A direct read also leaves the page
// cache to the hot tail (publishers, consumers that keep up) instead of
// evicting it for bytes read once.
//
// When: at the start of each run of records a read serves from one segment
// (and again when the run leaves the window read for it), if the range the
// read may serve — its byte budget, at least coldMin and at most coldWindow
// bytes, below the write position's page — has not one page in the page
// cache (mincore). Anything resident, even one page, and the read goes
// through the mapping as before: resident pages may be newer than the disk
// (written, not yet written back), and hot data is cheaper through the
// mapping anyway. Only the first run start of a stream pays the mincore:
// chunks populated by the mapping path are remembered (s.pop) and skip it.
//
// Safety: a page that is not in the page cache holds nothing newer than the
// disk, and nothing writes below the write position's page (records are
// immutable once written; the writer and the zero-filler work at and past
// it, prefill.go), so the bytes read are the bytes the mapping would show.
// The records are verified (header against the index unit, CRC) exactly as
// on the mapping path. A direct read never invalidates the page cache
// (only direct writes do). Where O_DIRECT is refused (tmpfs: EINVAL on
// open) or a read fails, direct reads turn themselves off for the segment
// or the process and the mapping path serves as before.
//
// Buffers: coldWindow bytes plus alignment, each in its own 2 MiB mapping
// (a huge page, newColdBuf), kept in a free list of coldKeep (≈ 16 MiB) and
// mapped beyond it; a ReadResult holds the ones it
// serves from until Release (after the reply's writev), so memory follows
// the replies in flight, which the connections' output bounds cap.

const (
	coldWindow = 1 << 20  // at most one direct read per run start
	coldMin    = 64 << 10 // smaller ranges go through the mapping (tail reads)
	coldAlign  = 4096     // O_DIRECT offset, length and buffer alignment
	coldKeep   = 8        // free buffers kept for reuse
)

// coldBuf is one direct read: the commit-log bytes [beg, end) of seg in
// data.
type coldBuf struct {
	mem      unsafe.Pointer // the buffer's own mapping (coldMapSize bytes), nil: data is on the heap
	data     []byte         // coldWindow+coldAlign bytes, aligned
	seg      *segment
	beg, end int64 // physical range held in data[:end-beg]
}

var coldFree = make(chan *coldBuf, coldKeep)

func getColdBuf() *coldBuf {
	select {
	case b := <-coldFree:
		return b
	default:
	}
	return newColdBuf()
}

// A direct read pins the buffer's pages for the I/O (get_user_pages): 257
// of them per 1 MiB window in 4 KiB pages, one when a transparent huge page
// backs the buffer. So a buffer is its own 2 MiB-aligned anonymous mapping
// with MADV_HUGEPAGE (THP "madvise" mode, the common default). Measured on
// the development VM, 1 GiB read in 1 MiB O_DIRECT preads: 155–180 ns of
// CPU per KiB into heap buffers, 82–111 into huge-page ones (loaded, two
// runs each, alternated). Without THP (or when the mapping fails: the heap)
// it is a buffer like any other.
const coldMapSize = 2 << 20

func newColdBuf() *coldBuf {
	p, err := unix.MmapPtr(-1, 0, nil, 2*coldMapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		raw := make([]byte, coldWindow+2*coldAlign)
		off := int((coldAlign - uintptr(unsafe.Pointer(&raw[0]))%coldAlign) % coldAlign)
		return &coldBuf{data: raw[off : off+coldWindow+coldAlign]}
	}
	// Keep the 2 MiB-aligned middle of the 4 MiB mapping; give back the rest.
	head := (coldMapSize - uintptr(p)%coldMapSize) % coldMapSize
	mem := unsafe.Add(p, head)
	if head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := coldMapSize - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(mem, coldMapSize), tail)
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(mem), coldMapSize), unix.MADV_HUGEPAGE) // advice: 4 KiB pages otherwise
	return &coldBuf{mem: mem, data: unsafe.Slice((*byte)(mem), coldWindow+coldAlign)}
}

func putColdBuf(b *coldBuf) {
	b.seg, b.beg, b.end = nil, 0, 0
	select {
	case coldFree <- b:
	default: // enough kept
		if b.mem != nil {
			_ = unix.MunmapPtr(b.mem, coldMapSize)
			b.mem, b.data = nil, nil
		}
	}
}

// covers reports whether the buffer holds [phys, phys+n) of g.
func (b *coldBuf) covers(g *segment, phys int64, n int) bool {
	return b != nil && b.seg == g && phys >= b.beg && phys+int64(n) <= b.end
}

// bytes returns [phys, phys+n), which the buffer covers.
func (b *coldBuf) bytes(phys int64, n int) []byte {
	return b.data[phys-b.beg : phys-b.beg+int64(n)]
}

// coldOff is set when this process cannot read directly (the open refused
// O_DIRECT everywhere it was tried, or reads failed): the mapping serves.
var coldOff atomic.Bool

func init() {
	if os.Getpagesize() != coldAlign { // mincore's vector and the alignment assume 4 KiB pages
		coldOff.Store(true)
	}
}

// DirectColdReads turns direct cold reads on or off for the process (on by
// default; tests and benchmarks compare).
func DirectColdReads(on bool) { coldOff.Store(!on) }

// directFD returns g's O_DIRECT descriptor, opening it on first use (-1
// when the file system refuses O_DIRECT: the segment is then read through
// its mapping only). Closed with the segment (unmap). g.dio holds fd+1 (0:
// not opened yet, -1: refused or closed).
func (g *segment) directFD() int {
	if v := g.dio.Load(); v != 0 {
		return int(v) - 1
	}
	fd, err := unix.Open(g.path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	v := int64(fd) + 1
	if err != nil {
		v = -1
	}
	if !g.dio.CompareAndSwap(0, v) { // another reader opened it first
		if err == nil {
			unix.Close(fd)
		}
		return int(g.dio.Load()) - 1
	}
	return int(v) - 1
}

// closeDirect closes the descriptor (the segment's last reference is gone).
func (g *segment) closeDirect() {
	if v := g.dio.Swap(-1); v > 0 {
		unix.Close(int(v) - 1)
	}
}

// coldRead reads g's bytes from off, up to n (clipped to coldWindow, the
// segment and the page before limit, the write position) into a buffer that
// r holds, when none of their pages is in the page cache. false: read
// through the mapping.
func (s *Store) coldRead(r *ReadResult, g *segment, off int64, n int, limit int64) bool {
	if coldOff.Load() {
		return false
	}
	start := off &^ (coldAlign - 1)
	end := min(off+int64(min(n, coldWindow)), g.size, (limit-g.base)&^(coldAlign-1))
	if end-off < coldMin {
		return false
	}
	if c := (g.base + off) >> raChunkShift; s.pop.seen(c) {
		return false // populated through the mapping recently: hot
	}
	if !noneResident(g.data[start:end]) {
		return false
	}
	fd := g.directFD()
	if fd < 0 { // -2: closed meanwhile
		return false
	}
	b := s.pf.take(g, g.base+off) // read ahead by the previous get of this stream
	if b == nil {
		var err error
		if b, err = s.directRead(g, fd, start, end); err != nil {
			return false
		}
		if b.end > g.raFront.Load() {
			g.raFront.Store(b.end) // (racing readers: the front is a hint)
		}
	}
	r.cold = append(r.cold, b)
	return true
}

// directRead reads g's bytes [start, end) (start aligned) into a buffer.
func (s *Store) directRead(g *segment, fd int, start, end int64) (*coldBuf, error) {
	b := getColdBuf()
	want := int((end - start + coldAlign - 1) &^ (coldAlign - 1))
	got, err := unix.Pread(fd, b.data[:want], start)
	if err == nil && int64(got) < end-start {
		err = errShortDirect
	}
	if err != nil {
		putColdBuf(b)
		if !errors.Is(err, unix.EINTR) {
			s.coldFailed(err)
		}
		return nil, err
	}
	b.seg, b.beg, b.end = g, g.base+start, g.base+start+int64(got)
	s.counters.coldReads.Add(1)
	s.counters.coldReadBytes.Add(int64(got))
	return b, nil
}

var errShortDirect = errors.New("short direct read")

// Read-ahead for direct reads. A reader's gets are served one after the
// other by its connection, so a direct read of each get's window alone
// leaves the disk idle while the broker verifies and writes the previous
// one. When a read ends in a directly read window with its byte budget
// spent, the window where the stream's next get will start (at the end of
// the last record served: a partition's records are contiguous in the
// log while it is the only one written, as in a backlog of one topic) is
// read by a goroutine while this reply is written; the next get takes it,
// waiting if it is still being read. A few are kept (prefetchSlots, about
// one per stream reading cold data); one not taken before others replace it
// is dropped. A window is read ahead only where a direct read would be
// made (none of its pages cached).

const prefetchSlots = 8

// prefetches are the windows read ahead, guarded by mu.
type prefetches struct {
	mu     sync.Mutex
	slots  [prefetchSlots]*prefetch
	next   int  // round-robin victim
	closed bool // the store is closing: no new ones
}

// prefetch is one window being read ahead: buf is valid once done is
// closed and err is nil. It holds a reference to seg until taken or
// dropped.
type prefetch struct {
	seg      *segment
	beg, end int64 // physical range planned (beg aligned)
	done     chan struct{}
	buf      *coldBuf
	err      error
}

// windowStart is the aligned start of the direct read for a read at g's
// offset off.
func windowStart(off int64) int64 { return off &^ (coldAlign - 1) }

// readAheadDirect starts reading the window of g at off ahead of the
// stream's next get (r's read ended there with its budget spent, in a
// direct read that ends at physical front), unless one is there already,
// it would be short, or part of it is cached.
func (s *Store) readAheadDirect(g *segment, off, limit, front int64) {
	if coldOff.Load() {
		return
	}
	start := windowStart(off)
	end := min(off+coldWindow, g.size, (limit-g.base)&^(coldAlign-1))
	if g.raFront.Load() > front {
		// Something read (or reads ahead) past this read's window: the
		// stream's gets arrived out of order (pipelined), or the next
		// window is already being read. (Comparing with the window's
		// start instead skipped every read-ahead: the window just read
		// always ends past the aligned start of the next one.)
		return
	}
	if end-off < coldMin || !noneResident(g.data[start:end]) {
		return
	}
	fd := g.directFD()
	if fd < 0 {
		return
	}
	pf := &s.pf
	pf.mu.Lock()
	if pf.closed {
		pf.mu.Unlock()
		return
	}
	if !g.acquire() {
		pf.mu.Unlock()
		return
	}
	p := &prefetch{seg: g, beg: g.base + start, end: g.base + end, done: make(chan struct{})}
	g.raFront.Store(p.end)
	i := pf.next
	pf.next = (pf.next + 1) % prefetchSlots
	old := pf.slots[i]
	pf.slots[i] = p
	s.wg.Add(1)
	pf.mu.Unlock()
	go func() {
		defer s.wg.Done()
		p.buf, p.err = s.directRead(g, fd, start, end)
		close(p.done)
	}()
	if old != nil {
		old.drop()
	}
}

// take returns the window read ahead of g for a read at physical phys,
// waiting for its read; nil when there is none (or it failed).
func (pf *prefetches) take(g *segment, phys int64) *coldBuf {
	pf.mu.Lock()
	var p *prefetch
	for i, q := range pf.slots {
		if q != nil && q.seg == g && q.beg <= phys && phys < q.end {
			p, pf.slots[i] = q, nil
			break
		}
	}
	pf.mu.Unlock()
	if p == nil {
		return nil
	}
	<-p.done
	p.seg.release() // the reader's result holds its own reference
	if p.err != nil {
		return nil
	}
	if !p.buf.covers(g, phys, 1) {
		putColdBuf(p.buf)
		return nil
	}
	return p.buf
}

// drop gives up a window nobody took (waiting for its read).
func (p *prefetch) drop() {
	<-p.done
	if p.buf != nil {
		putColdBuf(p.buf)
	}
	p.seg.release()
}

// dropBelow drops the windows read ahead of segments that end at or below
// pos (retention deleted them: a window's reference would keep the file).
func (pf *prefetches) dropBelow(pos int64) {
	var dead []*prefetch
	pf.mu.Lock()
	for i, p := range pf.slots {
		if p != nil && p.seg.end() <= pos {
			dead, pf.slots[i] = append(dead, p), nil
		}
	}
	pf.mu.Unlock()
	for _, p := range dead {
		p.drop()
	}
}

// dropAll drops every window read ahead and starts no more (Close).
func (pf *prefetches) dropAll() {
	pf.mu.Lock()
	pf.closed = true
	slots := pf.slots
	pf.slots = [prefetchSlots]*prefetch{}
	pf.mu.Unlock()
	for _, p := range slots {
		if p != nil {
			p.drop()
		}
	}
}

// noneResident reports whether no page of the mapped range is in the page
// cache (mincore). An error counts as resident (read through the mapping).
func noneResident(b []byte) bool {
	var vec [coldWindow/coldAlign + 2]byte
	pages := (len(b) + coldAlign - 1) / coldAlign
	if len(b) == 0 || pages > len(vec) {
		return false
	}
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return false
	}
	for _, v := range vec[:pages] {
		if v&1 != 0 {
			return false
		}
	}
	return true
}

// coldFailed turns direct reads off after a read error (logged once): the
// mapping path reads, and reports, what the disk does.
func (s *Store) coldFailed(err error) {
	if coldOff.CompareAndSwap(false, true) {
		s.log.Warn("direct cold reads disabled: a direct read failed; reading through the mapping", "err", err)
	}
}
