package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/protocol"
)

// The JSON frames of the WebSocket delivery endpoint (docs/http.md,
// "WebSocket protocol"). Every frame is one JSON object in one text
// message.
//
// Client → server (decodeClientFrame; at most maxClientFrame bytes):
//
//	{"op":"ack","handle":"h"}                       or "handles":["h1","h2",…] (≤ maxFrameHandles)
//	{"op":"release","handle":"h","delayMs":1000}   redeliver after delayMs (0 = at once)
//	{"op":"reject","handle":"h"}                   to %DLQ%<group> at once
//	{"op":"extend","handle":"h","invisibleMs":60000}
//	optional "id": a string or number, echoed in the replies to this frame
//
// Server → client:
//
//	{"type":"subscribed",…}  once, first: the subscription as understood
//	{"type":"message",…}     one delivery (wsMessage)
//	{"type":"done","id":…,"ok":n,"failed":m}   after a frame with an id
//	{"type":"error","id":…,"op":…,"handle":…,"code":404,"error":"…"}

const (
	maxClientFrame  = 64 << 10 // bytes of one client frame
	maxFrameHandles = 1024     // handles of one client frame
	maxHandleLen    = 512
	maxFrameID      = 64 // bytes of the raw JSON of "id"
	maxReleaseDelay = 24 * time.Hour
)

// wsOp is one operation of a client frame.
type wsOp uint8

const (
	opAck wsOp = iota + 1
	opRelease
	opReject
	opExtend
)

func (o wsOp) String() string {
	switch o {
	case opAck:
		return "ack"
	case opRelease:
		return "release"
	case opReject:
		return "reject"
	case opExtend:
		return "extend"
	}
	return "?"
}

// clientFrame is a decoded client frame.
type clientFrame struct {
	op      wsOp
	id      json.RawMessage // nil: none
	handles []string
	delay   time.Duration // release
	inv     time.Duration // extend
}

// rawClientFrame is the JSON shape of a client frame.
type rawClientFrame struct {
	Op          string          `json:"op"`
	ID          json.RawMessage `json:"id"`
	Handle      *string         `json:"handle"`
	Handles     []string        `json:"handles"`
	DelayMs     *int64          `json:"delayMs"`
	InvisibleMs *int64          `json:"invisibleMs"`
}

// frameError is a client frame that cannot be carried out; id is echoed
// when the frame's id could be read.
type frameError struct {
	id  json.RawMessage
	msg string
}

func (e *frameError) Error() string { return e.msg }

// decodeClientFrame decodes and checks one client frame. Unknown fields,
// a missing or unknown op, missing or oversized handles and out-of-range
// times are errors (*frameError).
func decodeClientFrame(data []byte) (clientFrame, error) {
	var f clientFrame
	if len(data) > maxClientFrame {
		return f, &frameError{msg: fmt.Sprintf("frame of %d bytes exceeds %d", len(data), maxClientFrame)}
	}
	var raw rawClientFrame
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return f, &frameError{msg: "bad frame: " + err.Error()}
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return f, &frameError{msg: "bad frame: one JSON object per message"}
	}
	if len(raw.ID) > 0 {
		id := bytes.TrimSpace(raw.ID)
		ok := len(id) <= maxFrameID && len(id) > 0 && (id[0] == '"' || id[0] == '-' || id[0] >= '0' && id[0] <= '9')
		if !ok {
			return f, &frameError{msg: fmt.Sprintf("bad id: a string or number of at most %d bytes", maxFrameID)}
		}
		f.id = id
	}
	fail := func(format string, args ...any) (clientFrame, error) {
		return clientFrame{}, &frameError{id: f.id, msg: fmt.Sprintf(format, args...)}
	}
	switch raw.Op {
	case "ack":
		f.op = opAck
	case "release":
		f.op = opRelease
	case "reject":
		f.op = opReject
	case "extend":
		f.op = opExtend
	case "":
		return fail(`bad frame: "op" is missing (ack, release, reject or extend)`)
	default:
		return fail("bad frame: unknown op %q (ack, release, reject or extend)", raw.Op)
	}
	switch {
	case raw.Handle != nil && raw.Handles != nil:
		return fail(`give "handle" or "handles", not both`)
	case raw.Handle != nil:
		f.handles = []string{*raw.Handle}
	case len(raw.Handles) > 0:
		f.handles = raw.Handles
	default:
		return fail(`%s needs "handle" or "handles"`, raw.Op)
	}
	if len(f.handles) > maxFrameHandles {
		return fail("%d handles in one frame: at most %d", len(f.handles), maxFrameHandles)
	}
	for _, h := range f.handles {
		if h == "" || len(h) > maxHandleLen {
			return fail("bad handle: empty or longer than %d bytes", maxHandleLen)
		}
	}
	if raw.DelayMs != nil && f.op != opRelease {
		return fail(`"delayMs" belongs to release`)
	}
	if raw.InvisibleMs != nil && f.op != opExtend {
		return fail(`"invisibleMs" belongs to extend`)
	}
	switch f.op {
	case opRelease:
		if raw.DelayMs != nil {
			d := *raw.DelayMs
			if d < 0 || d > maxReleaseDelay.Milliseconds() {
				return fail("bad delayMs %d: 0 … %d", d, maxReleaseDelay.Milliseconds())
			}
			f.delay = time.Duration(d) * time.Millisecond
		}
	case opExtend:
		if raw.InvisibleMs == nil {
			return fail(`extend needs "invisibleMs"`)
		}
		d := *raw.InvisibleMs
		if d < pop.MinInvisible.Milliseconds() || d > pop.MaxInvisible.Milliseconds() {
			return fail("bad invisibleMs %d: %d … %d", d, pop.MinInvisible.Milliseconds(), pop.MaxInvisible.Milliseconds())
		}
		f.inv = time.Duration(d) * time.Millisecond
	}
	return f, nil
}

