package pop

import (
	"encoding/binary"
	"errors"
)

// Records of the system topic %POP% (docs/push.md, "State and recovery").
//
// Partition 0 holds done records: offsets that are finished for a group
// (acknowledged, rejected or dead-lettered). Partition 1 holds checkpoint
// records: the whole delivery state, written every CheckpointInterval while
// it changes. Both are big-endian; the store's record CRC covers them.
//
// Done record (data):
//
//	version(1)=1 kind(1)='D' group(1+n) ntopics(1) topic(1+n)… count(4)
//	count × { topicIndex(1) partition(4) offset(8) }
//
// Checkpoint record (data), one chunk of a checkpoint set:
//
//	version(1)=1 kind(1)='C' id(8) chunk(2) chunks(2) cover(8) nstates(4)
//	nstates × { group(1+n) topic(1+n) partition(4) from(8) nruns(4)
//	            nruns × { len(4) value(2) } }
//
// cover is the next %POP% partition-0 queue offset when the checkpoint was
// taken: every done record below it is included. A state fragment gives
// the entries of offsets from, from+1, … as runs of equal values: 0xFFFF =
// done, else the attempt count; the first fragment of a partition starts
// at its base, and its cursor is where its last fragment ends. A
// partition's fragments may span chunks.

const (
	popTopic   = "%POP%"
	partDone   = 0
	partCk     = 1
	recVersion = 1
	kindDone   = 'D'
	kindCk     = 'C'
	runDone    = 0xFFFF
)

var be = binary.BigEndian

var errBadRecord = errors.New("pop: malformed %POP% record")

type doneRef struct {
	topic string
	part  int32
	off   int64
}

// appendDone encodes a done record for group.
func appendDone(b []byte, group string, refs []doneRef) []byte {
	b = append(b, recVersion, kindDone, byte(len(group)))
	b = append(b, group...)
	var topics [8]string
	nt := 0
	tpos := len(b)
	b = append(b, 0)
	idx := func(t string) int {
		for i := 0; i < nt; i++ {
			if topics[i] == t {
				return i
			}
		}
		return -1
	}
	for _, r := range refs {
		if idx(r.topic) < 0 && nt < len(topics) {
			topics[nt] = r.topic
			nt++
			b = append(b, byte(len(r.topic)))
			b = append(b, r.topic...)
		}
	}
	b[tpos] = byte(nt)
	cpos := len(b)
	b = append(b, 0, 0, 0, 0)
	n := 0
	for _, r := range refs {
		i := idx(r.topic)
		if i < 0 {
			continue // more than 8 topics in one call: callers split (never happens: one call is one topic)
		}
		b = append(b, byte(i))
		b = be.AppendUint32(b, uint32(r.part))
		b = be.AppendUint64(b, uint64(r.off))
		n++
	}
	be.PutUint32(b[cpos:], uint32(n))
	return b
}

type reader struct {
	b   []byte
	err bool
}

// take returns the next n bytes, or nil (and marks the record bad) when
// fewer remain.
func (r *reader) take(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.err = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return be.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return be.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return be.Uint64(b)
	}
	return 0
}

func (r *reader) str() string {
	n := int(r.u8())
	if r.err {
		return ""
	}
	return string(r.take(n))
}

// decodeDone calls fn for every offset of a done record.
func decodeDone(data []byte, fn func(group, topic string, part int32, off int64)) error {
	r := reader{b: data}
	if r.u8() != recVersion || r.u8() != kindDone {
		return errBadRecord
	}
	group := r.str()
	nt := int(r.u8())
	topics := make([]string, nt)
	for i := range topics {
		topics[i] = r.str()
	}
	n := int(r.u32())
	if r.err || n < 0 || n*13 > len(r.b) {
		return errBadRecord
	}
	for i := 0; i < n; i++ {
		ti := int(r.u8())
		p := int32(r.u32())
		o := int64(r.u64())
		if ti >= nt || o < 0 {
			return errBadRecord
		}
		fn(group, topics[ti], p, o)
	}
	return nil
}

type ckHeader struct {
	id            uint64
	chunk, chunks uint16
	cover         int64
}

type run struct {
	n   uint32
	val uint16
}

type ckState struct {
	group, topic string
	part         int32
	from         int64
	runs         []run
}

