package client

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Message is a message to send or a message received.
//
// Producers fill Topic, Body and optionally Tag, Keys, ShardKey, Attribute,
// Properties, DelayLevel and Flag; a message and its Body must not be changed
// until Send returns or SendAsync's callback ran. Consumers get every field
// filled in; a received Message and its Body stay valid after the handler
// returns (they are not reused).
type Message struct {
	Topic string
	Body  []byte
	// Tag is the message's tag: consumers subscribe to tags (`a||b`), the
	// broker filters on it. Sent as the `tag` property.
	Tag string
	// Keys are business keys (order ids …) the broker indexes for
	// `query key`; they must not contain spaces. Sent as the `keys` property.
	// HashByKey orders by Keys[0] unless ShardKey is set.
	Keys []string
	// ShardKey, when set, is the key HashByKey hashes (producer only; not
	// sent).
	ShardKey string
	// Attribute is MetaQ's message attribute (flag bit 0: the data starts
	// with its 4-byte length); "" sends none.
	Attribute string
	// Properties are extra properties sent in the properties line (a URL
	// query string). The well-known keys tag, keys and delay are taken from
	// the fields above when those are set.
	Properties map[string]string
	// DelayLevel asks for delayed delivery through the broker's delay
	// levels (`delay` property; RocketMQ's ladder 1s 5s 10s 30s 1m …, see
	// docs/delay.md). Ignored when DeliverAt is set.
	DelayLevel int
	// DeliverAt asks for delivery at an absolute time, up to a year ahead
	// (`deliverAt` property, unix ms); a past time delivers at once. On a
	// received message: when it fell due (zero when it was not delayed).
	DeliverAt time.Time
	// Flag is MetaQ's user flag; bits 0 (attribute) and 1 (properties) are
	// managed by the client.
	Flag int32

	// Filled in on received messages.
	MsgID          int64     // brokerId<<48 | physical offset: unique in the cluster
	Partition      Partition // broker id and partition
	Offset         int64     // queue offset in the partition
	StoreTime      time.Time // when the broker stored it
	BornTime       time.Time // when the producer sent it (the store time when unknown)
	ReconsumeTimes int       // how often it came back through the retry topic
	// Attempt is the delivery attempt: for a PushConsumer the broker's (1 on
	// the first delivery to the group, 2 on the next, …); for a Consumer the
	// handler call of this delivery (1, then 2, … while the retry policy
	// retries it in place, as an orderly consumer does; a message given back
	// through the retry topic starts again at 1, ReconsumeTimes counting
	// those).
	Attempt int
	SysFlag uint16 // protocol.SysFlag*

	givenBack uint8 // set by the retry policy's give-back (retry_broker.go) for hooks
}

// Message.givenBack values.
const (
	givenBackRetry = 1 + iota
	givenBackDLQ
)

func (m *Message) String() string {
	return fmt.Sprintf("%s %s@%d id=%d tag=%q %d bytes", m.Topic, m.Partition, m.Offset, m.MsgID, m.Tag, len(m.Body))
}

// SendResult is what the broker answered to a put.
type SendResult struct {
	MsgID     int64     // brokerId<<48 | physical offset
	Partition Partition // where the message went
	Offset    int64     // its queue offset in the partition
}

// validate checks what the broker would reject, before anything is sent.
func (m *Message) validate(maxSize int) error {
	if m == nil {
		return errors.New("metaq client: nil message")
	}
	if !protocol.ValidName(m.Topic) {
		return fmt.Errorf("%w: topic %q", zkmeta.ErrBadName, m.Topic)
	}
	return m.validateBody(maxSize)
}

// validateBody is validate without the topic's name (a batch checks it
// once).
func (m *Message) validateBody(maxSize int) error {
	for _, k := range m.Keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("metaq client: message key %q is empty or contains white space", k)
		}
	}
	if n := m.dataLenWithoutProps(); n > maxSize {
		return fmt.Errorf("metaq client: message of %d bytes exceeds MaxMessageSize %d", n, maxSize)
	}
	return nil
}

