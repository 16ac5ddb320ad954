package protocol

import "strconv"

// AppendTxEnd encodes `txend <msgId> <action> <opaque>\r\n` (action is
// commit, rollback or unknown).
func AppendTxEnd(dst []byte, msgID int64, action string, opaque int32) []byte {
	dst = append(dst, "txend "...)
	dst = strconv.AppendInt(dst, msgID, 10)
	dst = append(dst, ' ')
	dst = append(dst, action...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	return append(dst, "\r\n"...)
}

// AppendProducer encodes `producer <group> <opaque>\r\n`.
func AppendProducer(dst []byte, group string, opaque int32) []byte {
	dst = append(dst, "producer "...)
	dst = append(dst, group...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	return append(dst, "\r\n"...)
}

// AppendCheck encodes the broker's request `check <msgId> <opaque>\r\n`:
// the producer answers with a txend for the half message.
func AppendCheck(dst []byte, msgID int64, opaque int32) []byte {
	dst = append(dst, "check "...)
	dst = strconv.AppendInt(dst, msgID, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	return append(dst, "\r\n"...)
}
