// Package trace is the format of message-trace records: the events that
// clients (and the broker) write to the system topic %TRACE%, and the
// timeline built from them (docs/trace.md).
package trace

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
)

// Topic is the system topic trace records are stored in.
const Topic = "%TRACE%"

// PropTrace marks a message whose producer traces it ("_trace=1"): the
// broker then writes its own events (delay delivery, retry, dead letter,
// transaction end) for it.
const PropTrace = "_trace"

// Type is an event's kind.
type Type string

// Event types. Clients write produce, consume-begin, consume-end and retry;
// the broker writes the rest; store is built by a reader from the message's
// record itself (never written).
const (
	Produce      Type = "produce"       // a producer's send: result, broker, partition, offset, cost
	Store        Type = "store"         // the record: storeTime, partition, queue offset (synthesized)
	ConsumeBegin Type = "consume-begin" // a handler got the message
	ConsumeEnd   Type = "consume-end"   // the handler returned: result, cost
	Retry        Type = "retry"         // the consumer's retry policy took a failed message
	Delivered    Type = "delivered"     // broker: a delayed or retried copy was appended to its topic
	Retried      Type = "retry-stored"  // broker: a give-back was stored in %RETRY%<group>
	DeadLetter   Type = "dlq"           // broker: stored in %DLQ%<group>
	TxHalf       Type = "tx-half"       // broker: a half message was stored (invisible until committed)
	TxCheck      Type = "tx-check"      // broker: checked back with a producer of the group
	TxAnswer     Type = "tx-answer"     // broker: the producer's txend after a check, or unknown
	TxCommit     Type = "tx-commit"     // broker: a transactional message was committed (rid: the committed record)
	TxRollback   Type = "tx-rollback"   // broker: a transactional message was rolled back
	TxPut        Type = "tx-put"        // broker: a put held in a local or XA transaction (id: the provisional one)
	TxPrepare    Type = "tx-prepare"    // broker: XA PREPARE stored it in %TX_HALF% (rid: the half record)
	Push         Type = "push"          // broker: delivered to a member of a group (broker-managed delivery)
	PushAck      Type = "push-ack"      // broker: the delivery was acknowledged
	PushRelease  Type = "push-release"  // broker: the member released it (delivered again later)
	PushReject   Type = "push-reject"   // broker: the member rejected it (dead-letter queue)
)