func (m *Message) dataLenWithoutProps() int {
	n := len(m.Body)
	if m.Attribute != "" {
		n += 4 + len(m.Attribute)
	}
	return n
}

// hasProps reports whether m has a properties line (appendProps writes
// something).
func hasProps(m *Message) bool {
	return m.Tag != "" || len(m.Keys) > 0 || m.DelayLevel > 0 || !m.DeliverAt.IsZero() || len(m.Properties) > 0
}

// appendProps appends the properties line (without its '\n') to dst.
func appendProps(dst []byte, m *Message) []byte {
	start := len(dst)
	sep := func(dst []byte) []byte {
		if len(dst) > start {
			dst = append(dst, '&')
		}
		return dst
	}
	if m.Tag != "" {
		dst = append(dst, "tag="...)
		dst = protocol.AppendEscaped(dst, m.Tag)
	}
	if len(m.Keys) > 0 {
		dst = sep(dst)
		dst = append(dst, "keys="...)
		for i, k := range m.Keys {
			if i > 0 {
				dst = append(dst, "%20"...)
			}
			dst = protocol.AppendEscaped(dst, k)
		}
	}
	switch {
	case !m.DeliverAt.IsZero():
		dst = sep(dst)
		dst = append(dst, "deliverAt="...)
		dst = strconv.AppendInt(dst, m.DeliverAt.UnixMilli(), 10)
	case m.DelayLevel > 0:
		dst = sep(dst)
		dst = append(dst, "delay="...)
		dst = strconv.AppendInt(dst, int64(m.DelayLevel), 10)
	}
	for k, v := range m.Properties {
		switch {
		case k == "":
			continue
		case k == protocol.PropTag && m.Tag != "",
			k == protocol.PropKeys && len(m.Keys) > 0,
			k == protocol.PropDelay && (m.DelayLevel > 0 || !m.DeliverAt.IsZero()),
			k == propDeliverAt && !m.DeliverAt.IsZero():
			continue
		}
		dst = sep(dst)
		dst = protocol.AppendEscaped(dst, k)
		dst = append(dst, '=')
		dst = protocol.AppendEscaped(dst, v)
	}
	return dst
}

// messageData is msg's put data block, its properties line props (see
// appendProps); the flag bits for properties and attribute are set by
// protocol.MessageData.
func messageData(m *Message, props []byte) protocol.MessageData {
	return protocol.MessageData{Flag: m.Flag, Props: props, Attr: m.Attribute, HasAttr: m.Attribute != "", Payload: m.Body}
}

// decoder turns records into Messages, caching tag strings (a partition's
// messages usually carry a handful of tags).
type decoder struct {
	topic    string
	brokerID int
	tags     map[string]string
	keys     map[string]string // property keys (key)
	where    *whereMatcher     // the last get's filter expression (sql.go)
}

// decode fills m from r. Body and Attribute alias r.Data (a buffer that is
// never reused).
func (d *decoder) decode(m *Message, r *protocol.Record) {
	m.Topic = d.topic
	if m.Topic == "" || m.Topic != string(r.Topic) {
		m.Topic = string(r.Topic)
	}
	m.MsgID = r.MsgID
	bid := d.brokerID
	if bid < 0 {
		bid, _ = protocol.SplitMsgID(r.MsgID)
	}
	m.Partition = Partition{BrokerID: bid, Partition: int(r.Partition)}
	m.Offset = r.QueueOffset
	m.StoreTime = time.UnixMilli(r.StoreTime)
	m.BornTime = time.UnixMilli(r.BornTime)
	m.ReconsumeTimes = int(r.ReconsumeTimes)
	m.SysFlag = r.SysFlag
	m.Flag = r.Flag
	m.Body = r.Data
	if r.Flag&protocol.FlagHasAttribute != 0 {
		if attr, payload, err := protocol.AttributeOf(r.Flag, r.Data); err == nil {
			m.Attribute = string(attr)
			m.Body = payload
		}
	}
	if len(r.Properties) > 0 {
		d.decodeProps(m, r.Properties)
	}
}

