package protocol

import (
	"errors"
	"math"
	"strconv"
)

// Wire limits (docs/protocol.md §1, "Limits").
const (
	// MaxLineLen bounds a command or reply header line, line terminator
	// included: a line that has not ended after MaxLineLen bytes is fatal.
	MaxLineLen = 4096
	// DefaultMaxMessageSize is the data bound used when Parser.MaxMessageSize
	// is 0 (MetaQ's maxMessageSize default, 4 MiB).
	DefaultMaxMessageSize = 4 << 20
	// DefaultOpaque is the opaque MetaQ uses for `version` and `stats` sent
	// without one; the parser also reports it when an opaque cannot be read.
	DefaultOpaque int32 = math.MaxInt32
	// MaxNameLen is the longest topic or group name.
	MaxNameLen = MaxTopicLen
)

// Op identifies a command.
type Op uint8

// Commands. OpUnknown is only seen on commands that carry an Err.
const (
	OpUnknown Op = iota
	OpPut
	OpGet
	OpOffset
	OpStats
	OpVersion
	OpQuit
	OpTransaction
	OpSync
	OpSeek
	OpQueryID
	OpQueryKey
	OpTxEnd     // txend <msgId> commit|rollback|unknown <opaque> (txparse.go)
	OpProducer  // producer <group> <opaque> (txparse.go)
	OpRetry     // metaq: retry <group> <msgId> <delayLevel> <opaque> [<reason>]
	OpReplicate // metaq: replicate <brokerId> <slaveId> <position> <epoch> <opaque> (haparse.go)
	OpBatchPut  // metaq: mput <topic> <partition> <count> <len> [<checksum>] [runs] <opaque> (batch.go)
	OpPop       // metaq: pop <topic> <group> <max> <invisibleMs> <maxWaitMs> <opaque> [<tags> [<where>]] (pop.go)
	OpAck       // metaq: ack <group> <handle>|<len> <opaque> (pop.go)
	OpRelease   // metaq: release <group> <delayMs> <handle>|<len> <opaque>
	OpReject    // metaq: reject <group> <handle>|<len> <opaque>
	OpExtend    // metaq: extend <group> <invisibleMs> <handle>|<len> <opaque>
	OpAuth      // metaq: auth <user> <secret> <opaque>: auth <user> <secret> <opaque> (auth.go)
	OpTrace     // metaq: trace on|off <opaque>: mark the connection's puts as traced (traceparse.go)
)

var opNames = [...]string{
	OpUnknown:     "unknown",
	OpPut:         "put",
	OpGet:         "get",
	OpOffset:      "offset",
	OpStats:       "stats",
	OpVersion:     "version",
	OpQuit:        "quit",
	OpTransaction: "transaction",
	OpSync:        "sync",
	OpSeek:        "seek",
	OpQueryID:     "query id",
	OpQueryKey:    "query key",
	OpTxEnd:       "txend",
	OpProducer:    "producer",
	OpRetry:       "retry",
	OpReplicate:   "replicate",
	OpBatchPut:    "mput",
	OpPop:         "pop",
	OpAck:         "ack",
	OpRelease:     "release",
	OpReject:      "reject",
	OpExtend:      "extend",
	OpAuth:        "auth",
	OpTrace:       "trace",
}