// Event is one trace event. MsgID is the traced message — the id its
// producer was given (a delayed or retried copy's origMsgId; -1 for a send
// that failed: such an event is found by the message's keys); RecordID is
// the record the event is about when that is another one (the copy in
// %RETRY%<group> …). Times are unix milliseconds, Cost microseconds.
type Event struct {
	Type      Type   `json:"type"`
	MsgID     int64  `json:"msgId"`
	RecordID  int64  `json:"recordId,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Keys      string `json:"keys,omitempty"` // the message's keys, space separated
	Tag       string `json:"tag,omitempty"`
	Time      int64  `json:"timeMs"`           // unix ms: when the step began
	Cost      int64  `json:"costUs,omitempty"` // µs the step took (0 = not measured)
	OK        bool   `json:"ok"`
	Err       string `json:"error,omitempty"`     // why it failed
	Host      string `json:"host,omitempty"`      // client host name (the broker's address for broker events)
	Group     string `json:"group,omitempty"`     // producer or consumer group
	Client    string `json:"client,omitempty"`    // consumer id
	Broker    int    `json:"broker"`              // broker id; -1 = unknown
	Partition int    `json:"partition"`           // -1 = unknown
	Offset    int64  `json:"offset"`              // queue offset; -1 = none
	Attempt   int    `json:"attempt,omitempty"`   // 1 = first handler call of a delivery, n = n-th in-place attempt
	Reconsume int    `json:"reconsume,omitempty"` // reconsumeTimes of the record handled
	Size      int    `json:"size,omitempty"`      // body bytes
	Detail    string `json:"detail,omitempty"`    // free text (retry decision, delay level, …)
}

// Limits of a record's data and of one event line.
const (
	MaxLine   = 8 << 10
	MaxEvents = 4096
)

// A record of %TRACE% carries a batch of events in its data: one line per
// event, each a URL query string (the properties line's syntax) ended by
// '\n'. The first line of a record is a full line, for example
//
//	e=produce&id=281474976710912&t=orders&k=o-1&at=1767225600000&us=812&ok=1&h=app1&b=1&p=0&o=41&s=120
//
// Keys (fields left out when zero or empty, unknown keys ignored so that
// later versions may add some):
//
//	e   event type (required)         id  traced message id (required)
//	rid record id when not id         t   topic
//	k   message keys (space sep.)     tag message tag
//	at  unix ms                       us  cost in µs
//	ok  1 = succeeded                 err failure text
//	h   host                          g   group
//	c   client (consumer id)          b   broker id
//	p   partition                     o   queue offset
//	n   attempt                       r   reconsumeTimes
//	s   body bytes                    d   detail
//
// A later line may be a continuation line: it starts with '+' and holds
// only what differs from the event before it in the record, which it
// starts as a copy of. In a continuation line id, at and o are signed
// differences from the previous event's values; every other key is the new
// value (b=-1 and p=-1: unknown, an empty text value clears the field,
// ok=0 clears ok). A stream of one producer's sends is then about 20 bytes
// an event instead of 100:
//
//	+id=163&us=790&p=1
//
// The record's `keys` property indexes the batch (the store's key index
// finds its records by any of them, `query key %TRACE% <key>`): the bucket
// key of every event's msgId and record id (BucketKey: one key per 64 KiB
// of commit log, so a batch of consecutive messages needs one or two) and
// every business key of the messages. Readers look a message up by its
// bucket and pick its events out of the records found.

// AppendEvent appends e's line (with its '\n').
func AppendEvent(dst []byte, e *Event) []byte {
	dst = append(dst, "e="...)
	dst = protocol.AppendEscaped(dst, string(e.Type))
	dst = append(dst, "&id="...)
	dst = strconv.AppendInt(dst, e.MsgID, 10)
	if e.RecordID != 0 && e.RecordID != e.MsgID {
		dst = appendNum(dst, "&rid=", e.RecordID)
	}
	dst = appendStr(dst, "&t=", e.Topic)
	dst = appendStr(dst, "&k=", e.Keys)
	dst = appendStr(dst, "&tag=", e.Tag)
	if e.Time != 0 {
		dst = appendNum(dst, "&at=", e.Time)
	}
	if e.Cost != 0 {
		dst = appendNum(dst, "&us=", e.Cost)
	}
	if e.OK {
		dst = append(dst, "&ok=1"...)
	}
	dst = appendStr(dst, "&err=", e.Err)
	dst = appendStr(dst, "&h=", e.Host)
	dst = appendStr(dst, "&g=", e.Group)
	dst = appendStr(dst, "&c=", e.Client)
	if e.Broker >= 0 {
		dst = appendNum(dst, "&b=", int64(e.Broker))
	}
	if e.Partition >= 0 {
		dst = appendNum(dst, "&p=", int64(e.Partition))
	}
	if e.Offset >= 0 {
		dst = appendNum(dst, "&o=", e.Offset)
	}
	if e.Attempt != 0 {
		dst = appendNum(dst, "&n=", int64(e.Attempt))
	}
	if e.Reconsume != 0 {
		dst = appendNum(dst, "&r=", int64(e.Reconsume))
	}
	if e.Size != 0 {
		dst = appendNum(dst, "&s=", int64(e.Size))
	}
	dst = appendStr(dst, "&d=", e.Detail)
	return append(dst, '\n')
}

func appendNum(dst []byte, key string, v int64) []byte {
	dst = append(dst, key...)
	return strconv.AppendInt(dst, v, 10)
}

func appendStr(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, key...)
	return protocol.AppendEscaped(dst, v)
}

// appendCont appends e as a continuation line relative to prev (docs
// above), or as a full line when a difference does not fit an int64. It is
// the writer's per-event cost (a producer's stream is mostly ids, costs and
// offsets that changed): straight-line code, strings compared by pointer
// first (the events of one client share theirs).
func appendCont(dst []byte, prev, e *Event) []byte {
	did, ok1 := sub(e.MsgID, prev.MsgID)
	dat, ok2 := sub(e.Time, prev.Time)
	doff, ok3 := sub(e.Offset, prev.Offset)
	if !ok1 || !ok2 || !ok3 {
		return AppendEvent(dst, e)
	}
	dst = append(dst, '+')
	n := len(dst)
	if e.Type != prev.Type {
		dst = contStr(dst, n, "e=", string(e.Type))
	}
	if did != 0 {
		dst = contNum(dst, n, "id=", did)
	}
	if rid, was := normRID(e), normRID(prev); rid != was {
		dst = contNum(dst, n, "rid=", rid)
	}
	if !sameStr(e.Topic, prev.Topic) {
		dst = contStr(dst, n, "t=", e.Topic)
	}
	if !sameStr(e.Keys, prev.Keys) {
		dst = contStr(dst, n, "k=", e.Keys)
	}
	if !sameStr(e.Tag, prev.Tag) {
		dst = contStr(dst, n, "tag=", e.Tag)
	}
	if dat != 0 {
		dst = contNum(dst, n, "at=", dat)
	}
	if e.Cost != prev.Cost {
		dst = contNum(dst, n, "us=", e.Cost)
	}
	if e.OK != prev.OK {
		dst = contSep(dst, n)
		dst = append(dst, "ok="...)
		dst = append(dst, "01"[b2i(e.OK)])
	}
	if !sameStr(e.Err, prev.Err) {
		dst = contStr(dst, n, "err=", e.Err)
	}
	if !sameStr(e.Host, prev.Host) {
		dst = contStr(dst, n, "h=", e.Host)
	}
	if !sameStr(e.Group, prev.Group) {
		dst = contStr(dst, n, "g=", e.Group)
	}
	if !sameStr(e.Client, prev.Client) {
		dst = contStr(dst, n, "c=", e.Client)
	}
	if e.Broker != prev.Broker {
		dst = contNum(dst, n, "b=", int64(max(e.Broker, -1)))
	}
	if e.Partition != prev.Partition {
		dst = contNum(dst, n, "p=", int64(max(e.Partition, -1)))
	}
	if doff != 0 {
		dst = contNum(dst, n, "o=", doff)
	}
	if e.Attempt != prev.Attempt {
		dst = contNum(dst, n, "n=", int64(e.Attempt))
	}
	if e.Reconsume != prev.Reconsume {
		dst = contNum(dst, n, "r=", int64(e.Reconsume))
	}
	if e.Size != prev.Size {
		dst = contNum(dst, n, "s=", int64(e.Size))
	}
	if !sameStr(e.Detail, prev.Detail) {
		dst = contStr(dst, n, "d=", e.Detail)
	}
	return append(dst, '\n')
}

// sameStr is a == b, without comparing the bytes of the same string.
func sameStr(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b) || a == b
}

// contSep adds the '&' before a field of a continuation line whose fields
// start at n.
func contSep(dst []byte, n int) []byte {
	if len(dst) > n {
		dst = append(dst, '&')
	}
	return dst
}

func contStr(dst []byte, n int, key, v string) []byte {
	dst = append(contSep(dst, n), key...)
	return protocol.AppendEscaped(dst, v)
}

func contNum(dst []byte, n int, key string, v int64) []byte {
	dst = append(contSep(dst, n), key...)
	return appendInt(dst, v)
}

// appendInt is strconv.AppendInt(dst, v, 10), written in place for the
// small numbers of continuation lines (two digits per table lookup).
func appendInt(dst []byte, v int64) []byte {
	switch {
	case v < 0 || v >= 100000000:
		return strconv.AppendInt(dst, v, 10)
	case v < 10:
		return append(dst, byte('0'+v))
	case v < 100:
		return append(dst, digits2[2*v], digits2[2*v+1])
	case v < 10000:
		return append4(dst, v, false)
	}
	return append4(append4(dst, v/10000, false), v%10000, true)
}

// append4 appends v < 10000: its digits, or with pad exactly four.
func append4(dst []byte, v int64, pad bool) []byte {
	hi, lo := v/100, v%100
	switch {
	case pad || hi >= 10:
		dst = append(dst, digits2[2*hi], digits2[2*hi+1])
	case hi > 0:
		dst = append(dst, byte('0'+hi))
	}
	if !pad && hi == 0 && lo < 10 {
		return append(dst, byte('0'+lo))
	}
	return append(dst, digits2[2*lo], digits2[2*lo+1])
}

const digits2 = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" +
	"40414243444546474849" + "50515253545556575859" + "60616263646566676869" + "70717273747576777879" +
	"80818283848586878889" + "90919293949596979899"

// normRID is the record id as a reader sees it (0 = the message's own).
func normRID(e *Event) int64 {
	if e.RecordID == e.MsgID {
		return 0
	}
	return e.RecordID
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sub is a-b and whether it did not overflow.
func sub(a, b int64) (int64, bool) {
	d := a - b
	return d, (a^b)&(a^d) >= 0
}

// add is a+b and whether it did not overflow.
func add(a, b int64) (int64, bool) {
	r := a + b
	return r, (a^r)&(b^r) >= 0
}

// ErrBadRecord is wrapped by Decode's errors.
var ErrBadRecord = errors.New("bad trace record")

// Decode parses a record's data into events. Every line must be a valid
// event (type and id present, numbers in range, at most MaxLine bytes,
// MaxEvents lines; a continuation line only after another line); an empty
// record is an error.
func Decode(data []byte) ([]Event, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadRecord)
	}
	n := bytes.Count(data, []byte{'\n'})
	if data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: the last line has no newline", ErrBadRecord)
	}
	if n > MaxEvents {
		return nil, fmt.Errorf("%w: %d events, at most %d", ErrBadRecord, n, MaxEvents)
	}
	evs := make([]Event, 0, n)
	for line := 1; len(data) > 0; line++ {
		i := bytes.IndexByte(data, '\n')
		l := data[:i]
		data = data[i+1:]
		var e Event
		var prev *Event
		if len(evs) > 0 {
			prev = &evs[len(evs)-1]
		}
		if err := decodeLine(l, prev, &e); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadRecord, line, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// decodeLine decodes a full line, or a continuation line of prev.
func decodeLine(l []byte, prev, e *Event) error {
	if msg := validateLine(l, prev != nil); msg != "" {
		return errors.New(msg)
	}
	for _, c := range l {
		if c < 0x20 || c == 0x7f {
			return errors.New("control byte")
		}
	}
	cont := l[0] == '+'
	*e = Event{Broker: -1, Partition: -1, Offset: -1}
	if cont {
		*e = *prev
		l = l[1:]
	}
	var haveType, haveID bool
	for props := l; len(props) > 0; {
		var k, v []byte
		k, v, props = protocol.NextProperty(props)
		var err error
		num := func(dst *int64, lo, hi int64) {
			if err != nil {
				return
			}
			x, perr := strconv.ParseInt(string(v), 10, 64)
			if perr != nil || x < lo || x > hi {
				err = fmt.Errorf("bad %s %q", k, v)
				return
			}
			*dst = x
		}
		delta := func(dst *int64, lo, hi int64) {
			var d int64
			num(&d, -1<<63, 1<<63-1)
			if err != nil {
				return
			}
			x, ok := add(*dst, d)
			if !ok || x < lo || x > hi {
				err = fmt.Errorf("bad %s %q", k, v)
				return
			}
			*dst = x
		}
		small := func(dst *int, lo, hi int64) {
			x := int64(*dst)
			num(&x, lo, hi)
			if err == nil {
				*dst = int(x)
			}
		}
		const maxI = 1<<31 - 1
		lo := int64(0) // b and p: -1 (unknown) only in a continuation line
		if cont {
			lo = -1
		}
		switch string(k) {
		case "e":
			e.Type = Type(protocol.Unescape(v))
			haveType = e.Type != ""
		case "id":
			if cont {
				delta(&e.MsgID, -1, 1<<63-1)
			} else {
				num(&e.MsgID, -1, 1<<63-1)
			}
			haveID = true
		case "rid":
			num(&e.RecordID, 0, 1<<63-1)
		case "t":
			e.Topic = protocol.Unescape(v)
		case "k":
			e.Keys = protocol.Unescape(v)
		case "tag":
			e.Tag = protocol.Unescape(v)
		case "at":
			if cont {
				delta(&e.Time, 0, 1<<62)
			} else {
				num(&e.Time, 0, 1<<62)
			}
		case "us":
			num(&e.Cost, 0, 1<<62)
		case "ok":
			e.OK = string(v) == "1"
		case "err":
			e.Err = protocol.Unescape(v)
		case "h":
			e.Host = protocol.Unescape(v)
		case "g":
			e.Group = protocol.Unescape(v)
		case "c":
			e.Client = protocol.Unescape(v)
		case "b":
			small(&e.Broker, lo, maxI)
		case "p":
			small(&e.Partition, lo, maxI)
		case "o":
			if cont {
				delta(&e.Offset, -1, 1<<63-1)
			} else {
				num(&e.Offset, 0, 1<<63-1)
			}
		case "n":
			small(&e.Attempt, 0, maxI)
		case "r":
			small(&e.Reconsume, 0, maxI)
		case "s":
			small(&e.Size, 0, maxI)
		case "d":
			e.Detail = protocol.Unescape(v)
		}
		if err != nil {
			return err
		}
	}
	if cont {
		haveType, haveID = e.Type != "", true
	}
	if !haveType || !haveID {
		return errors.New("an event needs e= and id=")
	}
	if e.RecordID == e.MsgID {
		e.RecordID = 0 // the same record
	}
	return nil
}

// Batch builds one %TRACE% record: its events' lines and its keys
// property. The zero value is ready; Reset reuses the buffers. Adding an
// event does not allocate once the buffers have grown (except for the
// first few business keys of a batch).
type Batch struct {
	Data    []byte
	Props   []byte // "keys=<bucket> <key> …" (keys separated by raw spaces)
	N       int
	prev    Event    // the event before (continuation lines are relative to it)
	keys    []string // business keys already in Props (a handful per batch: linear search)
	buckets []int64  // buckets already in Props
}

// MaxPropsLen bounds a batch's keys property (the store's properties limit
// is 65535).
const MaxPropsLen = 60000

// BucketShift: a bucket key covers 1<<BucketShift bytes of a broker's
// commit log (msgIds are the broker id and the record's physical offset).
const BucketShift = 16

// BucketKey is the key under which the trace records holding events of
// message msgID are indexed: "~" and msgID>>BucketShift in decimal.
func BucketKey(msgID int64) string { return string(appendBucket(nil, msgID>>BucketShift)) }

func appendBucket(dst []byte, bucket int64) []byte {
	dst = append(dst, '~')
	return strconv.AppendInt(dst, bucket, 10)
}

// Full reports whether the batch should be sent before more events are
// added: maxBytes of data, MaxEvents events, or a keys property near its
// limit.
func (b *Batch) Full(maxBytes int) bool {
	return b.N >= MaxEvents || len(b.Data) >= maxBytes || len(b.Props) >= MaxPropsLen-2*MaxLine
}

// Add appends e (a continuation line after the first event) and indexes
// its buckets and keys.
func (b *Batch) Add(e *Event) {
	if b.N == 0 {
		b.Data = AppendEvent(b.Data, e)
	} else {
		b.Data = appendCont(b.Data, &b.prev, e)
	}
	b.N++
	b.prev = *e
	if e.MsgID >= 0 {
		b.addBucket(e.MsgID >> BucketShift)
	}
	if e.RecordID > 0 && e.RecordID != e.MsgID {
		b.addBucket(e.RecordID >> BucketShift)
	}
	if e.Keys == "" {
		return
	}
	for k := range strings.FieldsSeq(e.Keys) {
		if len(k) > 255 || slices.Contains(b.keys, k) {
			continue
		}
		if len(b.keys) < 64 {
			b.keys = append(b.keys, k)
		}
		b.Props = b.keySep()
		b.Props = protocol.AppendEscaped(b.Props, k)
	}
}

// Last is the event added last — a continuation line starts from a copy of
// it — or nil when the batch is empty. It must not be changed.
func (b *Batch) Last() *Event {
	if b.N == 0 {
		return nil
	}
	return &b.prev
}

// AddMoved adds the event that is Last with other MsgID, Time, Cost,
// Partition and Offset — a producer's next send, the common case — without
// building it: the same line Add would write, at a fraction of its cost.
// It reports false, adding nothing, when the batch is empty, Last is about
// another record (RecordID), msgID is negative, or a difference does not
// fit a continuation line: use Add then.
func (b *Batch) AddMoved(msgID, at, cost int64, partition int, offset int64) bool {
	p := &b.prev
	if b.N == 0 || p.RecordID != 0 || msgID < 0 || partition < -1 {
		return false
	}
	did, ok1 := sub(msgID, p.MsgID)
	dat, ok2 := sub(at, p.Time)
	doff, ok3 := sub(offset, p.Offset)
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	d := append(slices.Grow(b.Data, 5*24+2), '+') // five fields of at most 24 bytes: one growth check
	n := len(d)
	if did != 0 {
		d = contNum(d, n, "id=", did)
	}
	if dat != 0 {
		d = contNum(d, n, "at=", dat)
	}
	if cost != p.Cost {
		d = contNum(d, n, "us=", cost)
	}
	if partition != p.Partition {
		d = contNum(d, n, "p=", int64(partition))
	}
	if doff != 0 {
		d = contNum(d, n, "o=", doff)
	}
	b.Data = append(d, '\n')
	p.MsgID, p.Time, p.Cost, p.Partition, p.Offset = msgID, at, cost, partition, offset
	b.N++
	b.addBucket(msgID >> BucketShift)
	return true
}

// addBucket adds a bucket key unless it is among the last ones added (a
// repeat further back only costs a duplicate key).
func (b *Batch) addBucket(k int64) {
	if n := len(b.buckets); n > 0 && b.buckets[n-1] == k { // the common case: the same as the event before
		return
	}
	if slices.Contains(b.buckets[max(0, len(b.buckets)-8):], k) {
		return
	}
	b.buckets = append(b.buckets, k)
	b.Props = appendBucket(b.keySep(), k)
}

func (b *Batch) keySep() []byte {
	if len(b.Props) == 0 {
		return append(b.Props, "keys="...)
	}
	return append(b.Props, ' ') // a raw space: the key index splits plain values without unescaping
}

// Reset empties the batch, keeping its buffers.
func (b *Batch) Reset() {
	b.Data, b.Props, b.N = b.Data[:0], b.Props[:0], 0
	clear(b.keys)
	b.keys, b.buckets = b.keys[:0], b.buckets[:0]
	b.prev = Event{}
}

// typeOrder breaks ties between events of the same millisecond: the order
// a message's life goes through.
var typeOrder = map[Type]int{Produce: 0, TxPut: 0, Store: 1, TxHalf: 2, TxPrepare: 2, TxCheck: 3, TxAnswer: 4, TxCommit: 5, TxRollback: 5,
	Delivered: 6, Retried: 6, Push: 7, ConsumeBegin: 8, ConsumeEnd: 9, Retry: 10, PushAck: 11, PushRelease: 11,
	PushReject: 11, DeadLetter: 12}

// Sort orders a message's events in time order. Ties (the same
// millisecond) go in the order of a message's life: the events of the
// message's own record before those of its copies (a retry's, a delayed
// delivery's: their ids grow with the log), and for one record produce,
// store, broker events, consume-begin, consume-end, retry. Equal events
// keep their order.
func Sort(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		switch {
		case a.Time != b.Time:
			return cmpInt(a.Time, b.Time)
		case a.RecordID != b.RecordID:
			return cmpInt(a.RecordID, b.RecordID) // 0 (the message's own record) first
		}
		return typeOrder[a.Type] - typeOrder[b.Type]
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Select returns the events of evs about message msgID (its id or,
// msgID < 0, any), de-duplicated (a record read twice through two keys).
func Select(evs []Event, msgID int64) []Event {
	var out []Event
	for _, e := range evs {
		if msgID >= 0 && e.MsgID != msgID {
			continue
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// Validate checks the framing of a record's data without allocating and
// without parsing every field (the broker checks every client batch before
// storing it; readers decode with Decode and skip what does not decode):
// lines end in '\n', are at most MaxLine bytes and MaxEvents in number,
// contain no '\r', and start with "e=<type>&id=<digits>" — or, after the
// first line, with '+' (a continuation line). Other control bytes make
// Decode reject the record when it is read.
func Validate(data []byte) error {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return fmt.Errorf("%w: empty, or the last line has no newline", ErrBadRecord)
	}
	if bytes.IndexByte(data, '\r') >= 0 {
		return fmt.Errorf("%w: control byte", ErrBadRecord)
	}
	n := 0
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		l := data[:i]
		data = data[i+1:]
		if n++; n > MaxEvents {
			return fmt.Errorf("%w: more than %d events", ErrBadRecord, MaxEvents)
		}
		if msg := validateLine(l, n > 1); msg != "" {
			return fmt.Errorf("%w: line %d: %s", ErrBadRecord, n, msg)
		}
	}
	return nil
}

// validateLine checks one line's framing; cont: a continuation line may
// stand here.
func validateLine(l []byte, cont bool) string {
	if len(l) > MaxLine {
		return "line too long"
	}
	if len(l) > 0 && l[0] == '+' {
		if !cont {
			return "a continuation line (+) must follow another line"
		}
		return ""
	}
	if !bytes.HasPrefix(l, []byte("e=")) {
		return "an event starts with e=<type>"
	}
	amp := bytes.IndexByte(l, '&')
	if amp < 3 || !bytes.HasPrefix(l[amp:], []byte("&id=")) {
		return "an event starts with e=<type>&id=<msgId>"
	}
	id := l[amp+4:]
	if j := bytes.IndexByte(id, '&'); j >= 0 {
		id = id[:j]
	}
	if !digits(id, 19) && string(id) != "-1" {
		return "bad id"
	}
	return ""
}

// digits reports whether v is 1..max decimal digits (19 digits must still
// fit an int64).
func digits(v []byte, max int) bool {
	if len(v) == 0 || len(v) > max {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(v) < 19 || string(v) <= "9223372036854775807"
}

// Timeline is a message's trace: the events about msgID in the trace
// records' data, plus its store event when the record was found, in time
// order. Records that do not decode are skipped (counted in bad).
func Timeline(msgID int64, store *Event, records [][]byte) (evs []Event, bad int) {
	for _, data := range records {
		d, err := Decode(data)
		if err != nil {
			bad++
			continue
		}
		evs = append(evs, Select(d, msgID)...)
	}
	evs = Select(evs, -1)
	if store != nil {
		evs = append(evs, *store)
	}
	Sort(evs)
	return evs, bad
}
