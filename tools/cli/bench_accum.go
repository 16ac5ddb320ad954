package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// accumulation (issue 21): pile up --backlog messages, then publish while a reader drains that
// backlog from its first message with the page cache dropped (--drop-caches), and compare
//   - the publish rate with the cold reader against the rate without a reader (same run);
//   - the reader's bytes/s against the disk's sequential read bandwidth, measured in the same
//     run by reading the broker's commit-log segments with O_DIRECT (--data-dir).
// The reader is what a consumer group's fetchers do: pipelined gets per partition from offset 0
// (Admin.FetchInto: a reused buffer per fetcher, every record's CRC checked), without ZooKeeper.

// accumOpts are the accumulation flags.
type accumOpts struct {
	backlog    int64
	dropCaches bool
	dataDir    string
	fillBatch  int
}

func (b *bencher) accumulation(ctx context.Context) []benchkit.Result {
	pub := b.result(benchkit.WorkloadAccumulation)
	rd := b.result(benchkit.WorkloadAccumulation + "-reader")
	fail := func(err error) []benchkit.Result {
		pub.Error = err.Error()
		return []benchkit.Result{pub}
	}
	a := &b.o.accum
	topic := b.o.topic
	parts, err := b.servedPartitions(ctx, topic)
	if err != nil {
		return fail(err)
	}
	starts, err := b.maxOffsets(ctx, parts)
	if err != nil {
		return fail(err)
	}

	// 1. The backlog, with batch puts (not measured; its rate goes into the notes).
	batch := make([]*client.Message, a.fillBatch)
	for i := range batch {
		batch[i] = b.message(topic)
	}
	t0 := time.Now()
	fill := b.batchPhase(ctx, "accumulation (backlog)", batch, 4, 24*time.Hour, a.backlog, nil)
	if fill.err != nil {
		return fail(fmt.Errorf("backlog: %w", fill.err))
	}
	fillEl := time.Since(t0)
	b.settle(ctx)
	ends, err := b.maxOffsets(ctx, parts) // the backlog is starts … ends
	if err != nil {
		return fail(err)
	}
	recSize := protocol.RecordSize(len(topic), len(b.propsLine()), b.o.msgSize)

	// 2. Publishing with no reader.
	msgs := []*client.Message{b.message(topic)}
	d := b.o.duration // each phase runs for --duration (b.limits would make it 24 h under --count alone)
	busy := startMachineCPU()
	base := b.publishPhase(ctx, "accumulation (no reader)", msgs, d, 0, nil, nil)
	baseBusy := busy.note()
	if base.err != nil {
		return fail(fmt.Errorf("publish without a reader: %w", base.err))
	}
	b.settle(ctx)
	baseRate := float64(base.n) / base.el.Seconds()

	// 3. The disk's sequential read bandwidth, with the page cache dropped.
	var diskNote string
	var diskBps float64
	if a.dropCaches {
		if err := dropCaches(); err != nil {
			return fail(fmt.Errorf("--drop-caches: %w", err))
		}
	}
	if a.dataDir != "" {
		bps, read, err := directReadBandwidth(a.dataDir, 2<<30)
		if err != nil {
			diskNote = "disk read bandwidth not measured: " + err.Error()
		} else {
			diskBps = bps
			diskNote = fmt.Sprintf("disk sequential read (O_DIRECT, 1 MiB reads of the commit-log segments, %s) %.0f MB/s", fmtBytes(read), bps/1e6)
		}
	} else {
		diskNote = "disk read bandwidth not measured (no --data-dir)"
	}
	if a.dropCaches {
		if err := dropCaches(); err != nil {
			return fail(fmt.Errorf("--drop-caches: %w", err))
		}
	}

	// 4. The cold reader alone, from the backlog's start: what it moves with the machine to itself.
	alone := b.result(benchkit.WorkloadAccumulation + "-reader-alone")
	aloneRes := residentNote(a.dataDir)
	cold0 := b.coldReadBytes(ctx)
	busy = startMachineCPU()
	aloneCPU := b.startCPU() // broker and reader CPU per record read (nothing else runs)
	dr := b.startDrain(ctx, parts, starts, ends, recSize)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	case <-dr.done:
	}
	aloneN, aloneEl, err := dr.stop()
	aloneBusy := busy.note()
	aloneCPU.set(&alone, aloneN)
	aloneCold := coldNote(cold0, b.coldReadBytes(ctx), aloneN*int64(recSize))
	if err != nil {
		return fail(fmt.Errorf("cold reader alone: %w", err))
	}
	if a.dropCaches {
		if err := dropCaches(); err != nil {
			return fail(fmt.Errorf("--drop-caches: %w", err))
		}
	}

	// 5. Publishing while the reader drains the cold backlog from its start again.
	withRes := residentNote(a.dataDir)
	cold0 = b.coldReadBytes(ctx)
	busy = startMachineCPU()
	dr = b.startDrain(ctx, parts, starts, ends, recSize)
	m := b.startCPU()
	with := b.publishPhase(ctx, "accumulation (cold reader)", msgs, d, 0, nil, nil)
	read, rel, drainErr := dr.stop()
	withBusy := busy.note()
	withCold := coldNote(cold0, b.coldReadBytes(ctx), read*int64(recSize))
	m.set(&pub, with.n)
	if with.err != nil {
		return fail(fmt.Errorf("publish with the cold reader: %w", with.err))
	}
	if drainErr != nil {
		return fail(fmt.Errorf("cold reader: %w", drainErr))
	}
	pub.SetThroughput(with.n, with.el)
	pub.SetBaseline(baseRate)
	readBps := float64(read) * float64(recSize) / rel.Seconds()
	common := fmt.Sprintf("backlog of %s messages (%s of records, filled with mput in %s at %s)",
		benchkit.FormatCount(a.backlog), fmtBytes(float64(a.backlog)*float64(recSize)), fillEl.Round(time.Millisecond),
		benchkit.FormatRate(float64(fill.n)/fill.el.Seconds()))
	caches := "page cache dropped before the disk measurement and before the reader (echo 1 > /proc/sys/vm/drop_caches)"
	if !a.dropCaches {
		caches = "page cache NOT dropped (no --drop-caches): the reader is cold only if the backlog exceeds the cache"
	}
	b.notes(&pub, common, caches,
		fmt.Sprintf("Producer.SendAsync window %d for %s without a reader (%s; %s) and again while the reader drains from the first message (ratio = with / without; %s)",
			b.o.window, d, benchkit.FormatRate(baseRate), baseBusy, withBusy))
	rd.SetThroughput(read, rel)
	rd.MBPerSec = readBps / 1e6
	ratio := ""
	if diskBps > 0 {
		ratio = fmt.Sprintf("reader / disk = %.2f", readBps/diskBps)
	}
	reader := fmt.Sprintf("%d partition(s), %d pipelined gets of %d bytes each from the first message (%s)",
		len(parts), b.o.fetchDepth, b.o.fetchSize, fetchAPI(true))
	b.notes(&rd, common, caches, withRes, reader+fmt.Sprintf(" while publishing; record bytes read %.0f MB/s", readBps/1e6), withCold, diskNote, ratio, withBusy)
	alone.SetThroughput(aloneN, aloneEl)
	aloneBps := float64(aloneN) * float64(recSize) / aloneEl.Seconds()
	alone.MBPerSec = aloneBps / 1e6
	ratio = ""
	if diskBps > 0 {
		ratio = fmt.Sprintf("reader alone / disk = %.2f", aloneBps/diskBps)
	}
	b.notes(&alone, common, caches, aloneRes, reader+fmt.Sprintf(", nothing published, for %s; record bytes read %.0f MB/s", d, aloneBps/1e6), aloneCold, diskNote, ratio, aloneBusy)
	return []benchkit.Result{pub, rd, alone}
}

