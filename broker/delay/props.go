package delay

import (
	"bytes"
	"strconv"

	"github.com/metaqgo/metaq/protocol"
)

// Property keys the delay service reads and writes (docs/delay.md).
const (
	PropDelay         = protocol.PropDelay // delay=<level>
	PropDeliverAt     = "deliverAt"        // deliverAt=<unix ms>
	PropRealTopic     = "realTopic"        // on %SCHEDULE% records: where it goes
	PropRealPartition = "realPartition"
	PropOrigMsgID     = "origMsgId"             // the id the producer got (or the first delivery's, for retries)
	PropRetryTopic    = protocol.PropRetryTopic // retry/DLQ: the topic the message was first consumed from
	PropReason        = "reason"                // DLQ/retry: why the consumer gave it back
	PropRolls         = "rolls"                 // on %SCHEDULE% records: how often it was rolled forward
)

// appendWithout appends props to dst without the pairs whose key drop
// rejects; it returns dst and whether anything was appended.
func appendWithout(dst, props []byte, drop func(key []byte) bool) []byte {
	start := len(dst)
	for len(props) > 0 {
		var pair []byte
		if i := bytes.IndexByte(props, '&'); i >= 0 {
			pair, props = props[:i], props[i+1:]
		} else {
			pair, props = props, nil
		}
		if len(pair) == 0 {
			continue
		}
		k := pair
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			k = pair[:i]
		}
		if drop(k) {
			continue
		}
		if len(dst) > start {
			dst = append(dst, '&')
		}
		dst = append(dst, pair...)
	}
	return dst
}

func appendPair(dst []byte, key string, val []byte) []byte {
	if len(dst) > 0 {
		dst = append(dst, '&')
	}
	dst = append(dst, key...)
	dst = append(dst, '=')
	return append(dst, val...)
}

func appendIntPair(dst []byte, key string, v int64) []byte {
	var b [20]byte
	return appendPair(dst, key, strconv.AppendInt(b[:0], v, 10))
}

func appendStringPair(dst []byte, key, v string) []byte {
	var b [64]byte
	return appendPair(dst, key, protocol.AppendEscaped(b[:0], v))
}

// isRouting reports the keys the broker owns on %SCHEDULE% records; a
// client cannot set them.
func isRouting(k []byte) bool {
	return string(k) == PropRealTopic || string(k) == PropRealPartition || string(k) == PropRolls
}

func propInt(props []byte, key string) (int64, bool) {
	raw, ok := protocol.PropertyRaw(props, key)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	return v, err == nil
}
