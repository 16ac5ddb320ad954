package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Zero-allocation fetching: Admin.FetchInto reads a get's value block from
// the socket straight into a FetchBuffer the caller reuses, and the buffer
// walks its records in place. Next checks each record (magic, size, layout
// and its CRC-32C, like the broker) and reads nothing else; a RecordView's
// accessors read the field they name. Once the buffer has grown to the
// gets' size, a fetch allocates nothing and a record costs its checksum and
// a few loads — against ~300 bytes of Message and a fresh block per get for
// FetchWith, which is FetchInto into a new buffer plus a decode of every
// record into a Message (docs/client.md, "Fetching without allocation").

// FetchBuffer holds the records of one get (Admin.FetchInto) and iterates
// them:
//
//	var fb client.FetchBuffer
//	for {
//		if err := admin.FetchInto(ctx, addr, req, &fb); err != nil { … }
//		for fb.Next() {
//			r := fb.Record()
//			use(r.Offset(), r.Body()) // valid until the next FetchInto
//		}
//		if err := fb.Err(); err != nil { … } // a damaged record: the ones before it were good
//		req.Offset = fb.NextOffset()
//	}
//
// The bytes a RecordView returns alias the buffer and are overwritten by
// the next FetchInto into it. A FetchBuffer is not safe for concurrent use.
// The zero value is ready; it grows to the largest block received.
type FetchBuffer struct {
	// NoVerify skips the per-record CRC-32C check (on by default). The
	// header and layout checks stay: a record is never read outside its
	// bounds.
	NoVerify bool

	block []byte // the value block (its capacity is the reused buffer)
	rest  []byte // not iterated yet
	cur   RecordView
	err   error
	from  int64 // the get's offset
	next  int64 // after the last record Next returned (-1: none yet)
	moved bool  // a 301: NextOffset is movedTo
	to    int64
	dec   decoder
	wm    *whereMatcher
}

// Reset drops the records (the buffer is kept).
func (fb *FetchBuffer) Reset() {
	fb.block, fb.rest, fb.cur, fb.err = fb.block[:0], nil, RecordView{}, nil
	fb.next, fb.moved, fb.to = -1, false, 0
}

// Next advances to the next record, verified; false at the end of the
// block or at a damaged record (Err).
func (fb *FetchBuffer) Next() bool {
	for fb.err == nil && len(fb.rest) > 0 {
		rec, props, data, err := protocol.SplitRecord(fb.rest, !fb.NoVerify)
		if err == protocol.ErrBlank {
			fb.rest = fb.rest[len(rec):]
			continue
		}
		if err != nil {
			fb.err = err
			return false
		}
		fb.rest = fb.rest[len(rec):]
		fb.next = int64(binary.BigEndian.Uint64(rec[protocol.OffQueueOffset:])) + 1
		if fb.wm != nil && !fb.wm.expr.MatchRecord(rec) {
			continue // a broker that does not evaluate the expression
		}
		fb.cur = RecordView{rec: rec, props: props, data: data, dec: &fb.dec}
		return true
	}
	return false
}

// Record is the record Next advanced to.
func (fb *FetchBuffer) Record() RecordView { return fb.cur }

// Err is the damaged record that ended the iteration (nil when none).
func (fb *FetchBuffer) Err() error {
	if fb.err == nil {
		return nil
	}
	return fmt.Errorf("bad record in value block at offset %d: %w", fb.NextOffset(), fb.err)
}

// Moved reports a 301: the offset was out of range or every record scanned
// was filtered out; NextOffset is where to continue.
func (fb *FetchBuffer) Moved() bool { return fb.moved }

// Bytes is the value block as received (whole records).
func (fb *FetchBuffer) Bytes() []byte { return fb.block }

// NextOffset is where the next get starts: after the block's last record
// (filtered ones included), after the last good record when a damaged one
// ended the iteration, the offset the broker moved the get to (Moved), or
// the get's offset when nothing was there.
func (fb *FetchBuffer) NextOffset() int64 {
	switch {
	case fb.moved:
		return fb.to
	case fb.err == nil:
		fb.skipRest()
	}
	if fb.next < 0 {
		return fb.from
	}
	return fb.next
}

// skipRest moves past the records not iterated, reading only their sizes
// and the last one's queue offset (the broker verified them; Next would).
func (fb *FetchBuffer) skipRest() {
	last := -1
	for b, at := fb.rest, 0; ; {
		size, magic, ok := protocol.PeekRecord(b)
		if !ok || size < protocol.BlankMinSize || size > len(b) {
			break
		}
		if magic == protocol.RecordMagic && size >= protocol.OffQueueOffset+8 {
			last = at
		}
		b, at = b[size:], at+size
	}
	if last >= 0 {
		fb.next = int64(binary.BigEndian.Uint64(fb.rest[last+protocol.OffQueueOffset:])) + 1
	}
}

// RecordView is one record of a FetchBuffer, read in place: each accessor
// reads the field it names. Slices it returns alias the buffer.
type RecordView struct {
	rec   []byte
	props []byte
	data  int
	dec   *decoder
}

func (r RecordView) u64(off int) int64 { return int64(binary.BigEndian.Uint64(r.rec[off:])) }

// Offset is the record's queue offset in its partition.
func (r RecordView) Offset() int64 { return r.u64(protocol.OffQueueOffset) }

// MsgID is brokerId<<48 | physical offset.
func (r RecordView) MsgID() int64 { return r.u64(protocol.OffMsgID) }

// Partition is the partition number.
func (r RecordView) Partition() int {
	return int(int32(binary.BigEndian.Uint32(r.rec[protocol.OffPartition:])))
}