// drain is a running cold reader: one drainSched per partition, --fetch-depth readers each.
type drain struct {
	got    atomic.Int64
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	done   chan struct{} // closed when every reader finished (the backlog is drained)
	end    time.Time     // when; valid after done
}

// startDrain starts reading every partition from starts[i] towards ends[i].
func (b *bencher) startDrain(ctx context.Context, parts []benchPart, starts, ends []int64, recSize int) *drain {
	dr := &drain{start: time.Now(), done: make(chan struct{})}
	dctx, cancel := context.WithCancel(ctx)
	dr.cancel = cancel
	for i, p := range parts {
		s := &drainSched{next: starts[i], end: ends[i], k: max(1, int64(b.o.fetchSize/recSize))}
		for range b.o.fetchDepth {
			dr.wg.Add(1)
			go func() {
				defer dr.wg.Done()
				if err := b.drainPart(dctx, p, s, recSize, &dr.got, true); err != nil && dctx.Err() == nil {
					dr.once.Do(func() { dr.err = err })
				}
			}()
		}
	}
	go func() {
		dr.wg.Wait()
		dr.end = time.Now()
		close(dr.done)
	}()
	return dr
}

// stop ends the reader: the records it got, over how long, and its first error.
func (dr *drain) stop() (int64, time.Duration, error) {
	n, el := dr.got.Load(), time.Since(dr.start)
	select {
	case <-dr.done: // drained before the phase ended: its rate is over the time it read
		el = dr.end.Sub(dr.start)
	default:
	}
	dr.cancel()
	<-dr.done
	return n, el, dr.err
}

// machineCPU measures the whole machine's CPU use (/proc/stat) over a phase: whether a phase was
// bound by the CPU (busy near 100% of the cores) or waited (idle, iowait), and how much of the
// time the hypervisor gave to someone else (steal: neither busy nor idle here; bench/README.md,
// Caveats, "Steal time").
type machineCPU struct{ busy, iowait, steal, total uint64 }

func readMachineCPU() (machineCPU, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return machineCPU{}, false
	}
	var m machineCPU
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		m.total += n
		switch i {
		case 3: // idle
		case 4:
			m.iowait += n
		case 7:
			m.steal += n
		default:
			m.busy += n
		}
	}
	return m, true
}

