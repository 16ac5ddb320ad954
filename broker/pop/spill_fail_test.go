package pop

import (
	"log/slog"
	"os"
	"testing"
)

// A failing side file leaves the delivery state in memory: the spill pass
// counts the failure and stops, every slice keeps its entries and no slot
// stays taken — first when a new file cannot be created (the directory is
// gone), then when the pwrite into an existing file fails.
func TestSpillFailureKeepsSlicesInMemory(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpill(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	s := &Pop{spill: sp, queues: map[string]map[string]*queue{}, cfg: Config{SpillAfter: 1, SpillMemory: 1}, log: slog.New(slog.DiscardHandler)}
	q := &queue{group: "g", topic: "t", spill: sp}
	s.queues["g"] = map[string]*queue{"t": q}
	p := q.partLocked(0)
	p.reset(0)
	const n = 3*sliceLen + 10
	for i := int64(0); i < n; i++ {
		p.push(entry{state: stInflight, attempt: uint16(i % 60000), deadline: i}, 1)
	}
	inMemory := func(what string, failures int64) {
		t.Helper()
		if got := s.spillErrs.Load(); got != failures {
			t.Fatalf("%s: %d failures counted, want %d", what, got, failures)
		}
		if used, _ := sp.slots(); used != 0 {
			t.Fatalf("%s: %d slots in use", what, used)
		}
		for _, sl := range p.sl {
			if sl.slot != nil {
				t.Fatalf("%s: slice at %d points at the side file", what, sl.start)
			}
		}
		for o := p.base; o < p.cursor; o++ {
			if e := p.at(o); e.deadline != o || e.attempt != uint16(o%60000) {
				t.Fatalf("%s: offset %d: %+v", what, o, *e)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.spillPass(1 << 40)
	inMemory("no directory", 1)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	slt, err := sp.alloc()
	if err != nil {
		t.Fatal(err)
	}
	sp.free(slt)
	sp.segs[0].f.Close() // the pwrite fails now; the mapping stays
	s.spillPass(1 << 40)
	inMemory("pwrite fails", 2)
}
