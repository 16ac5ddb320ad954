package pop

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// The side file: older time slices of the delivery windows (state.go),
// memory-mapped, in the manner of the open platform's pending
// acknowledgements that spilled from a time-sliced in-memory ring to a
// mapped file.
//
// It is an acceleration only: the state that must survive is in %POP%
// (done records and checkpoints), so the side file is never read at
// start — it is deleted and the windows are rebuilt from the records.
//
// Format: files spill-NNN.bin in Config.SpillDir, each segSlots slots of
// one slice (sliceLen entries); a slot holds the entries of one slice in
// the process's own layout of type entry (16 bytes: deadline int64,
// attempt uint16, state uint8, late uint8, padding), so that the mapping is used as
// the slice's []entry directly. Files are created sparse and never
// shrink while the service runs; freed slots are reused.
//
// A slice is written to its slot with one pwrite (which does not fault
// the pages into the process), then read and written through the mapping
// (acks, expiries: one page fault for a cold page). The spill loop drops
// the mapping's resident pages every pass (madvise MADV_DONTNEED: for a
// shared file mapping the data stays in the page cache and is written
// back by the kernel), so the side file costs page cache, which the kernel
// may reclaim, not the broker's resident memory.
//
// Lock rules: spill.mu guards segs and the free list; it is taken inside
// queue.mu (a slice is spilled and freed with its queue locked), never the
// other way round.

const (
	segSlots  = 64
	entrySize = int(unsafe.Sizeof(entry{}))
	slotBytes = sliceLen * entrySize
)

// the side file's layout is the in-memory one
var _ [16 - entrySize]struct{}
var _ [entrySize - 16]struct{}

type slot struct {
	seg *segment
	idx int
}

type segment struct {
	f    *os.File
	m    mmap.MMap
	ents []entry // the mapping as entries
}

type spill struct {
	dir       string
	mu        sync.Mutex
	segs      []*segment
	freeSlots []*slot
	used      int // slots holding a slice
}

// openSpill prepares dir, removing the side files of an earlier run.
func openSpill(dir string) (*spill, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "spill-*.bin"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return nil, err
		}
	}
	return &spill{dir: dir}, nil
}

// alloc returns a free slot, adding a file when every slot is used.
func (sp *spill) alloc() (*slot, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if n := len(sp.freeSlots); n > 0 {
		s := sp.freeSlots[n-1]
		sp.freeSlots = sp.freeSlots[:n-1]
		sp.used++
		return s, nil
	}
	name := filepath.Join(sp.dir, fmt.Sprintf("spill-%03d.bin", len(sp.segs)))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	size := segSlots * slotBytes
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		os.Remove(name)
		return nil, err
	}
	m, err := mmap.MapRegion(f, size, mmap.RDWR, 0, 0)
	if err != nil {
		f.Close()
		os.Remove(name)
		return nil, err
	}
	g := &segment{f: f, m: m, ents: unsafe.Slice((*entry)(unsafe.Pointer(&m[0])), segSlots*sliceLen)}
	sp.segs = append(sp.segs, g)
	for i := segSlots - 1; i > 0; i-- {
		sp.freeSlots = append(sp.freeSlots, &slot{seg: g, idx: i})
	}
	sp.used++
	return &slot{seg: g, idx: 0}, nil
}

// free gives a slot back (its slice was dropped).
func (sp *spill) free(s *slot) {
	sp.mu.Lock()
	sp.freeSlots = append(sp.freeSlots, s)
	sp.used--
	sp.mu.Unlock()
}

func entryBytes(ents []entry) []byte {
	if len(ents) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ents[0])), len(ents)*entrySize)
}

// write stores ents in s and returns the mapped view of them.
func (sp *spill) write(s *slot, ents []entry) ([]entry, error) {
	if _, err := s.seg.f.WriteAt(entryBytes(ents), int64(s.idx)*int64(slotBytes)); err != nil {
		return nil, err
	}
	i := s.idx * sliceLen
	return s.seg.ents[i : i+len(ents) : i+len(ents)], nil
}

