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
	TxCommit     Type = "tx-commit"     // broker: a transactional message was committed
	TxRollback   Type = "tx-rollback"   // broker: a transactional message was rolled back
	Push         Type = "push"          // broker: pushed to a consumer (broker-managed delivery)
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
// '\n', for example
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
// The record's `keys` property holds every event's msgId (decimal) and the
// message keys, so the store's key index finds the records of a message by
// its id or by its keys (`query key %TRACE% <msgId>`).

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

// ErrBadRecord is wrapped by Decode's errors.
var ErrBadRecord = errors.New("bad trace record")

// Decode parses a record's data into events. Every line must be a valid
// event (type and id present, numbers in range, at most MaxLine bytes,
// MaxEvents lines); an empty record is an error.
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
		if err := decodeLine(l, &e); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadRecord, line, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func decodeLine(l []byte, e *Event) error {
	if msg := validateLine(l); msg != "" {
		return errors.New(msg)
	}
	for _, c := range l {
		if c < 0x20 || c == 0x7f {
			return errors.New("control byte")
		}
	}
	*e = Event{Broker: -1, Partition: -1, Offset: -1}
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
		small := func(dst *int, lo, hi int64) {
			var x int64
			num(&x, lo, hi)
			if err == nil {
				*dst = int(x)
			}
		}
		const maxI = 1<<31 - 1
		switch string(k) {
		case "e":
			e.Type = Type(protocol.Unescape(v))
			haveType = e.Type != ""
		case "id":
			num(&e.MsgID, -1, 1<<63-1)
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
			num(&e.Time, 0, 1<<62)
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
			small(&e.Broker, 0, maxI)
		case "p":
			small(&e.Partition, 0, maxI)
		case "o":
			num(&e.Offset, 0, 1<<63-1)
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
	if !haveType || !haveID {
		return errors.New("an event needs e= and id=")
	}
	if e.RecordID == e.MsgID {
		e.RecordID = 0 // the same record
	}
	return nil
}

// Batch builds one %TRACE% record: its events' lines and its keys
// property. The zero value is ready; Reset reuses the buffers.
type Batch struct {
	Data  []byte
	Props []byte // "keys=<id> <key> …" (keys separated by raw spaces)
	N     int
	keys  []string // keys already in Props (a handful per batch: linear search)
	ids   []int64
}

// MaxPropsLen bounds a batch's keys property (the store's properties limit
// is 65535).
const MaxPropsLen = 60000

// Full reports whether the batch should be sent before more events are
// added: maxBytes of data, MaxEvents events, or a keys property near its
// limit.
func (b *Batch) Full(maxBytes int) bool {
	return b.N >= MaxEvents || len(b.Data) >= maxBytes || len(b.Props) >= MaxPropsLen-2*MaxLine
}

// Add appends e and indexes its id and keys. An id already among the
// last few added is not repeated (a handler call's begin, end and retry
// events sit together); a repeat further back only costs a duplicate key.
func (b *Batch) Add(e *Event) {
	b.Data = AppendEvent(b.Data, e)
	b.N++
	if e.MsgID >= 0 && !slices.Contains(b.ids[max(0, len(b.ids)-4):], e.MsgID) {
		b.ids = append(b.ids, e.MsgID)
		b.Props = b.keySep()
		b.Props = strconv.AppendInt(b.Props, e.MsgID, 10)
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

func (b *Batch) keySep() []byte {
	if len(b.Props) == 0 {
		return append(b.Props, "keys="...)
	}
	return append(b.Props, ' ') // a raw space: the key index splits plain values without unescaping
}

// Reset empties the batch, keeping its buffers.
func (b *Batch) Reset() {
	b.Data, b.Props, b.N = b.Data[:0], b.Props[:0], 0
	b.keys, b.ids = b.keys[:0], b.ids[:0]
}

// typeOrder breaks ties between events of the same millisecond: the order
// a message's life goes through.
var typeOrder = map[Type]int{Produce: 0, TxCommit: 1, TxRollback: 1, Store: 2, Delivered: 3, Retried: 3,
	DeadLetter: 3, Push: 4, ConsumeBegin: 5, ConsumeEnd: 6, Retry: 7}

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
// contain no '\r', and start with "e=<type>&id=<digits>" (other control
// bytes make Decode reject the record when it is read).
func Validate(data []byte) error {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return fmt.Errorf("%w: empty, or the last line has no newline", ErrBadRecord)
	}
	n := 0
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		l := data[:i]
		data = data[i+1:]
		if n++; n > MaxEvents {
			return fmt.Errorf("%w: more than %d events", ErrBadRecord, MaxEvents)
		}
		if msg := validateLine(l); msg != "" {
			return fmt.Errorf("%w: line %d: %s", ErrBadRecord, n, msg)
		}
	}
	return nil
}

func validateLine(l []byte) string {
	if len(l) > MaxLine {
		return "line too long"
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
	if bytes.IndexByte(l, '\r') >= 0 {
		return "control byte"
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

// StoreEvent is the store event of a message, read from its record
// (brokerID: the broker holding it). A record that is a copy (delayed or
// retried) reports its origMsgId as the traced id.
func StoreEvent(r *protocol.Record, brokerID int) Event {
	e := Event{Type: Store, MsgID: r.MsgID, Topic: string(r.Topic), Time: r.StoreTime, OK: true,
		Broker: brokerID, Partition: int(r.Partition), Offset: r.QueueOffset, Reconsume: int(r.ReconsumeTimes),
		Keys: strings.Join(protocol.Keys(r.Properties), " "), Tag: protocol.Property(r.Properties, protocol.PropTag)}
	if n := len(r.Data); n > 0 {
		e.Size = n
	}
	if r.BornTime != 0 && r.BornTime != r.StoreTime {
		e.Detail = "born " + strconv.FormatInt(r.StoreTime-r.BornTime, 10) + " ms before"
	}
	if r.Topic != nil && string(r.Topic) == "%SCHEDULE%" {
		e.Detail = strings.TrimSpace(e.Detail + " scheduled for " + protocol.Property(r.Properties, "realTopic"))
		e.Offset = -1
	}
	return e
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