type machineMeter struct {
	m  machineCPU
	ok bool
}

func startMachineCPU() machineMeter {
	m, ok := readMachineCPU()
	return machineMeter{m, ok}
}

// note is "machine CPU busy x% (iowait y%, steal z%) of n cores" since the start.
func (mm machineMeter) note() string {
	e, ok := readMachineCPU()
	if !mm.ok || !ok || e.total <= mm.m.total {
		return "machine CPU not measured"
	}
	t := float64(e.total - mm.m.total)
	return fmt.Sprintf("machine CPU busy %.0f%% (iowait %.0f%%, steal %.0f%%) of %d cores, /proc/stat over the phase",
		100*float64(e.busy-mm.m.busy)/t, 100*float64(e.iowait-mm.m.iowait)/t, 100*float64(e.steal-mm.m.steal)/t, runtime.NumCPU())
}

// dropCaches asks the kernel to drop the page cache (root only).
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0)
}

// directReadBandwidth reads up to limit bytes of the largest files under dir (the commit-log
// segments) with O_DIRECT, 1 MiB at a time, and returns bytes per second.
func directReadBandwidth(dir string, limit int64) (float64, float64, error) {
	type file struct {
		path string
		size int64
	}
	var files []file
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		if info, err := de.Info(); err == nil && info.Size() >= 1<<20 && strings.Contains(p, string(filepath.Separator)+"commitlog"+string(filepath.Separator)) {
			files = append(files, file{p, info.Size()})
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if len(files) == 0 {
		return 0, 0, errors.New("no file of 1 MiB or more under " + dir)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	const chunk = 1 << 20
	raw := make([]byte, chunk+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&raw[0]))%4096) % 4096)
	buf := raw[off : off+chunk]
	var total int64
	start := time.Now()
	for _, f := range files {
		if total >= limit {
			break
		}
		fd, err := syscall.Open(f.path, syscall.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			return 0, 0, err
		}
		for total < limit {
			n, err := syscall.Read(fd, buf)
			if n <= 0 || err != nil {
				break
			}
			total += int64(n)
		}
		syscall.Close(fd)
	}
	el := time.Since(start).Seconds()
	if total == 0 || el <= 0 {
		return 0, 0, errors.New("nothing read")
	}
	return float64(total) / el, float64(total), nil
}

// How cold the backlog really was. Dropping the page cache does not drop a page some process
// has mapped (the broker's dispatcher kept every page of the log mapped until unmapbehind.go
// in broker/store), so a "cold" reader could read from the page cache without anyone noticing:
// the notes say how much of the commit log was cached when the reader started (cachestat(2) on
// each segment; nothing is read or mapped) and how many bytes the broker read with O_DIRECT
// while it ran (`stats` cold_read_bytes).

// residentNote is "commit log cached before the reader: x of y (z%)" for the segments under
// dir ("" when not measured).
func residentNote(dir string) string {
	if dir == "" {
		return ""
	}
	var total, cached int64
	err := filepath.WalkDir(filepath.Join(dir, "commitlog"), func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		var cs unix.Cachestat_t
		if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: 0, Len: uint64(fi.Size())}, &cs, 0); err != nil {
			return err
		}
		total += fi.Size()
		cached += int64(cs.Cache) * int64(os.Getpagesize())
		return nil
	})
	if err != nil || total == 0 {
		return "commit log in the page cache before the reader: not measured (cachestat: " + fmt.Sprint(err) + ")"
	}
	return fmt.Sprintf("commit log in the page cache before the reader: %s of %s (%.1f%%, cachestat)",
		fmtBytes(float64(cached)), fmtBytes(float64(total)), 100*float64(cached)/float64(total))
}

// coldReadBytes sums the brokers' cold_read_bytes (-1 when one does not report it).
func (b *bencher) coldReadBytes(ctx context.Context) int64 {
	var n int64
	for _, addr := range b.knownAddrs() {
		cctx, cancel := context.WithTimeout(ctx, b.app.ConnectTimeout)
		stats, err := b.admin.Stats(cctx, addr, "")
		cancel()
		if err != nil {
			return -1
		}
		v := int64(-1)
		for _, s := range stats {
			if s.Key == "cold_read_bytes" {
				v, _ = strconv.ParseInt(s.Value, 10, 64)
			}
		}
		if v < 0 {
			return -1
		}
		n += v
	}
	return n
}

// coldNote is "broker read x directly (O_DIRECT) = y% of the record bytes served".
func coldNote(before, after, served int64) string {
	if before < 0 || after < before || served <= 0 {
		return "bytes the broker read directly not measured"
	}
	return fmt.Sprintf("broker read %s of the log directly (O_DIRECT, stats cold_read_bytes) = %.0f%% of the record bytes served",
		fmtBytes(float64(after-before)), 100*float64(after-before)/float64(served))
}

func fmtBytes(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0f MB", n/1e6)
	}
	return fmt.Sprintf("%.0f KB", n/1e3)
}