// bodyEncoding is how message bodies travel in message frames.
type bodyEncoding uint8

const (
	encText   bodyEncoding = iota // UTF-8 text; a body that is not valid UTF-8 goes as base64
	encBase64                     // always base64 (standard, padded)
)

func (e bodyEncoding) String() string {
	if e == encBase64 {
		return "base64"
	}
	return "text"
}

// wsMessage is a message frame.
type wsMessage struct {
	Type       string            `json:"type"` // "message"
	Handle     string            `json:"handle"`
	MsgID      string            `json:"msgId"` // decimal string: msgIds exceed JavaScript's exact integers
	Topic      string            `json:"topic"`
	Partition  int32             `json:"partition"`
	Offset     int64             `json:"offset"`
	Attempt    int               `json:"attempt"`
	Tag        string            `json:"tag,omitempty"`
	Keys       []string          `json:"keys,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Flag       int32             `json:"flag"`
	BornTime   int64             `json:"bornTime"`  // unix ms
	StoreTime  int64             `json:"storeTime"` // unix ms
	Encoding   string            `json:"encoding"`  // of body and attribute: "text" or "base64"
	Attribute  *string           `json:"attribute,omitempty"`
	Body       string            `json:"body"`
}

// Well-known properties that get fields of their own.
var framedProps = map[string]bool{protocol.PropTag: true, protocol.PropKeys: true}

// encodeDelivery renders d as a message frame appended to dst.
func encodeDelivery(dst []byte, d *pop.Delivery, enc bodyEncoding) ([]byte, error) {
	rec, _, err := protocol.DecodeRecord(d.Record, 0)
	if err != nil {
		return dst, fmt.Errorf("delivery %s: %w", d.Handle, err)
	}
	m := wsMessage{Type: "message", Handle: d.Handle, MsgID: strconv.FormatInt(d.MsgID, 10), Topic: d.Topic,
		Partition: d.Partition, Offset: d.QueueOffset, Attempt: d.Attempt, Flag: rec.Flag,
		BornTime: rec.BornTime, StoreTime: rec.StoreTime}
	for props := rec.Properties; len(props) > 0; {
		var k, v []byte
		k, v, props = protocol.NextProperty(props)
		switch name := string(k); {
		case name == protocol.PropTag:
			m.Tag = protocol.Unescape(v)
		case name == protocol.PropKeys:
			m.Keys = strings.Fields(protocol.Unescape(v))
		case name == "" || framedProps[name]:
		default:
			if m.Properties == nil {
				m.Properties = make(map[string]string, 2)
			}
			m.Properties[protocol.Unescape(k)] = protocol.Unescape(v)
		}
	}
	body := rec.Data
	var attr []byte
	hasAttr := false
	if rec.Flag&protocol.FlagHasAttribute != 0 {
		if a, p, err := protocol.AttributeOf(rec.Flag, rec.Data); err == nil {
			attr, body, hasAttr = a, p, true
		}
	}
	if enc == encText && utf8.Valid(body) && utf8.Valid(attr) {
		m.Encoding, m.Body = "text", string(body)
		if hasAttr {
			a := string(attr)
			m.Attribute = &a
		}
	} else {
		m.Encoding, m.Body = "base64", base64.StdEncoding.EncodeToString(body)
		if hasAttr {
			a := base64.StdEncoding.EncodeToString(attr)
			m.Attribute = &a
		}
	}
	b, err := json.Marshal(&m)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// wsSubscribed is the first frame: the subscription as the server understood it.
type wsSubscribed struct {
	Type        string `json:"type"` // "subscribed"
	Group       string `json:"group"`
	Topic       string `json:"topic"`
	Max         int    `json:"max"`
	InvisibleMs int64  `json:"invisibleMs"`
	Tags        string `json:"tags,omitempty"`
	Where       string `json:"where,omitempty"`
	Encoding    string `json:"encoding"`
}

// wsDone answers a frame that carried an id.
type wsDone struct {
	Type   string          `json:"type"` // "done"
	ID     json.RawMessage `json:"id"`
	Op     string          `json:"op"`
	OK     int             `json:"ok"`
	Failed int             `json:"failed"`
}

// wsError reports a failed operation or a bad frame.
type wsError struct {
	Type   string          `json:"type"` // "error"
	ID     json.RawMessage `json:"id,omitempty"`
	Op     string          `json:"op,omitempty"`
	Handle string          `json:"handle,omitempty"`
	Code   int             `json:"code"` // 400 bad frame or handle, 404 stale handle, 503 unavailable, 500
	Error  string          `json:"error"`
}

// popErrorCode maps the delivery service's errors to the codes of error frames.
func popErrorCode(err error) int {
	switch {
	case errors.Is(err, pop.ErrBadHandle), errors.Is(err, pop.ErrBadRequest):
		return 400
	case errors.Is(err, pop.ErrStale), errors.Is(err, pop.ErrUnknownTopic):
		return 404
	case errors.Is(err, pop.ErrClosed), errors.Is(err, pop.ErrTooManyGroups):
		return 503
	}
	return 500
}
