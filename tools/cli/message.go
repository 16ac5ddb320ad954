package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

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

func toJSON(m *client.Message) messageJSON {
	j := messageJSON{
		MsgID: m.MsgID, Topic: m.Topic, BrokerID: m.Partition.BrokerID, Partition: m.Partition.Partition, Offset: m.Offset,
		Tag: m.Tag, Keys: m.Keys, StoreTime: formatMs(m.StoreTime.UnixMilli()), StoreTimeMs: m.StoreTime.UnixMilli(),
		BornTimeMs: m.BornTime.UnixMilli(), Flag: m.Flag, Properties: propertiesLine(m), ReconsumeTimes: uint16(m.ReconsumeTimes),
	}
	if hasAttribute(m) {
		a := m.Attribute
		if !utf8.ValidString(a) {
			a = base64.StdEncoding.EncodeToString([]byte(a))
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

func hasAttribute(m *client.Message) bool {
	return m.Attribute != "" || m.Flag&protocol.FlagHasAttribute != 0
}

// propertiesLine shows a received message's properties as the properties line its producer
// sends: tag, keys, delay, then the others sorted by name, URL-encoded.
func propertiesLine(m *client.Message) string {
	esc := func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }
	var parts []string
	if m.Tag != "" {
		parts = append(parts, "tag="+esc(m.Tag))
	}
	if len(m.Keys) > 0 {
		parts = append(parts, "keys="+esc(strings.Join(m.Keys, " ")))
	}
	if m.DelayLevel > 0 {
		parts = append(parts, "delay="+strconv.Itoa(m.DelayLevel))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		parts = append(parts, esc(k)+"="+esc(m.Properties[k]))
	}
	return strings.Join(parts, "&")
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

// printMessage writes m to w in format f, in one Write. The output is built
// in a bytebufferpool buffer: consume prints thousands of messages a second,
// and the buffers (sized to the messages by the pool) are reused instead of
// allocated per message.
func printMessage(w io.Writer, f string, m *client.Message) error {
	bb := bytebufferpool.Get()
	defer bytebufferpool.Put(bb)
	switch f {
	case formatJSON:
		enc := json.NewEncoder(bb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(toJSON(m)); err != nil {
			return err
		}
	case formatVerbose:
		fmt.Fprintf(bb, "# %s %s@%d msgId=%d storeTime=%s", m.Topic, m.Partition, m.Offset, m.MsgID, formatMs(m.StoreTime.UnixMilli()))
		if m.Tag != "" {
			fmt.Fprintf(bb, " tag=%s", m.Tag)
		}
		if len(m.Keys) > 0 {
			fmt.Fprintf(bb, " keys=%s", strings.Join(m.Keys, ","))
		}
		if hasAttribute(m) {
			fmt.Fprintf(bb, " attribute=%q", m.Attribute)
		}
		fmt.Fprintf(bb, " bytes=%d\n", len(m.Body))
		bodyLine(bb, m.Body)
	default:
		bodyLine(bb, m.Body)
	}
	_, err := w.Write(bb.B)
	return err
}

// bodyLine appends body and a '\n' unless it ends with one.
func bodyLine(bb *bytebufferpool.ByteBuffer, body []byte) {
	bb.B = append(bb.B, body...)
	if len(body) == 0 || body[len(body)-1] != '\n' {
		bb.B = append(bb.B, '\n')
	}
}
