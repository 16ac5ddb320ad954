package ha

import (
	"fmt"
	"strconv"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Epoch history: a node that becomes master writes one record into its own
// log before it accepts a put,
//
//	topic %HA%, partition 0, data "epoch=<n>"
//
// so the history (which epoch began at which physical offset: the record's
// own position) replicates like every other record and survives in every
// copy of the log. A node rejoining as a slave sends the last epoch in its
// own log; the master answers where that epoch ends in its history (the
// start of the next epoch it knows, else its end) — Kafka's leader-epoch
// rule — and a slave whose log goes past that point truncates there.

// EpochTopic is the system topic of epoch records.
const EpochTopic = "%HA%"

// epochRec is one epoch record.
type epochRec struct {
	epoch int64
	start int64 // physical offset of the record: where the epoch begins
}

// readEpochs returns the epoch records of st, oldest first (a few per
// failover: they are read whole).
func readEpochs(st *store.Store) ([]epochRec, error) {
	var out []epochRec
	off := st.MinOffset(EpochTopic, 0)
	for {
		res, err := st.Read(EpochTopic, 0, off, 64<<10, nil)
		if err != nil {
			return out, err
		}
		if res.Status != store.ReadFound {
			res.Release()
			return out, nil
		}
		for _, b := range res.Bufs {
			it := protocol.NewRecordIterator(b)
			for it.Next() {
				r := it.Record()
				e, ok := parseEpochData(r.Data)
				if ok {
					out = append(out, epochRec{epoch: e, start: r.PhysicalOffset})
				}
			}
		}
		off = res.NextOffset
		res.Release()
	}
}

func parseEpochData(b []byte) (int64, bool) {
	s, ok := cutPrefix(string(b), "epoch=")
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseInt(s, 10, 64)
	return e, err == nil && e > 0
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return s, false
	}
	return s[len(p):], true
}

// lastEpoch is the newest epoch in st's log (0 when none).
func lastEpoch(st *store.Store) (int64, error) {
	es, err := readEpochs(st)
	if err != nil || len(es) == 0 {
		return 0, err
	}
	return es[len(es)-1].epoch, nil
}

// epochEnd is where epoch e ends in st's history: the start of the first
// epoch after e, or end (the log's end) when e is the newest.
func epochEnd(es []epochRec, e, end int64) int64 {
	for _, r := range es {
		if r.epoch > e {
			return r.start
		}
	}
	return end
}

// writeEpoch appends the record of epoch e (durable when it returns, in
// either flush mode).
func writeEpoch(st *store.Store, e int64) (int64, error) {
	res, err := st.Append(&store.Message{Topic: EpochTopic, Data: []byte("epoch=" + strconv.FormatInt(e, 10))})
	if err != nil {
		return 0, fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	if err := st.Flush(); err != nil {
		return 0, fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	return res.PhysicalOffset, nil
}
