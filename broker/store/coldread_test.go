package store

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dropFileCache syncs and evicts every file of s from the page cache, so
// the next read is cold: the segments' pages are unmapped first (a mapped
// page stays cached), then posix_fadvise DONTNEED drops the clean pages.
func dropFileCache(t testing.TB, s *Store, dir string) {
	t.Helper()
	for _, g := range s.clog.segments() {
		if err := unix.Madvise(g.data, unix.MADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return err
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readAll reads topic/0 from offset 0 to n with gets of budget bytes and
// checks every record's body; it returns the records read.
func readCold(t testing.TB, s *Store, topic string, n int64, budget int, want func(q int64) []byte) int64 {
	t.Helper()
	var q int64
	for q < n {
		r, err := s.Read(topic, 0, q, budget, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != ReadFound {
			t.Fatalf("read at %d: %v", q, r.Status)
		}
		for _, b := range r.Bufs {
			for len(b) > 0 {
				size := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
				if want != nil && !bytes.HasSuffix(b[:size], want(q)) {
					t.Fatalf("record at offset %d does not end with its body", q)
				}
				b = b[size:]
				q++
			}
		}
		r.Release()
	}
	return q
}

// A read of bytes that are not in the page cache reads them directly
// (coldread.go) and serves the same records; a read of cached bytes, or with
// direct reads off, goes through the mapping.
func TestColdReadDirect(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4 << 20
	cfg.IndexFileSize = DefaultIndexFileSize
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	const n = 9000 // ~9.6 MB of records: three segments
	bodyOf := func(q int64) []byte { return body("cold", 0, int(q), 1000) }
	for i := range n {
		mustAppend(t, s, &Message{Topic: "cold", Data: bodyOf(int64(i))})
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Hot (just written): through the mapping.
	readCold(t, s, "cold", n, 1<<20, bodyOf)
	if st := s.Stats(); st.ColdReads != 0 {
		t.Fatalf("%d direct reads of cached bytes", st.ColdReads)
	}
	dropFileCache(t, s, cfg.Dir)
	if !noneResident(s.clog.segments()[0].data[:coldWindow]) {
		t.Skip("the file system keeps the pages (tmpfs?): nothing is cold here")
	}
	s.pop = readAheads{} // forget the chunks populated above
	readCold(t, s, "cold", n, 1<<20, bodyOf)
	st := s.Stats()
	if st.ColdReads == 0 {
		if coldOff.Load() {
			t.Skip("O_DIRECT is not supported here")
		}
		t.Fatal("a cold backlog was read through the mapping")
	}
	logBytes := s.clog.writePos()
	if st.ColdReadBytes < int64(n)*1000/2 || st.ColdReadBytes > logBytes+2*coldWindow {
		// Read-ahead windows are taken by the next get, never read twice.
		t.Errorf("%d bytes read directly of a %d-byte log", st.ColdReadBytes, logBytes)
	}
	t.Logf("%d direct reads, %d bytes", st.ColdReads, st.ColdReadBytes)
	// The index is read directly too.
	if p := s.partition("cold", 0, false); s.Stats().ColdUnitReads == 0 && p.filed.Load() >= n/2 {
		t.Errorf("the cold index (%d units in the file) was read through the page cache", p.filed.Load())
	}

	// Gets out of order (pipelined by several fetchers): still no byte
	// read twice beyond the windows read ahead and not taken.
	dropFileCache(t, s, cfg.Dir)
	s.pop = readAheads{}
	for _, g := range s.clog.segments() {
		g.raFront.Store(0)
	}
	before := s.Stats().ColdReadBytes
	const per = 900 // records per get (~1 MB)
	for q := int64(0); q < n; q += 4 * per {
		for _, k := range []int64{1, 0, 3, 2} {
			from := q + k*per
			if from >= n {
				continue
			}
			r, err := s.Read("cold", 0, from, per*1056, nil)
			if err != nil || r.Status != ReadFound {
				t.Fatalf("read at %d: %v %v", from, r, err)
			}
			r.Release()
		}
	}
	if got := s.Stats().ColdReadBytes - before; got > 2*logBytes {
		t.Errorf("out of order: %d bytes read directly of a %d-byte log", got, logBytes)
	}

	// Odd budgets: windows end inside records, the next run starts there.
	dropFileCache(t, s, cfg.Dir)
	s.pop = readAheads{}
	readCold(t, s, "cold", n, 700<<10+123, bodyOf)
	if free := len(coldFree); free == 0 {
		t.Error("no buffer was given back to the free list")
	}

	// Off: the mapping path only. The gets above may have left windows
	// being read ahead (started while on, by goroutines): they are waited
	// for first, or their reads would count against the mapping path.
	waitReadAheads(s)
	func() {
		DirectColdReads(false)
		defer DirectColdReads(true)
		dropFileCache(t, s, cfg.Dir)
		s.pop = readAheads{}
		before := s.Stats().ColdReads
		readCold(t, s, "cold", n, 1<<20, bodyOf)
		if got := s.Stats().ColdReads - before; got != 0 {
			t.Errorf("%d direct reads while turned off", got)
		}
	}()

	// A read ahead still in flight when the store closes is waited for and
	// released (goleak checks the goroutine; Close the segments).
	dropFileCache(t, s, cfg.Dir)
	s.pop = readAheads{}
	for _, g := range s.clog.segments() {
		g.raFront.Store(0)
	}
	if r, err := s.Read("cold", 0, 0, 1<<20, nil); err != nil {
		t.Fatal(err)
	} else {
		r.Release()
	}
}

// waitReadAheads waits until no window of s is being read ahead (a window
// displaced from its slot is waited for by the get that displaced it, so
// only those in the slots can still be reading).
func waitReadAheads(s *Store) {
	s.pf.mu.Lock()
	slots := s.pf.slots
	s.pf.mu.Unlock()
	for _, p := range slots {
		if p != nil {
			<-p.done
		}
	}
}

// BenchmarkColdRead reads a cold backlog (100-byte messages, 1 MiB gets; the
// files are evicted from the page cache before each pass) with direct cold
// reads (direct; direct-log: the index units through the page cache) and
// through the mapping with read-ahead and populate (mapped). The figure is the process's CPU per record (user+system,
// getrusage), which includes the kernel's page-cache work.
func BenchmarkColdRead(b *testing.B) {
	cfg := benchConfig(b)
	cfg.UnflushThreshold = 1000
	s := mustOpen(b, cfg)
	defer mustClose(b, s)
	const n = 1_000_000 // ~185 MB of records
	data := make([]byte, 100)
	for range n {
		if _, _, err := s.AppendAsync(&Message{Topic: "bench", Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	waitDispatched(s)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"direct", "direct-log", "mapped"} {
		b.Run(mode, func(b *testing.B) {
			DirectColdReads(mode != "mapped")
			coldUnitsOff = mode == "direct-log"
			defer func() { DirectColdReads(true); coldUnitsOff = false }()
			var cpu time.Duration
			for range b.N {
				dropFileCache(b, s, cfg.Dir)
				s.pop, s.ra = readAheads{}, readAheads{}
				c0 := rusageCPU()
				readCold(b, s, "bench", n, 1<<20, nil)
				cpu += rusageCPU() - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/record")
			st := s.Stats()
			b.Logf("unit reads %d, log reads %d (%d bytes)", st.ColdUnitReads, st.ColdReads, st.ColdReadBytes)
		})
	}
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The dispatcher drops its mappings of the log once it is unmapLag past them
// (unmapbehind.go), so an old backlog can leave the page cache. Before, every
// page it had read to index stayed mapped in the broker, and neither
// posix_fadvise(DONTNEED) nor drop_caches drops a mapped page: the
// accumulation benchmark's "cold" backlog stayed cached.
func TestUnmapBehindLetsTheBacklogGoCold(t *testing.T) {
	defer func(c, l int64) { unmapChunk, unmapLag = c, l }(unmapChunk, unmapLag)
	unmapChunk, unmapLag = 1<<20, 1<<20
	cfg := testConfig(t, "")
	cfg.SegmentSize = 4 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	const n = 9000 // ~9.6 MB of records: three segments
	for i := range n {
		mustAppend(t, s, &Message{Topic: "cold", Data: body("cold", 0, i, 1000)})
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); s.dispatched.Load() < s.clog.writePos(); {
		if time.Now().After(deadline) {
			t.Fatal("the dispatcher did not reach the write position")
		}
		time.Sleep(time.Millisecond)
	}
	evict := func() { // what drop_caches does to these files: clean, unmapped pages go
		t.Helper()
		for _, g := range s.clog.segments() {
			if err := g.f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fadvise(int(g.f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
		}
	}
	evict()
	g := s.clog.segments()[0]
	if noneResident(g.data[:1<<20]) {
		return
	}
	// Still cached: mapped (the bug), or a file system that keeps its pages.
	if err := unix.Madvise(g.data, unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	evict()
	if !noneResident(g.data[:1<<20]) {
		t.Skip("the file system keeps the pages (tmpfs?): nothing goes cold here")
	}
	t.Error("the log's first MiB stayed mapped behind the dispatcher: the page cache could not drop it")
}

// A stream reading a cold backlog in order has its next window read ahead
// while each reply is written (coldread.go), and the windows read ahead
// are taken, not read twice. (The check used to compare the next window's
// aligned start with the end of the window just read, which is always
// past it, so no window was ever read ahead.)
func TestColdReadAheadSequential(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.SegmentSize = 16 << 20
	s := mustOpen(t, cfg)
	defer mustClose(t, s)
	const n = 9000 // ~9.6 MB of records: ten 1 MiB gets
	for i := range n {
		mustAppend(t, s, &Message{Topic: "cold", Data: body("cold", 0, i, 1000)})
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	dropFileCache(t, s, cfg.Dir)
	if !noneResident(s.clog.segments()[0].data[:coldWindow]) {
		t.Skip("the file system keeps the pages (tmpfs?): nothing is cold here")
	}
	s.pop = readAheads{}
	gets, ahead := 0, 0
	for q := int64(0); q < n; gets++ {
		r, err := s.Read("cold", 0, q, 1<<20, nil)
		if err != nil || r.Status != ReadFound {
			t.Fatalf("read at %d: %v %v", q, r, err)
		}
		q = r.NextOffset
		r.Release()
		s.pf.mu.Lock()
		for _, p := range s.pf.slots {
			if p != nil {
				ahead++
			}
		}
		s.pf.mu.Unlock()
	}
	st := s.Stats()
	if st.ColdReads == 0 {
		if coldOff.Load() {
			t.Skip("O_DIRECT is not supported here")
		}
		t.Fatal("a cold backlog was read through the mapping")
	}
	if ahead < gets/2 {
		t.Errorf("%d of %d gets left the next window read ahead", ahead, gets)
	}
	if st.ColdReads > int64(gets)+1 {
		t.Errorf("%d direct reads for %d gets: windows read ahead were read again", st.ColdReads, gets)
	}
}
