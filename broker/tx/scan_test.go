package tx

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadProber refuses every check (its connection is gone).
type deadProber struct{ n atomic.Int64 }

func (p *deadProber) SendCheck(int64) bool { p.n.Add(1); return false }

// A check scan always makes progress: even with a budget too small for one
// entry and a producer whose checks all fail, every scan takes the earliest
// due half message and reschedules it, so all of them get their checks in
// turn and then roll back; none is stuck behind another.
func TestScanAlwaysProgresses(t *testing.T) {
	st, err := store.Open(store.Config{Dir: t.TempDir(), SegmentSize: 1 << 20, IndexFileSize: 1 << 12, UnflushThreshold: 1000,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m, err := Open(Config{Store: st, CheckInterval: time.Hour, CheckMax: 2, ScanBudget: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := &deadProber{}
	s := m.NewSession(p)
	defer s.Close()
	const n = 50
	for i := 0; i < n; i++ {
		if _, _, err := m.PutHalf(s, "g", &store.Message{Topic: "t", Partition: 0, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	advance := func() { mu.Lock(); now = now.Add(2 * time.Hour); mu.Unlock() }
	// Two rounds of checks, then a round of rollbacks: with a budget of one
	// entry per scan, 3n scans do it all.
	for round := 0; round < 3; round++ {
		advance()
		for i := 0; i < n; i++ {
			progress := func() int64 { return p.n.Load() + m.Stats().CheckRollbacks }
			before := progress()
			m.scanChecks()
			if progress() <= before {
				t.Fatalf("round %d scan %d made no progress", round, i)
			}
		}
	}
	if st := m.Stats(); st.PendingHalf != 0 || st.CheckRollbacks != n || p.n.Load() != 2*n {
		t.Fatalf("stats %+v, %d checks attempted", st, p.n.Load())
	}
}
