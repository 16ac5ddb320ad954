package ha

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Epoch history: a node that becomes master writes one record into its own
// log before it accepts a put,
//
//	topic %HA%, partition 0, data "epoch=<n>" or "epoch=<n> start=<pos>"
//
// so the history (which epoch began at which physical offset: start when
// given, else the record's own position) replicates like every other record
// and survives in every copy of the log. A promoted node writes the second
// form with its write position before the record: that is where its history
// leaves the former master's, and the record itself may lie further on — when
// it does not fit in the rest of the active segment, the log rolls first and
// the record lands at the next segment's base, past the BLANK written at the
// old write position. A node already master that opens a newer epoch writes
// the first form (its log goes on unbroken; nothing diverges at a roll). A
// node configured as master (no election) starts a new epoch each
// time it starts, at the position its log recovered to (the second form,
// written once the broker runs, so start may lie before the record): what a
// slave holds past that point came from before a crash of the master's
// machine and may differ from what the master writes there now
// (docs/replication.md, "A slave ahead of its master"). It does so only
// once its log holds an epoch record, i.e. once a slave has linked to it:
// until then no slave holds its bytes, and the first link writes the first
// record (Node.ensureEpoch). A node rejoining as a slave sends the last epoch in its
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
// failover: they are read whole). The %HA% index covers the log only up to
// what the dispatcher has indexed, which on a slave stops at its read limit
// (the master's high watermark, commit.go): a slave restarted with an epoch
// record past its limit would report an older epoch and be told to
// truncate. So the records below the indexed position come from the index,
// the rest from a scan of the log's tail up to its written end — on a slave
// the bytes its master has not acknowledged yet, on a master what its
// dispatcher has not reached: small.
func readEpochs(st *store.Store) ([]epochRec, error) {
	indexed := st.IndexedPos()
	var out []epochRec
	add := func(r *protocol.Record) {
		if e, start, ok := parseEpochData(r.Data); ok {
			if start < 0 || start > r.PhysicalOffset {
				start = r.PhysicalOffset
			}
			out = append(out, epochRec{epoch: e, start: start})
		}
	}
	off := st.MinOffset(EpochTopic, 0)
	for done := false; !done; {
		res, err := st.Read(EpochTopic, 0, off, 64<<10, nil)
		if err != nil {
			return out, err
		}
		if res.Status != store.ReadFound {
			res.Release()
			break
		}
		for _, b := range res.Bufs {
			it := protocol.NewRecordIterator(b)
			for it.Next() {
				if r := it.Record(); r.PhysicalOffset < indexed {
					add(r)
				} else {
					done = true // the tail scan below has it
				}
			}
		}
		off = res.NextOffset
		res.Release()
	}
	err := st.ScanWritten(max(indexed, st.MinPos()), func(pos int64, b []byte) error {
		if !isEpochRecord(b) {
			return nil
		}
		r, _, err := protocol.DecodeRecord(b, 0)
		if err != nil {
			return fmt.Errorf("ha: the epoch record at %d: %w", pos, err)
		}
		if r.Partition == 0 {
			add(&r)
		}
		return nil
	})
	return out, err
}

// isEpochRecord: rec (one whole record) is of EpochTopic.
func isEpochRecord(rec []byte) bool {
	const n = len(EpochTopic)
	o := protocol.OffTopicLen
	return len(rec) > o+n && int(rec[o]) == n && string(rec[o+1:o+1+n]) == EpochTopic
}

// parseEpochData parses "epoch=<n>" (start -1: the record's position) or
// "epoch=<n> start=<pos>".
func parseEpochData(b []byte) (e, start int64, ok bool) {
	s, ok := cutPrefix(string(b), "epoch=")
	if !ok {
		return 0, 0, false
	}
	start = -1
	if i := strings.IndexByte(s, ' '); i >= 0 {
		v, ok := cutPrefix(s[i+1:], "start=")
		if !ok {
			return 0, 0, false
		}
		p, err := strconv.ParseInt(v, 10, 64)
		if err != nil || p < 0 {
			return 0, 0, false
		}
		s, start = s[:i], p
	}
	e, err := strconv.ParseInt(s, 10, 64)
	return e, start, err == nil && e > 0
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

// writeStartEpoch appends the record of epoch e beginning at start (this
// run's first byte, store.OpenPos) on a node that is master already: it is
// durable locally when this returns; it does not wait for the sync gate (the
// slaves receive it as any record).
func writeStartEpoch(st *store.Store, e, start int64) error {
	data := "epoch=" + strconv.FormatInt(e, 10) + " start=" + strconv.FormatInt(start, 10)
	if _, _, err := st.AppendAsync(&store.Message{Topic: EpochTopic, Data: []byte(data)}); err != nil {
		return fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	if err := st.Flush(); err != nil {
		return fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	return nil
}

// writeEpoch appends the record of epoch e (durable when it returns, in
// either flush mode) and returns where the epoch begins. start >= 0: the
// epoch begins there ("epoch=<n> start=<pos>"; a promoted node passes its
// write position, read while nothing else appends). start < 0: at the
// record's own position ("epoch=<n>").
func writeEpoch(st *store.Store, e, start int64) (int64, error) {
	data := "epoch=" + strconv.FormatInt(e, 10)
	if start >= 0 {
		data += " start=" + strconv.FormatInt(start, 10)
	}
	res, err := st.Append(&store.Message{Topic: EpochTopic, Data: []byte(data)})
	if err != nil {
		return 0, fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	if err := st.Flush(); err != nil {
		return 0, fmt.Errorf("ha: writing the epoch record: %w", err)
	}
	if start < 0 || start > res.PhysicalOffset {
		start = res.PhysicalOffset // as readEpochs reads it
	}
	return start, nil
}
