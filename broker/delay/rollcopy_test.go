package delay

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// TestRolledCopiesDeliverOnce: a crash between a roll-forward's re-append
// and the progress record that covers it makes the roll happen again after
// the restart, so two copies of one scheduled message wait in %SCHEDULE%.
// Here the second copy is made by hand (the timer makes the other when the
// original's roll entry fires); they are delivered once.
func TestRolledCopiesDeliverOnce(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "data"), SegmentSize: 1 << 20, Retention: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := Open(Config{Store: st, Dir: filepath.Join(dir, "delay")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	due := time.Now().Add(3 * time.Second).UnixMilli() // beyond rollAfter (2s): a roll entry
	r := appendTimerRecord(t, st, "once", due)
	if _, err := s.rollForward(&r, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteOut(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ds := s.Stats()
		if ds.TimerPending == 0 && ds.Rolled >= 2 && st.MaxOffset("dst", 0) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: %+v, dst max %d", ds, st.MaxOffset("dst", 0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := st.MaxOffset("dst", 0); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}