// String returns the command name as typed on the wire.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Command is one parsed request. It is owned by the Parser and valid only
// during the handler call: every byte slice aliases the read buffer or the
// parser's own buffers. Copy what must outlive the call.
//
// Fields that do not belong to Op are zero. When Err is non-nil the request
// was malformed: only Op (OpUnknown for an unknown name), Opaque, Err, Line
// and Args are meaningful, and the connection should reply
// `result <Err.Code> <len> <Opaque>\r\n<Err.Msg>` and go on reading.
type Command struct {
	Op Op
	// Opaque is the value to reply with: the client's opaque, or
	// DefaultOpaque (2147483647) when it sent none or it could not be read.
	Opaque int32
	// HasOpaque reports whether Opaque was read from the request.
	HasOpaque bool

	Topic     []byte // put, get, offset, sync, seek, query key
	Group     []byte // get, offset
	Partition int32  // put (-1 = broker picks), get, offset, sync, seek

	// put / sync / mput (mput: Data is the whole block, Flag unused)
	Flag        int32
	Checksum    int32 // -1 when absent or unchecked; verified by the parser otherwise
	HasChecksum bool  // the checksum field was present (7-field put with a number, 8-field put, 8-field sync)
	TxKey       []byte
	Data        []byte

	// get / offset
	Offset    int64
	MaxSize   int32
	MaxWaitMs int64  // 0 when absent
	Tags      []byte // nil when absent; `*` or `a||b`
	Where     []byte // get: URL-escaped filter expression (protocol/filter); nil when absent

	Item []byte // stats; nil when absent

	Timestamp int64 // seek, unix ms

	MsgID int64  // sync, query id, retry
	Key   []byte // query key; retry: the reason (URL-escaped, nil when absent); auth: the secret (URL-escaped)
	User  []byte // auth

	DelayLevel int32 // retry: 0 = the broker's ladder, < 0 = dead-letter queue at once

	// pop: Count = max messages, Millis = invisibility, MaxWaitMs; release:
	// Millis = delay; extend: Millis = invisibility. ack/release/reject/
	// extend carry one handle in Key or a whitespace-separated list in Data.
	// mput: Count = messages in the block (1 … MaxBatchCount). trace:
	// 1 = on, 0 = off.
	Count int32
	// BatchRuns: mput asked for the compact reply (the `runs` field,
	// batch.go): message ids as runs of record sizes instead of a list.
	BatchRuns bool
	Millis    int64
	MaxNum    int32 // query key

	// Args are the raw fields after the command name (the opaque included).
	// Set only for transaction, sync and commands with an Err (for logging);
	// nil otherwise, to keep the hot path short. At most MaxFields-1 entries.
	Args [][]byte
	// Line is the raw header line without its line terminator.
	Line []byte

	Err *Error
}

// MaxFields is the largest number of fields (command name included) the
// parser records on one line; more is always a field-count error.
const MaxFields = 12

// Error is a protocol error. Non-fatal ones arrive as Command.Err; a fatal one
// is returned by Parser.Parse: the stream can no longer be framed, the
// connection replies `result <Code> <len> <Opaque>` and closes.
type Error struct {
	Code      int
	Msg       string
	Opaque    int32 // DefaultOpaque when HasOpaque is false
	HasOpaque bool
	Fatal     bool
}

func (e *Error) Error() string {
	if e.Fatal {
		return "protocol: fatal " + strconv.Itoa(e.Code) + ": " + e.Msg
	}
	return "protocol: " + strconv.Itoa(e.Code) + ": " + e.Msg
}

// ErrQuit is returned by Parse after it delivered a `quit` command; the
// caller closes the connection without a reply. Later calls return it too.
var ErrQuit = errors.New("protocol: quit")

// ValidName reports whether s is a valid topic or group name:
// [A-Za-z0-9_.%-]{1,255}, and neither "." nor "..".
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameChar[s[i]] {
			return false
		}
	}
	return true
}

// ValidNameBytes is ValidName for a byte slice; it does not allocate.
func ValidNameBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxNameLen {
		return false
	}
	if b[0] == '.' && (len(b) == 1 || (len(b) == 2 && b[1] == '.')) {
		return false
	}
	for _, c := range b {
		if !nameChar[c] {
			return false
		}
	}
	return true
}

var nameChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_.%-" {
		t[c] = true
	}
	return
}()

// parseInt64 parses an optionally negative decimal integer without
// allocating. It rejects '+', empty input and overflow.
func parseInt64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		d := c - '0'
		if d > 9 {
			return 0, false
		}
		u = u*10 + uint64(d)
	}
	// 19 digits fit in uint64 without wrapping.
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

func parseInt32(b []byte) (int32, bool) {
	v, ok := parseInt64(b)
	if !ok || v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}
