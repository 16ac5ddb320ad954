package delay

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// handService is a Service over st for tests that drive the timer by hand
// (no goroutines started).
func handService(st *store.Store) *Service {
	return &Service{cfg: Config{Lookahead: 500 * time.Millisecond, ProgressEvery: time.Hour}, st: st,
		log: slog.New(slog.DiscardHandler), levels: conf.Delay{}.DelayLevels(), seen: map[string]bool{}, stop: make(chan struct{})}
}

// appendTimerRecord stores body for topic dst/0 as a %SCHEDULE% timer
// record due at deliverAt and returns it as read back (properties copied).
func appendTimerRecord(t *testing.T, st *store.Store, body string, deliverAt int64) protocol.Record {
	t.Helper()
	m := store.Message{Topic: "dst", Partition: 0, Data: []byte(body), Properties: []byte("deliverAt=" + strconv.FormatInt(deliverAt, 10))}
	sm, _ := ScheduleMessage(&m, Plan{Partition: TimerPartition, DeliverAt: deliverAt}, nil)
	res, err := st.Append(&sm)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := st.ReadByID(res.MsgID)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	r, _, err := protocol.DecodeRecord(rr.Bufs[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Properties = append([]byte(nil), r.Properties...)
	r.Data = append([]byte(nil), r.Data...)
	return r
}

// openService opens a store and a Service over it (level 1 waits 50ms),
// closed when the test ends; adjust, when set, changes the Config.
func openService(t *testing.T, adjust func(*Config)) (*store.Store, *Service) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), SegmentSize: 1 << 20, IndexFileSize: 1 << 12, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Dir: t.TempDir(), Levels: []time.Duration{50 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler)}
	if adjust != nil {
		adjust(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); st.Close() })
	return st, s
}

// waitTopic waits up to 3s for a record in topic/0.
func waitTopic(st *store.Store, topic string) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st.MaxOffset(topic, 0) > 0 {
			return true
		}
	}
	return false
}

// readAll returns the records of topic/partition (properties and data
// copied), waiting up to 3s for those counted but not readable yet (a
// delivery is written out after its batch).
func readAll(t *testing.T, st *store.Store, topic string, partition int32) []protocol.Record {
	t.Helper()
	var out []protocol.Record
	deadline := time.Now().Add(3 * time.Second)
	for off := st.MinOffset(topic, partition); off < st.MaxOffset(topic, partition); {
		res, err := st.Read(topic, partition, off, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if status := res.Status; status != store.ReadFound {
			res.Release()
			if status != store.ReadNoMessage || time.Now().After(deadline) {
				t.Fatalf("read %s-%d@%d: status %v", topic, partition, off, status)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				r, size, err := protocol.DecodeRecord(buf, 0)
				if err != nil {
					res.Release()
					t.Fatal(err)
				}
				buf = buf[size:]
				r.Properties = append([]byte(nil), r.Properties...)
				r.Data = append([]byte(nil), r.Data...)
				out = append(out, r)
				off = r.QueueOffset + 1
			}
		}
		res.Release()
	}
	return out
}
