package delay

import (
	"bytes"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Progress records (%SCHEDULE% partition ProgressPartition). The data is one
// ASCII line, readable with `get`:
//
//		v=1&at=<unix ms written>&tq=<timer offset>&tp=<timer msgId bound>&tt=<timer watermark ms>&l=<o1>,<o2>,…
//
//	  - l: for delay level n (1-based), the %SCHEDULE% offset of partition n
//	    below which every record has been delivered.
//	  - tq, tp, tt: every timer record (partition 0) with a queue offset below
//	    tq — equivalently an id below tp — whose due time is below tt has been
//	    delivered. Records at or above tq are re-examined at recovery (and may
//	    be delivered twice).
//
// A progress record is appended after the deliveries it accounts for, so
// the log order alone makes it safe: a crash that keeps the record kept the
// deliveries before it. The service writes one whenever something moved
// (every ProgressEvery) and at least once a minute, so retention never
// removes the last one while the broker runs. The newest is the truth.
type progress struct {
	at     int64
	timerQ int64
	timerP int64 // msgId bound of timerQ
	timerT int64
	levels []int64
}

func (p *progress) encode(dst []byte) []byte {
	dst = append(dst, "v=1&at="...)
	dst = strconv.AppendInt(dst, p.at, 10)
	dst = append(dst, "&tq="...)
	dst = strconv.AppendInt(dst, p.timerQ, 10)
	dst = append(dst, "&tp="...)
	dst = strconv.AppendInt(dst, p.timerP, 10)
	dst = append(dst, "&tt="...)
	dst = strconv.AppendInt(dst, p.timerT, 10)
	dst = append(dst, "&l="...)
	for i, o := range p.levels {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, o, 10)
	}
	return dst
}

func decodeProgress(b []byte) (progress, bool) {
	var p progress
	if v, _ := protocol.PropertyRaw(b, "v"); string(v) != "1" {
		return p, false
	}
	var ok1, ok2, ok3 bool
	p.at, ok1 = propInt(b, "at")
	p.timerQ, ok2 = propInt(b, "tq")
	var ok4 bool
	p.timerP, ok4 = propInt(b, "tp")
	ok2 = ok2 && ok4 && p.timerP >= 0
	p.timerT, ok3 = propInt(b, "tt")
	if !ok1 || !ok2 || !ok3 || p.timerQ < 0 {
		return p, false
	}
	l, _ := protocol.PropertyRaw(b, "l")
	for _, f := range bytes.Split(l, []byte{','}) {
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil || v < 0 {
			return p, false
		}
		p.levels = append(p.levels, v)
	}
	return p, true
}

// loadProgress reads the newest valid progress record. Without one (a new
// broker, or retention removed it) every retained %SCHEDULE% record is
// examined again: messages may be delivered twice, never lost.
func (s *Service) loadProgress() (progress, bool) {
	lo, hi := s.st.MinOffset(scheduleTopic, ProgressPartition), s.st.MaxOffset(scheduleTopic, ProgressPartition)
	for off := hi - 1; off >= lo && off >= hi-16; off-- {
		res, err := s.st.Read(scheduleTopic, ProgressPartition, off, 1, nil)
		if err != nil {
			s.log.Warn("reading a delay progress record", "offset", off, "err", err)
			continue
		}
		if res.Status != store.ReadFound {
			res.Release()
			continue
		}
		r, _, derr := protocol.DecodeRecord(res.Bufs[0], 0)
		var p progress
		ok := derr == nil
		if ok {
			p, ok = decodeProgress(r.Data)
		}
		res.Release()
		if ok {
			return p, true
		}
		s.log.Warn("ignoring a bad delay progress record", "offset", off)
	}
	if hi > 0 {
		s.log.Warn("no delay progress record left (retention?): every retained delayed message is examined again; some may be delivered twice")
	}
	return progress{}, false
}

// writeProgress appends a progress record for the given timer state and the
// levels' current positions.
func (s *Service) writeProgress(timerQ, timerP, timerT int64, buf []byte) ([]byte, error) {
	p := progress{at: time.Now().UnixMilli(), timerQ: timerQ, timerP: timerP, timerT: timerT}
	for i := range s.levelOff {
		p.levels = append(p.levels, s.levelOff[i].Load())
	}
	buf = p.encode(buf[:0])
	m := store.Message{Topic: scheduleTopic, Partition: ProgressPartition, Data: buf}
	if _, _, err := s.st.AppendAsync(&m); err != nil {
		return buf, err
	}
	return buf, s.st.WriteOut()
}