// read copies the entries of s into dst (a pread: no page of the mapping
// becomes resident).
func (sp *spill) read(s *slot, dst []entry) error {
	_, err := s.seg.f.ReadAt(entryBytes(dst), int64(s.idx)*int64(slotBytes))
	return err
}

// release drops the mapping's resident pages (they stay in the page cache).
func (sp *spill) release() {
	sp.mu.Lock()
	segs := sp.segs
	sp.mu.Unlock()
	for _, g := range segs {
		_ = syscall.Madvise(g.m, syscall.MADV_DONTNEED)
	}
}

// slots reports the slots in use and the files' total size.
func (sp *spill) slots() (used int, bytes int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.used, int64(len(sp.segs)) * int64(segSlots*slotBytes)
}

// close unmaps and removes the files (nothing may use a view any more).
func (sp *spill) close() error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var first error
	for _, g := range sp.segs {
		if err := g.m.Unmap(); err != nil && first == nil {
			first = err
		}
		name := g.f.Name()
		g.f.Close()
		os.Remove(name)
	}
	sp.segs, sp.freeSlots = nil, nil
	return first
}

// spillCand is a sealed slice in memory.
type spillCand struct {
	q      *queue
	p      *part
	s      *slice
	sealed int64
}

// spillPass moves sealed slices to the side file: those sealed more than
// SpillAfter ago, then the oldest others while the windows' slices in
// memory exceed SpillMemory; then it drops the mapping's resident pages.
func (s *Pop) spillPass(now int64) {
	sp := s.spill
	s.mu.RLock()
	qs := s.qbuf[:0]
	for _, m := range s.queues {
		for _, q := range m {
			qs = append(qs, q)
		}
	}
	s.mu.RUnlock()
	cands := s.cbuf[:0]
	var mem int64
	for _, q := range qs {
		q.mu.Lock()
		for _, p := range q.parts {
			for i, sl := range p.sl {
				if sl.slot != nil {
					continue
				}
				mem += int64(cap(sl.ents) * entrySize)
				if i < len(p.sl)-1 && sl.sealed != 0 {
					cands = append(cands, spillCand{q: q, p: p, s: sl, sealed: sl.sealed})
				}
			}
		}
		q.mu.Unlock()
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].sealed < cands[j].sealed })
	after := s.cfg.SpillAfter.Milliseconds()
	for _, c := range cands {
		if now-c.sealed < after && mem <= s.cfg.SpillMemory {
			break
		}
		if n, err := s.spillSlice(c); err != nil {
			if s.spillErrs.Add(1) == 1 || s.spillErrs.Load()%1000 == 0 {
				s.log.Error("pop: spilling delivery state to the side file failed; it stays in memory", "dir", sp.dir, "err", err, "failures", s.spillErrs.Load())
			}
			break
		} else {
			mem -= n
		}
	}
	clear(cands)
	s.cbuf = cands[:0]
	clear(qs)
	s.qbuf = qs[:0]
	sp.release()
}

// spillSlice writes one sealed slice to a slot and points it there; it
// returns the heap bytes freed.
func (s *Pop) spillSlice(c spillCand) (int64, error) {
	q, p, sl := c.q, c.p, c.s
	q.mu.Lock()
	defer q.mu.Unlock()
	live := false
	for _, x := range p.sl[:max(len(p.sl)-1, 0)] {
		live = live || x == sl
	}
	if !live || sl.slot != nil {
		return 0, nil // dropped (or spilled) since the pass looked
	}
	slt, err := s.spill.alloc()
	if err != nil {
		return 0, err
	}
	view, err := s.spill.write(slt, sl.ents)
	if err != nil {
		s.spill.free(slt)
		return 0, err
	}
	freed := int64(cap(sl.ents) * entrySize)
	sl.freeMem()
	sl.ents, sl.slot = view, slt
	s.stats.Spilled.Add(1)
	return freed, nil
}
