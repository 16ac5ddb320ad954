package protocol

import (
	"math"
)

// Client-side command encoders. Each appends one request (header line and,
// for put, its data) to dst and returns the extended slice; none allocates
// beyond growing dst. They do not validate: names and keys must be valid
// (ValidName) and free of spaces, or the broker answers 400.

// ChecksumNone omits the checksum field of a put (the 6-field form, or the
// 7-field form with a txKey). Any other value, -1 ("do not verify")
// included, is sent.
const ChecksumNone int32 = math.MinInt32

// AppendPutHeader appends the header line of a put whose data is dataLen
// bytes (to write the data separately, e.g. with writev):
//
//	checksum == ChecksumNone, txKey == "":  put <topic> <partition> <len> <flag> <opaque>            (MetaQ < 1.4.4, Python/Ruby)
//	checksum set,             txKey == "":  put <topic> <partition> <len> <flag> <checksum> <opaque> (MetaQ >= 1.4.4)
//	checksum == ChecksumNone, txKey set:    put <topic> <partition> <len> <flag> <txKey> <opaque>
//	checksum set,             txKey set:    put <topic> <partition> <len> <flag> <checksum> <txKey> <opaque>
//
// A txKey must not start with a digit or '-' (the 7-field form would read
// it as a checksum); MetaQ's `TX:` and `XID:` keys never do.
func AppendPutHeader(dst []byte, topic string, partition int32, dataLen int, flag, checksum int32, txKey string, opaque int32) []byte {
	if txKey == "" && dataLen >= 0 && dataLen <= math.MaxInt32 {
		return appendPutLine(dst, topic, partition, int32(dataLen), flag, checksum, opaque)
	}
	dst = append(dst, "put "...)
	dst = append(dst, topic...)
	dst = appendIntField(dst, int64(partition))
	dst = appendIntField(dst, int64(dataLen))
	dst = appendIntField(dst, int64(flag))
	if checksum != ChecksumNone {
		dst = appendIntField(dst, int64(checksum))
	}
	if txKey != "" {
		dst = appendStrField(dst, txKey)
	}
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// appendPutLine is AppendPutHeader without a txKey: every put a producer
// sends. Its numbers go backwards into one stack buffer with their spaces
// and the line end, so the line takes three appends instead of eight (the
// header was ~9% of the client's CPU in async publish).
func appendPutLine(dst []byte, topic string, partition, dataLen, flag, checksum, opaque int32) []byte {
	// At most 5 × " -2147483648" + "\r\n" (62 bytes), and room below for
	// the junk word putDecBack stores under the first field's start.
	var b [80]byte
	i := len(b) - 2
	b[i], b[i+1] = '\r', '\n'
	i = putDecBack(b[:], i, int64(opaque)) - 1
	b[i] = ' '
	if checksum != ChecksumNone {
		i = putDecBack(b[:], i, int64(checksum)) - 1
		b[i] = ' '
	}
	i = putDecBack(b[:], i, int64(flag)) - 1
	b[i] = ' '
	i = putDecBack(b[:], i, int64(dataLen)) - 1
	b[i] = ' '
	i = putDecBack(b[:], i, int64(partition)) - 1
	b[i] = ' '
	dst = append(dst, "put "...)
	dst = append(dst, topic...)
	return append(dst, b[i:]...)
}

// AppendPut appends a whole put: header line and data. See AppendPutHeader
// for the forms; pass MessageChecksum(data) as checksum to have the broker
// verify the data.
func AppendPut(dst []byte, topic string, partition int32, flag, checksum int32, txKey string, opaque int32, data []byte) []byte {
	dst = AppendPutHeader(dst, topic, partition, len(data), flag, checksum, txKey, opaque)
	return append(dst, data...)
}

// AppendGet appends
// `get <topic> <group> <partition> <offset> <maxSize> <opaque> [<maxWaitMs> [<tags>]]`.
// maxWaitMs is sent when > 0 or when tags is set; tags is sent when it is
// neither "" nor "*". MetaQ brokers ignore the two extra fields.
func AppendGet(dst []byte, topic, group string, partition int32, offset int64, maxSize int32, opaque int32, maxWaitMs int64, tags string) []byte {
	dst = append(dst, "get "...)
	dst = appendQueuePosition(dst, topic, group, partition, offset)
	dst = appendIntField(dst, int64(maxSize))
	dst = appendIntField(dst, int64(opaque))
	withTags := tags != "" && tags != "*"
	if maxWaitMs > 0 || withTags {
		dst = appendIntField(dst, min(max(maxWaitMs, 0), maxI32)) // the most a broker accepts
	}
	if withTags {
		dst = appendStrField(dst, tags)
	}
	return append(dst, '\r', '\n')
}

// AppendOffset appends `offset <topic> <group> <partition> <offset> <opaque>`.
func AppendOffset(dst []byte, topic, group string, partition int32, offset int64, opaque int32) []byte {
	dst = append(dst, "offset "...)
	dst = appendQueuePosition(dst, topic, group, partition, offset)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendStats appends `stats <item> <opaque>`, or MetaQ's Java form
// `stats  <opaque>` (two spaces) when item is "".
func AppendStats(dst []byte, item string, opaque int32) []byte {
	dst = append(dst, "stats "...)
	dst = append(dst, item...)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendVersion appends `version <opaque>` (the heartbeat).
func AppendVersion(dst []byte, opaque int32) []byte {
	dst = append(dst, "version"...)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendQuit appends `quit`.
func AppendQuit(dst []byte) []byte { return append(dst, "quit\r\n"...) }

// AppendSeek appends `seek <topic> <partition> <timestampMs> <opaque>`.
func AppendSeek(dst []byte, topic string, partition int32, timestampMs int64, opaque int32) []byte {
	dst = append(dst, "seek "...)
	dst = append(dst, topic...)
	dst = appendIntField(dst, int64(partition))
	dst = appendIntField(dst, timestampMs)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendQueryID appends `query id <msgId> <opaque>`.
func AppendQueryID(dst []byte, msgID int64, opaque int32) []byte {
	dst = append(dst, "query id"...)
	dst = appendIntField(dst, msgID)
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendQueryKey appends `query key <topic> <key> <maxNum> <opaque>`.
func AppendQueryKey(dst []byte, topic, key string, maxNum int32, opaque int32) []byte {
	dst = append(dst, "query key "...)
	dst = append(dst, topic...)
	dst = appendStrField(dst, key)
	dst = appendIntField(dst, int64(maxNum))
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendTransaction appends MetaQ's
// `transaction <txKey> <sessionId> <type> [<timeoutS>] [<uq>] <opaque>`:
// the timeout is sent when > 0, the unique qualifier when not "".
func AppendTransaction(dst []byte, txKey, sessionID, txType string, timeoutS int, uq string, opaque int32) []byte {
	dst = append(dst, "transaction "...)
	dst = append(dst, txKey...)
	dst = appendStrField(dst, sessionID)
	dst = appendStrField(dst, txType)
	if timeoutS > 0 {
		dst = appendIntField(dst, int64(timeoutS))
	}
	if uq != "" {
		dst = appendStrField(dst, uq)
	}
	dst = appendIntField(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendSync appends MetaQ's replication command
// `sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>` and
// its data; the checksum is omitted when ChecksumNone.
func AppendSync(dst []byte, topic string, partition int32, flag int32, msgID int64, checksum int32, opaque int32, data []byte) []byte {
	dst = append(dst, "sync "...)
	dst = append(dst, topic...)
	dst = appendIntField(dst, int64(partition))
	dst = appendIntField(dst, int64(len(data)))
	dst = appendIntField(dst, int64(flag))
	dst = appendIntField(dst, msgID)
	if checksum != ChecksumNone {
		dst = appendIntField(dst, int64(checksum))
	}
	dst = appendIntField(dst, int64(opaque))
	dst = append(dst, '\r', '\n')
	return append(dst, data...)
}

// appendQueuePosition appends the fields get and offset share:
// `<topic> <group> <partition> <offset>`.
func appendQueuePosition(dst []byte, topic, group string, partition int32, offset int64) []byte {
	dst = append(dst, topic...)
	dst = appendStrField(dst, group)
	dst = appendIntField(dst, int64(partition))
	return appendIntField(dst, offset)
}

// appendIntField appends ' ' and the decimal form of v.
//
// It runs for every number of every request and reply line, so it renders
// with putIntBack (reply.go) into one stack buffer holding the space too:
// one append instead of two and no trip through strconv's generic path.
func appendIntField(dst []byte, v int64) []byte {
	var b [64]byte
	i := putIntBack(&b, len(b), v) - 1
	b[i] = ' '
	return append(dst, b[i:]...)
}

// appendStrField appends ' ' and s.
func appendStrField(dst []byte, s string) []byte {
	dst = append(dst, ' ')
	return append(dst, s...)
}
