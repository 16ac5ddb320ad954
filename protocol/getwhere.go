package protocol

// AppendGetWhere appends a get that also carries a filter expression:
// `get <topic> <group> <partition> <offset> <maxSize> <opaque> <maxWaitMs> <tags> <where>`,
// where is URL-escaped (AppendEscaped) so that it is one field, and tags is
// `*` when empty. An empty where is AppendGet. docs/protocol.md,
// "Expression filters".
func AppendGetWhere(dst []byte, topic, group string, partition int32, offset int64, maxSize int32, opaque int32, maxWaitMs int64, tags, where string) []byte {
	if where == "" {
		return AppendGet(dst, topic, group, partition, offset, maxSize, opaque, maxWaitMs, tags)
	}
	if tags == "" {
		tags = "*"
	}
	dst = append(dst, "get "...)
	dst = appendQueuePosition(dst, topic, group, partition, offset)
	dst = appendIntField(dst, int64(maxSize))
	dst = appendIntField(dst, int64(opaque))
	dst = appendIntField(dst, min(max(maxWaitMs, 0), maxI32)) // the most a broker accepts
	dst = appendStrField(dst, tags)
	dst = append(dst, ' ')
	dst = AppendEscaped(dst, where)
	return append(dst, '\r', '\n')
}
