package delay

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/metaqgo/metaq/conf"
)

// The decoders of what the service reads back (progress records from the
// log, the index checkpoint, bucket entries) and of client properties must
// never panic and must reject what they cannot trust.
func FuzzDecodeProgress(f *testing.F) {
	p := progress{at: 1, timerQ: 2, timerP: 3, timerT: 4, levels: []int64{5, 6}}
	f.Add(p.encode(nil))
	f.Add([]byte("v=1&at=&tq=-1"))
	f.Add([]byte("v=1&at=1&tq=2&tp=3&tt=4&l=,,x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, ok := decodeProgress(b)
		if !ok {
			return
		}
		if q.timerQ < 0 || q.timerP < 0 {
			t.Fatalf("accepted negative offsets: %+v", q)
		}
		r, ok := decodeProgress(q.encode(nil))
		if !ok || r.at != q.at || r.timerQ != q.timerQ || r.timerP != q.timerP || r.timerT != q.timerT || len(r.levels) != len(q.levels) {
			t.Fatalf("round trip: %+v → %+v", q, r)
		}
	})
}

func FuzzReadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	if err := writeCheckpoint(dir, checkpoint{qi: 7, pi: 8, rolled: 3600000}); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(dir, ckName))
	f.Add(good)
	f.Add([]byte("v=1&qi=1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, ckName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := readCheckpoint(d)
		if err == nil && (ck.qi < 0 || ck.pi < 0 || ck.rolled%hourMs != 0) {
			t.Fatalf("accepted %+v", ck)
		}
	})
}

func FuzzPlanFor(f *testing.F) {
	s := &Service{levels: conf.Delay{}.DelayLevels()}
	for _, seed := range []string{"delay=3", "deliverAt=1700000000000&tag=a", "delay=99999999999999999999", "deliverAt=-5", "delay=&deliverAt="} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, props []byte) {
		p, ok, err := s.PlanFor(props, 1_700_000_000_000)
		if err != nil || !ok {
			return
		}
		if p.Partition < 0 || int(p.Partition) > len(s.levels) {
			t.Fatalf("partition %d out of range", p.Partition)
		}
		if p.Partition == TimerPartition && (p.DeliverAt < 0 || p.DeliverAt > 1_700_000_000_000+MaxDelay.Milliseconds()) {
			t.Fatalf("deliverAt %d accepted", p.DeliverAt)
		}
		sp := ScheduleProps(nil, props, "t%", 3)
		if string(sp) == "" {
			t.Fatal("empty schedule properties")
		}
	})
}

func FuzzParseDelayLevels(f *testing.F) {
	f.Add(conf.DefaultMessageDelayLevel)
	f.Add("1ms 366d")
	f.Add("0s")
	f.Fuzz(func(t *testing.T, v string) {
		ls, err := conf.ParseDelayLevels(v)
		if err != nil {
			return
		}
		if len(ls) == 0 || len(ls) > conf.MaxDelayLevels {
			t.Fatalf("%d levels", len(ls))
		}
		for _, l := range ls {
			if l <= 0 {
				t.Fatalf("level %v", l)
			}
		}
	})
}
