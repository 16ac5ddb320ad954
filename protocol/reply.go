package protocol

import (
	"slices"
	"strconv"
)

// Reply status codes, MetaQ's HttpStatus (names kept, spelling fixed).
const (
	StatusSuccess             = 200 // HttpStatus.Success
	StatusMoved               = 301 // HttpStatus.Moved: body is a valid offset
	StatusBadRequest          = 400 // HttpStatus.BadRequest
	StatusUnauthorized        = 401 // HttpStatus.Unauthorized
	StatusForbidden           = 403 // HttpStatus.Forbidden
	StatusNotFound            = 404 // HttpStatus.NotFound: also "no new message"
	StatusConflict            = 409 // metaq: a dead letter resent already
	StatusInternalServerError = 500 // HttpStatus.InternalServerError
	StatusServiceUnavailable  = 503 // HttpStatus.ServiceUnavilable: busy / not supported yet
	StatusGatewayTimeout      = 504 // HttpStatus.GatewayTimeout
)

// StatusText returns a short English name for a status code.
func StatusText(code int) string {
	switch code {
	case StatusSuccess:
		return "Success"
	case StatusMoved:
		return "Moved"
	case StatusBadRequest:
		return "BadRequest"
	case StatusUnauthorized:
		return "Unauthorized"
	case StatusForbidden:
		return "Forbidden"
	case StatusNotFound:
		return "NotFound"
	case StatusInternalServerError:
		return "InternalServerError"
	case StatusServiceUnavailable:
		return "ServiceUnavailable"
	case StatusGatewayTimeout:
		return "GatewayTimeout"
	}
	return "Status" + strconv.Itoa(code)
}

// The encoders below are append-style: they append to dst and return the
// extended slice, allocating only when dst must grow.

// AppendResultHeader appends `result <code> <bodyLen> <opaque>\r\n`; the
// caller appends (or writev's) exactly bodyLen bytes of body after it.
func AppendResultHeader(dst []byte, code, bodyLen int, opaque int32) []byte {
	dst = append(dst, "result "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = appendIntField(dst, int64(bodyLen))
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendResult appends `result <code> <len> <opaque>\r\n<body>`.
func AppendResult(dst []byte, code int, body []byte, opaque int32) []byte {
	dst = AppendResultHeader(dst, code, len(body), opaque)
	return append(dst, body...)
}

// AppendResultString is AppendResult with a string body.
func AppendResultString(dst []byte, code int, body string, opaque int32) []byte {
	dst = AppendResultHeader(dst, code, len(body), opaque)
	return append(dst, body...)
}

// AppendResultInt appends a result whose body is one decimal number: the
// offset reply, 301 with a valid offset, seek.
func AppendResultInt(dst []byte, code int, v int64, opaque int32) []byte {
	dst = AppendResultHeader(dst, code, intLen(v), opaque)
	return strconv.AppendInt(dst, v, 10)
}

// AppendError appends the reply to a protocol error (Command.Err or a fatal
// error returned by Parser.Parse).
func AppendError(dst []byte, e *Error) []byte {
	return AppendResultString(dst, e.Code, e.Msg, e.Opaque)
}

// PutResultBodyLen is the length of the body AppendPutResultBody writes.
func PutResultBodyLen(msgID int64, partition int32, offset int64) int {
	return intLen(msgID) + 1 + intLen(int64(partition)) + 1 + intLen(offset)
}

// AppendPutResultBody appends MetaQ's 3-token put success body
// `<msgId> <partition> <offset>` (offset = queue offset, -1 inside a
// transaction).
func AppendPutResultBody(dst []byte, msgID int64, partition int32, offset int64) []byte {
	dst = strconv.AppendInt(dst, msgID, 10)
	dst = appendIntField(dst, int64(partition))
	return appendIntField(dst, offset)
}

// AppendPutResult appends the whole put success reply:
// `result 200 <len> <opaque>\r\n<msgId> <partition> <offset>`.
//
// It is rendered once per acknowledged put, so it sizes the reply first
// and writes the five numbers straight into dst, right to left
// (putDecBack), with no scratch buffer to copy: 311–394 ns per reply
// through strconv, 36 ns with stack buffers, see BenchmarkAppendPutResult
// (issue 21, bench/README.md).
func AppendPutResult(dst []byte, msgID int64, partition int32, offset int64, opaque int32) []byte {
	const lead = "result 200 "
	bodyLen := PutResultBodyLen(msgID, partition, offset)
	n := len(lead) + uintLen(uint64(bodyLen)) + 1 + intLen(int64(opaque)) + 2 + bodyLen
	dst = slices.Grow(dst, n)
	b := dst[len(dst) : len(dst)+n]
	i := putDecBack(b, n, offset) - 1
	b[i] = ' '
	i = putDecBack(b, i, int64(partition)) - 1
	b[i] = ' '
	i = putDecBack(b, i, msgID) - 2
	b[i], b[i+1] = '\r', '\n'
	i = putDecBack(b, i, int64(opaque)) - 1
	b[i] = ' '
	putDecBack(b, i, int64(bodyLen)) // ends the junk it leaves below: lead is written after it
	copy(b, lead)
	return dst[:len(dst)+n]
}

// AppendValueHeader appends `value <n> <opaque>\r\n`; n bytes of whole
// records follow (written separately, straight from the commit log).
func AppendValueHeader(dst []byte, n int, opaque int32) []byte {
	dst = append(dst, "value "...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// Stats bodies are MetaQ's: `STATS\r\n`, one `key value\r\n` line per item,
// `END\r\n`. Build the body in a scratch buffer, then wrap it with
// AppendResult(dst, StatusSuccess, body, opaque):
//
//	b := protocol.AppendStatsStart(scratch[:0])
//	b = protocol.AppendStat(b, "pid", "1234")
//	b = protocol.AppendStatInt(b, "curr_connections", 3)
//	b = protocol.AppendStatsEnd(b)

// AppendStatsStart appends `STATS\r\n`.
func AppendStatsStart(dst []byte) []byte { return append(dst, "STATS\r\n"...) }

// AppendStatsEnd appends `END\r\n`.
func AppendStatsEnd(dst []byte) []byte { return append(dst, "END\r\n"...) }

// AppendStat appends `key value\r\n`. Spaces in key and CR/LF in either are
// replaced by '_' and ' ' so the body stays parseable.
func AppendStat(dst []byte, key, value string) []byte {
	dst = appendStatKey(dst, key)
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// AppendStatInt appends `key <decimal>\r\n`.
func AppendStatInt(dst []byte, key string, v int64) []byte {
	dst = appendStatKey(dst, key)
	dst = strconv.AppendInt(dst, v, 10)
	return append(dst, '\r', '\n')
}

// IntStat is one `key <decimal>` line of a stats reply.
type IntStat struct {
	Key string
	V   int64
}

// AppendStatInts appends a `key <decimal>\r\n` line per stat, in order.
func AppendStatInts(dst []byte, stats ...IntStat) []byte {
	for _, s := range stats {
		dst = AppendStatInt(dst, s.Key, s.V)
	}
	return dst
}

// appendStatKey appends `key ` with spaces and CR/LF in key replaced by '_'.
func appendStatKey(dst []byte, key string) []byte {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == ' ' || c == '\r' || c == '\n' {
			c = '_'
		}
		dst = append(dst, c)
	}
	return append(dst, ' ')
}
