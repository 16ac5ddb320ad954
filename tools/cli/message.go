package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/metaqgo/metaq/protocol"
)

// message is a decoded record, owning its bytes.
type message struct {
	MsgID          int64
	Topic          string
	BrokerID       int
	Partition      int
	Offset         int64
	PhysicalOffset int64
	StoreTime      int64 // unix ms
	BornTime       int64 // unix ms
	Flag           int32
	SysFlag        uint16
	ReconsumeTimes uint16
	Properties     string
	Tag            string
	Keys           []string
	Attribute      []byte
	HasAttribute   bool
	Body           []byte // payload (attribute split off)
}

func decodeMessages(block []byte) ([]message, error) {
	var out []message
	it := protocol.NewRecordIterator(block)
	for it.Next() {
		r := it.Record()
		m := message{
			MsgID:          r.MsgID,
			Topic:          string(r.Topic),
			Partition:      int(r.Partition),
			Offset:         r.QueueOffset,
			PhysicalOffset: r.PhysicalOffset,
			StoreTime:      r.StoreTime,
			BornTime:       r.BornTime,
			Flag:           r.Flag,
			SysFlag:        r.SysFlag,
			ReconsumeTimes: r.ReconsumeTimes,
			Properties:     string(r.Properties),
			Tag:            protocol.Property(r.Properties, protocol.PropTag),
			Keys:           protocol.Keys(r.Properties),
		}
		m.BrokerID, _ = protocol.SplitMsgID(r.MsgID)
		attr, payload, err := protocol.AttributeOf(r.Flag, r.Data)
		if err != nil {
			payload = r.Data // not MetaQ's attribute framing after all: show the data as is
		} else if r.Flag&protocol.FlagHasAttribute != 0 {
			m.HasAttribute = true
			m.Attribute = append([]byte{}, attr...)
		}
		m.Body = append([]byte{}, payload...)
		out = append(out, m)
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("decoding records: %w", err)
	}
	return out, nil
}

// messageJSON is the --format json view of a message (one JSON object per line).
type messageJSON struct {
	MsgID          int64    `json:"msgId"`
	Topic          string   `json:"topic"`
	BrokerID       int      `json:"brokerId"`
	Partition      int      `json:"partition"`
	Offset         int64    `json:"offset"`
	Tag            string   `json:"tag,omitempty"`
	Keys           []string `json:"keys,omitempty"`
	StoreTime      string   `json:"storeTime"`
	StoreTimeMs    int64    `json:"storeTimeMs"`
	BornTimeMs     int64    `json:"bornTimeMs"`
	Flag           int32    `json:"flag"`
	Properties     string   `json:"properties,omitempty"`
	ReconsumeTimes uint16   `json:"reconsumeTimes,omitempty"`
	Attribute      *string  `json:"attribute,omitempty"`
	Body           *string  `json:"body,omitempty"`
	BodyBase64     *string  `json:"bodyBase64,omitempty"`
}

func (m *message) json() messageJSON {
	j := messageJSON{
		MsgID: m.MsgID, Topic: m.Topic, BrokerID: m.BrokerID, Partition: m.Partition, Offset: m.Offset,
		Tag: m.Tag, Keys: m.Keys, StoreTime: formatMs(m.StoreTime), StoreTimeMs: m.StoreTime,
		BornTimeMs: m.BornTime, Flag: m.Flag, Properties: m.Properties, ReconsumeTimes: m.ReconsumeTimes,
	}
	if m.HasAttribute {
		a := string(m.Attribute)
		if !utf8.Valid(m.Attribute) {
			a = base64.StdEncoding.EncodeToString(m.Attribute)
		}
		j.Attribute = &a
	}
	if utf8.Valid(m.Body) {
		b := string(m.Body)
		j.Body = &b
	} else {
		b := base64.StdEncoding.EncodeToString(m.Body)
		j.BodyBase64 = &b
	}
	return j
}

func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Message output formats.
const (
	formatText    = "text"    // the body, one message per line
	formatJSON    = "json"    // one JSON object per line
	formatVerbose = "verbose" // a header line then the body
)

func validFormat(f string) error {
	switch f {
	case formatText, formatJSON, formatVerbose:
		return nil
	}
	return usageErr("unknown --format %q (want text, json or verbose)", f)
}

// printMessage writes m to w in format f.
func printMessage(w io.Writer, f string, m *message) error {
	switch f {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(m.json())
	case formatVerbose:
		var sb strings.Builder
		fmt.Fprintf(&sb, "# %s %d-%d@%d msgId=%d storeTime=%s", m.Topic, m.BrokerID, m.Partition, m.Offset, m.MsgID, formatMs(m.StoreTime))
		if m.Tag != "" {
			fmt.Fprintf(&sb, " tag=%s", m.Tag)
		}
		if len(m.Keys) > 0 {
			fmt.Fprintf(&sb, " keys=%s", strings.Join(m.Keys, ","))
		}
		if m.HasAttribute {
			fmt.Fprintf(&sb, " attribute=%q", m.Attribute)
		}
		fmt.Fprintf(&sb, " bytes=%d\n", len(m.Body))
		sb.Write(m.Body)
		if len(m.Body) == 0 || m.Body[len(m.Body)-1] != '\n' {
			sb.WriteByte('\n')
		}
		_, err := io.WriteString(w, sb.String())
		return err
	default:
		b := m.Body
		if len(b) == 0 || b[len(b)-1] != '\n' {
			b = append(append([]byte{}, b...), '\n')
		}
		_, err := w.Write(b)
		return err
	}
}