// Flag is MetaQ's user flag as stored.
func (r RecordView) Flag() int32 { return int32(binary.BigEndian.Uint32(r.rec[protocol.OffFlag:])) }

// SysFlag is the broker's system flag (protocol.SysFlag*).
func (r RecordView) SysFlag() uint16 { return binary.BigEndian.Uint16(r.rec[protocol.OffSysFlag:]) }

// ReconsumeTimes is how often it came back through the retry topic.
func (r RecordView) ReconsumeTimes() int {
	return int(binary.BigEndian.Uint16(r.rec[protocol.OffReconsumeTimes:]))
}

// StoreTime is when the broker stored it.
func (r RecordView) StoreTime() time.Time { return time.UnixMilli(r.u64(protocol.OffStoreTime)) }

// BornTime is when the producer sent it.
func (r RecordView) BornTime() time.Time { return time.UnixMilli(r.u64(protocol.OffBornTime)) }

// Topic is the record's topic.
func (r RecordView) Topic() []byte {
	n := int(r.rec[protocol.OffTopicLen])
	return r.rec[protocol.OffTopicLen+1 : protocol.OffTopicLen+1+n]
}

// Properties is the properties line (a URL query string, escaped; see
// protocol.NextProperty), empty when there is none.
func (r RecordView) Properties() []byte { return r.props }

// Data is the put data block as stored: the attribute (flag bit 0) and the
// body.
func (r RecordView) Data() []byte { return r.rec[r.data:] }

// Body is the message body (the data without the attribute).
func (r RecordView) Body() []byte {
	d := r.rec[r.data:]
	if f := r.Flag(); f&protocol.FlagHasAttribute != 0 {
		if _, payload, err := protocol.AttributeOf(f, d); err == nil {
			return payload
		}
	}
	return d
}

// Attribute is MetaQ's message attribute (nil when there is none).
func (r RecordView) Attribute() []byte {
	if f := r.Flag(); f&protocol.FlagHasAttribute != 0 {
		if attr, _, err := protocol.AttributeOf(f, r.rec[r.data:]); err == nil {
			return attr
		}
	}
	return nil
}

// Tag is the tag property, unescaped ("" when none); repeated tags come
// from the buffer's cache without allocating.
func (r RecordView) Tag() string {
	for p := r.props; len(p) > 0; {
		var k, v []byte
		k, v, p = protocol.NextProperty(p)
		if string(k) == protocol.PropTag {
			return r.dec.tag(v)
		}
	}
	return ""
}

// Bytes is the encoded record.
func (r RecordView) Bytes() []byte { return r.rec }

// Decode fills m with the record, as FetchWith delivers it (every field).
// m's Body and property strings alias the buffer: copy what must outlive
// the next FetchInto.
func (r RecordView) Decode(m *Message) {
	rec, _, err := protocol.DecodeRecordNoCRC(r.rec)
	if err != nil { // not reached: Next checked the layout
		return
	}
	r.dec.decode(m, &rec)
}

// FetchInto is FetchWith into a reused buffer: the value block is read from
// the socket into fb (grown when too small) and iterated with fb.Next, with
// no allocation once fb has the size of the gets. A 404 leaves fb empty
// with NextOffset = req.Offset; a 301 sets Moved.
func (a *Admin) FetchInto(ctx context.Context, addr string, req FetchRequest, fb *FetchBuffer) error {
	c, err := a.conn(addr)
	if err != nil {
		return err
	}
	if fb.dec.topic != req.Topic {
		fb.dec = decoder{topic: req.Topic, brokerID: -1}
	}
	return fetchInto(ctx, c, &req, a.cfg.RequestTimeout, fb)
}

// fetchInto sends the get and receives its value block into fb.
func fetchInto(ctx context.Context, c *brokerConn, req *FetchRequest, timeout time.Duration, fb *FetchBuffer) error {
	fb.Reset()
	fb.from = req.Offset
	if !protocol.ValidName(req.Topic) {
		return fmt.Errorf("%w: topic %q", zkmeta.ErrBadName, req.Topic)
	}
	group := req.Group
	if group == "" {
		group = AdminGroup
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	maxBytes = min(maxBytes, math.MaxInt32)
	wm, err := fb.dec.whereMatcher(req.Where)
	if err != nil {
		return err
	}
	fb.wm = wm
	cl := getCall(kindGet)
	cl.dst, cl.hint = fb.block, maxBytes
	if cl.dst == nil {
		cl.dst = make([]byte, 0, min(maxBytes, 4<<20)) // the first get: sized once
	}
	cl, err = c.doCall(ctx, cl, timeout+req.MaxWait, func(dst []byte, op int32) []byte {
		return protocol.AppendGetWhere(dst, req.Topic, group, int32(req.Partition), req.Offset, int32(maxBytes), op, req.MaxWait.Milliseconds(), req.Tags, req.Where)
	})
	if err != nil {
		return err
	}
	defer putCall(cl)
	switch {
	case cl.value:
		if cap(cl.body) > 0 {
			fb.block = cl.body // the buffer it was read into (grown, when it had to)
		}
		fb.rest = fb.block
	case cl.code == protocol.StatusMoved:
		off, perr := protocol.ParseInt(cl.body)
		if perr != nil {
			return &ConnError{Addr: c.addr, Err: perr}
		}
		fb.moved, fb.to = true, off
	case cl.code == protocol.StatusNotFound:
	default:
		return brokerErr(c.addr, cl.code, cl.body)
	}
	return nil
}
