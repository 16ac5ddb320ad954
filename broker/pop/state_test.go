package pop

import (
	"os"
	"path/filepath"
	"testing"
)

// The window's slices: an unaligned start, entries across slice
// boundaries, spilled slices read and written through the mapping,
// compaction of the first slice, scan, and slots freed as base passes.
func TestWindowSlices(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpill(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	s := &Pop{spill: sp, queues: map[string]map[string]*queue{}, cfg: Config{SpillAfter: 1, SpillMemory: 1}}
	q := &queue{group: "g", topic: "t", spill: sp}
	s.queues["g"] = map[string]*queue{"t": q}
	p := q.partLocked(0)
	start := int64(3*sliceLen - 100)
	p.reset(start)
	const n = 3*sliceLen + 10000
	for i := int64(0); i < n; i++ {
		p.push(entry{state: stInflight, attempt: uint16(i % 60000), deadline: start + i}, 1)
	}
	check := func(what string) {
		t.Helper()
		for o := p.base; o < p.cursor; o++ {
			e := p.at(o)
			if want := uint16((o - start) % 60000); e.attempt != want || e.deadline != o {
				t.Fatalf("%s: offset %d: %+v", what, o, *e)
			}
		}
		var buf []entry
		next := p.base
		p.scan(&buf, func(st int64, ents []entry) {
			if st != next {
				t.Fatalf("%s: scan slice at %d, want %d", what, st, next)
			}
			for i := range ents {
				if ents[i].deadline != st+int64(i) {
					t.Fatalf("%s: scan offset %d: %+v", what, st+int64(i), ents[i])
				}
			}
			next = st + int64(len(ents))
		})
		if next != p.cursor {
			t.Fatalf("%s: scan ended at %d, want %d", what, next, p.cursor)
		}
	}
	check("in memory")
	if len(p.sl) != 5 || p.sl[0].start != start || p.sl[1].start != 3*sliceLen {
		t.Fatalf("slices: %d, first at %d", len(p.sl), p.sl[0].start)
	}
	s.spillPass(1 << 40)
	if used, _ := sp.slots(); used != 4 {
		t.Fatalf("%d slices spilled, want the 4 sealed ones", used)
	}
	check("spilled")
	// write through the mapping, read back with scan's pread
	p.at(start + sliceLen).attempt = 7
	var buf []entry
	found := false
	p.scan(&buf, func(st int64, ents []entry) {
		if o := start + sliceLen; o >= st && o < st+int64(len(ents)) {
			found = ents[o-st].attempt == 7
		}
	})
	if !found {
		t.Fatal("a write through the mapping is not in the file")
	}
	p.at(start + sliceLen).attempt = uint16(sliceLen % 60000)
	// finish the first 1.5 slices: base moves, the passed slots come back
	for o := start; o < start+100+sliceLen+sliceLen/2; o++ {
		p.at(o).state = stDone
	}
	p.advance()
	if p.base != start+100+sliceLen+sliceLen/2 {
		t.Fatalf("base %d", p.base)
	}
	if used, _ := sp.slots(); used != 2 {
		t.Fatalf("%d slots in use after the window passed 2 slices", used)
	}
	check("advanced")
	// the newest slice (in memory) is compacted once mostly done
	for o := p.base; o < p.cursor-10; o++ {
		p.at(o).state = stDone
	}
	p.advance()
	if last := p.sl[len(p.sl)-1]; len(p.sl) != 1 || last.start != p.base || len(last.ents) != 10 {
		t.Fatalf("after compaction: %d slices, start %d base %d len %d", len(p.sl), last.start, p.base, len(last.ents))
	}
	check("compacted")
	if used, _ := sp.slots(); used != 0 {
		t.Fatalf("%d slots in use", used)
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("side files left: %v", left)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
