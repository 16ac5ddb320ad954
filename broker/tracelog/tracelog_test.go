package tracelog

import (
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Events emitted are stored as %TRACE% records the key index finds by message id; Close
// writes what is queued; a nil Writer ignores events.
func TestWriterStoresEvents(t *testing.T) {
	st, err := store.Open(store.Config{Dir: filepath.Join(t.TempDir(), "data"), SegmentSize: 1 << 20, IndexFileSize: 1 << 16, UnflushThreshold: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := New(st, "b1", nil)
	const n = 600 // more than one batch
	for i := range n {
		w.Emit(&trace.Event{Type: trace.Delivered, MsgID: int64(1000 + i), Topic: "orders", Time: 1, OK: true, Broker: 1, Partition: 0, Offset: int64(i)})
	}
	w.Close()
	w.Close() // idempotent
	if written, dropped, failed := w.Stats(); written != n || dropped != 0 || failed != 0 {
		t.Fatalf("stats %d written, %d dropped, %d failed", written, dropped, failed)
	}
	for _, id := range []int64{1000, 1000 + n - 1} {
		res, err := st.QueryKey(trace.Topic, trace.BucketKey(id), 10)
		if err != nil {
			t.Fatalf("QueryKey %d: %v", id, err)
		}
		var found bool
		for _, b := range res.Bufs {
			it := protocol.NewRecordIterator(b)
			for it.Next() {
				evs, err := trace.Decode(it.Record().Data)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range trace.Select(evs, id) {
					found = found || (e.Host == "b1" && e.Type == trace.Delivered)
				}
			}
		}
		res.Release()
		if !found {
			t.Fatalf("event of %d not found", id)
		}
	}
	var nilW *Writer
	nilW.Emit(&trace.Event{})
	nilW.Close()
	if !Traced(0, []byte("tag=a&_trace=1")) || Traced(0, []byte("tag=a")) || Traced(0, []byte("_trace=0")) || Traced(0, nil) {
		t.Fatal("Traced: the _trace property")
	}
	if !Traced(protocol.SysFlagTraced, nil) || !Traced(protocol.SysFlagTraced|protocol.SysFlagRetry, []byte("tag=a")) ||
		Traced(protocol.SysFlagRetry|protocol.SysFlagDelayed, nil) {
		t.Fatal("Traced: the sysFlag bit")
	}
}