func decodeCk(data []byte, fn func(ckState)) (ckHeader, error) {
	var h ckHeader
	r := reader{b: data}
	if r.u8() != recVersion || r.u8() != kindCk {
		return h, errBadRecord
	}
	h.id = r.u64()
	h.chunk, h.chunks = r.u16(), r.u16()
	h.cover = int64(r.u64())
	n := int(r.u32())
	if r.err || h.chunk >= h.chunks || h.cover < 0 {
		return h, errBadRecord
	}
	if fn == nil {
		return h, nil
	}
	for i := 0; i < n; i++ {
		var s ckState
		s.group, s.topic = r.str(), r.str()
		s.part = int32(r.u32())
		s.from = int64(r.u64())
		nr := int(r.u32())
		if r.err || nr < 0 || nr*6 > len(r.b) || s.from < 0 {
			return h, errBadRecord
		}
		s.runs = make([]run, nr)
		for j := range s.runs {
			s.runs[j] = run{n: r.u32(), val: r.u16()}
		}
		if r.err {
			return h, errBadRecord
		}
		fn(s)
	}
	return h, nil
}

// ckWriter accumulates state fragments into chunks of at most w.max.
type ckWriter struct {
	max    int // chunk size
	chunks [][]byte
	cur    []byte
	nstate int
	// fragment being written
	frag      []byte
	fragRuns  int
	fragGroup string
	fragTopic string
	fragPart  int32
	open      bool
}

const ckHeaderLen = 2 + 8 + 2 + 2 + 8 + 4

func (w *ckWriter) startChunk() {
	w.cur = make([]byte, ckHeaderLen, 64<<10)
	w.nstate = 0
}

func (w *ckWriter) endChunk() {
	if w.cur == nil {
		return
	}
	be.PutUint32(w.cur[ckHeaderLen-4:], uint32(w.nstate))
	w.chunks = append(w.chunks, w.cur)
	w.cur = nil
}

func (w *ckWriter) beginState(group, topic string, part int32, from int64) {
	w.fragGroup, w.fragTopic, w.fragPart = group, topic, part
	w.frag = w.frag[:0]
	w.frag = append(w.frag, byte(len(group)))
	w.frag = append(w.frag, group...)
	w.frag = append(w.frag, byte(len(topic)))
	w.frag = append(w.frag, topic...)
	w.frag = be.AppendUint32(w.frag, uint32(part))
	w.frag = be.AppendUint64(w.frag, uint64(from))
	w.frag = append(w.frag, 0, 0, 0, 0)
	w.fragRuns = 0
	w.open = true
}

// addRun appends a run, flushing the fragment into a new chunk when it grows
// past the chunk size (the next fragment continues at next).
func (w *ckWriter) addRun(n uint32, val uint16, next int64) {
	w.frag = be.AppendUint32(w.frag, n)
	w.frag = be.AppendUint16(w.frag, val)
	w.fragRuns++
	if len(w.frag) >= w.max-ckHeaderLen-64 {
		w.endState()
		w.endChunk()
		w.beginState(w.fragGroup, w.fragTopic, w.fragPart, next)
	}
}

func (w *ckWriter) endState() {
	if !w.open {
		return
	}
	w.open = false
	hdr := 1 + len(w.fragGroup) + 1 + len(w.fragTopic) + 4 + 8
	be.PutUint32(w.frag[hdr:], uint32(w.fragRuns))
	if w.cur == nil || len(w.cur)+len(w.frag) > w.max {
		w.endChunk()
		w.startChunk()
	}
	w.cur = append(w.cur, w.frag...)
	w.nstate++
}

// finish returns the chunks with their headers filled in.
func (w *ckWriter) finish(id uint64, cover int64) [][]byte {
	w.endState()
	if w.cur == nil && len(w.chunks) == 0 {
		w.startChunk()
	}
	w.endChunk()
	for i, c := range w.chunks {
		c[0], c[1] = recVersion, kindCk
		be.PutUint64(c[2:], id)
		be.PutUint16(c[10:], uint16(i))
		be.PutUint16(c[12:], uint16(len(w.chunks)))
		be.PutUint64(c[14:], uint64(cover))
	}
	return w.chunks
}
