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