func (d *decoder) decodeProps(m *Message, props []byte) {
	for len(props) > 0 {
		var k, v []byte
		k, v, props = protocol.NextProperty(props)
		switch string(k) {
		case protocol.PropTag:
			m.Tag = d.tag(v)
		case protocol.PropKeys:
			m.Keys = strings.Fields(protocol.Unescape(v))
		case protocol.PropDelay:
			m.DelayLevel, _ = strconv.Atoi(protocol.Unescape(v))
		case propDeliverAt:
			if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				m.DeliverAt = time.UnixMilli(ms)
			}
		case "":
		default:
			if m.Properties == nil {
				m.Properties = make(map[string]string, 2)
			}
			m.Properties[d.key(k)] = blockString(v)
		}
	}
}

// key returns a property key as a string, cached like tags (a
// partition's messages usually carry the same few keys).
func (d *decoder) key(raw []byte) string { return unescapeCached(&d.keys, raw) }

func (d *decoder) tag(raw []byte) string { return unescapeCached(&d.tags, raw) }

// unescapeCached is protocol.Unescape(raw) through the cache *m (a new
// string only for a value not seen yet); the cache starts over once it
// holds 256 values.
func unescapeCached(m *map[string]string, raw []byte) string {
	if s, ok := (*m)[string(raw)]; ok {
		return s
	}
	s := protocol.Unescape(raw)
	if *m == nil || len(*m) >= 256 {
		*m = make(map[string]string)
	}
	(*m)[string(raw)] = s
	return s
}

// blockString is a property value as a string: without escapes, a view of
// the fetched block (which is never reused or changed, like the Body that
// aliases it), so decoding it allocates nothing; unescaped otherwise.
func blockString(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if bytes.IndexByte(v, '%') < 0 && bytes.IndexByte(v, '+') < 0 {
		return unsafe.String(&v[0], len(v))
	}
	return protocol.Unescape(v)
}

// decodeBlock decodes a value block into messages (one allocation for the
// Message structs). Records are verified (CRC); a bad one ends the block
// with an error after the good ones before it.
func (d *decoder) decodeBlock(block []byte) ([]Message, error) {
	msgs, _, err := d.decodeBlockWhere(block, nil)
	return msgs, err
}

// decodeBlockWhere is decodeBlock keeping only the records the expression
// of w selects (all when w is nil); it is evaluated on the encoded record,
// so a message filtered out is never decoded. next is the offset after the
// last record of the block, kept or not (-1 when there is none).
func (d *decoder) decodeBlockWhere(block []byte, w *whereMatcher) (msgs []Message, next int64, err error) {
	// Count what will be kept (the expression, when there is one, is cheap
	// next to decoding), so that msgs is allocated once at its size.
	n := 0
	for b := block; len(b) >= protocol.BlankMinSize; {
		size, _, _ := protocol.PeekRecord(b)
		if size < protocol.BlankMinSize || size > len(b) {
			break
		}
		if w == nil || w.expr.MatchRecord(b[:size]) {
			n++
		}
		b = b[size:]
	}
	msgs = make([]Message, 0, n)
	next = -1
	it := protocol.NewRecordIterator(block)
	for it.Next() {
		r := it.Record()
		next = r.QueueOffset + 1
		if w != nil && !w.matchRecord(r) {
			continue
		}
		if len(msgs) < cap(msgs) {
			msgs = msgs[:len(msgs)+1] // already zero: no copy of an empty Message (and its write barriers)
		} else {
			msgs = append(msgs, Message{})
		}
		d.decode(&msgs[len(msgs)-1], r)
	}
	return msgs, next, it.Err()
}
