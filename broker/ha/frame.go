package ha

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The replication link (docs/replication.md, "The link"; docs/protocol.md,
// `replicate`). A slave opens an ordinary connection to its master's port
// and sends one text command:
//
//	replicate <brokerId> <slaveId> <position> <epoch> <opaque>\r\n
//
// position is the slave's write position (a record boundary), epoch the last
// epoch in its own log (0: none). The master answers like any command:
//
//	result 200 <len> <opaque>\r\n<start> <segmentSize> <epoch>
//	    start: where the stream begins — position, or the base of the
//	    master's oldest segment when position is older than its retention
//	result 409 <len> <opaque>\r\n<end>
//	    the slave's log goes past the end of its last epoch in the master's
//	    history (end): it must truncate there before following
//	result 403/400/503 <len> <opaque>\r\n<text>
//	    not a master, a wrong brokerId or position, or shutting down
//
// After a 200 the connection carries binary frames only, big-endian.
// Master → slave, a 32-byte header then len payload bytes:
//
//	kind  u8   'D' data: payload = the master's log bytes at pos (whole
//	           records, or one 8-byte BLANK header closing a segment)
//	           'H' heartbeat: len 0 (after a send that moves the high
//	           watermark, when it moves while nothing is to be sent, and
//	           every heartbeatEvery when idle)
//	rsv   3 bytes (zero)
//	len   u32  payload length (<= maxFramePayload)
//	pos   i64  physical offset of the payload; heartbeat: the master's
//	           high watermark, what it has acknowledged (commit.go), never
//	           past what it has sent (an older master sent its end here,
//	           which a slave takes as the same, capped at what it holds)
//	end   i64  the master's written end when the frame was sent (what it
//	           may ship: in sync-flush mode ahead of its durable end)
//	time  i64  the master's clock (unix ms) when the frame was sent
//
// Slave → master, 16 bytes each, one per batch made durable:
//
//	kind  u8   'A' ack
//	rsv   7 bytes (zero)
//	pos   i64  the slave's durable position
//
// Frames carry no checksum of their own: every record carries its CRC-32C,
// which the slave verifies before appending (store.AppendRaw).

const (
	frameData      = 'D'
	frameHeartbeat = 'H'
	frameAck       = 'A'

	frameHeaderSize = 32
	ackSize         = 16

	// maxFramePayload bounds a data frame: a read of the master's log is at
	// most readChunk bytes, or one record when a record is larger.
	maxFramePayload = 64 << 20
)

// frameHeader is a decoded master → slave header.
type frameHeader struct {
	kind byte
	n    int   // payload length
	pos  int64 // data: offset of the payload; heartbeat: the high watermark
	end  int64 // the master's written end
	time int64 // the master's clock, unix ms
}

var errFrame = errors.New("ha: bad replication frame")

func putFrameHeader(b []byte, h frameHeader) {
	b[0] = h.kind
	b[1], b[2], b[3] = 0, 0, 0
	binary.BigEndian.PutUint32(b[4:], uint32(h.n))
	binary.BigEndian.PutUint64(b[8:], uint64(h.pos))
	binary.BigEndian.PutUint64(b[16:], uint64(h.end))
	binary.BigEndian.PutUint64(b[24:], uint64(h.time))
}

// decodeFrameHeader decodes and checks a master → slave header (b holds at
// least frameHeaderSize bytes).
func decodeFrameHeader(b []byte) (frameHeader, error) {
	if len(b) < frameHeaderSize {
		return frameHeader{}, fmt.Errorf("%w: %d header bytes", errFrame, len(b))
	}
	h := frameHeader{
		kind: b[0],
		n:    int(binary.BigEndian.Uint32(b[4:])),
		pos:  int64(binary.BigEndian.Uint64(b[8:])),
		end:  int64(binary.BigEndian.Uint64(b[16:])),
		time: int64(binary.BigEndian.Uint64(b[24:])),
	}
	switch {
	case b[1] != 0 || b[2] != 0 || b[3] != 0:
		return h, fmt.Errorf("%w: reserved bytes set", errFrame)
	case h.pos < 0 || h.end < 0:
		return h, fmt.Errorf("%w: negative position", errFrame)
	case h.kind == frameData && (h.n == 0 || h.n > maxFramePayload):
		return h, fmt.Errorf("%w: data frame of %d bytes", errFrame, h.n)
	case h.kind == frameData && h.pos > h.end-int64(h.n):
		return h, fmt.Errorf("%w: data at %d+%d past the master's end %d", errFrame, h.pos, h.n, h.end)
	case h.kind == frameHeartbeat && h.n != 0:
		return h, fmt.Errorf("%w: heartbeat with a payload", errFrame)
	case h.kind != frameData && h.kind != frameHeartbeat:
		return h, fmt.Errorf("%w: kind %q", errFrame, h.kind)
	}
	return h, nil
}

func putAck(b []byte, pos int64) {
	clear(b[:ackSize])
	b[0] = frameAck
	binary.BigEndian.PutUint64(b[8:], uint64(pos))
}

// decodeAck decodes a slave → master ack.
func decodeAck(b []byte) (int64, error) {
	if len(b) < ackSize {
		return 0, fmt.Errorf("%w: %d ack bytes", errFrame, len(b))
	}
	if b[0] != frameAck {
		return 0, fmt.Errorf("%w: kind %q, want an ack", errFrame, b[0])
	}
	for _, c := range b[1:8] {
		if c != 0 {
			return 0, fmt.Errorf("%w: reserved bytes set", errFrame)
		}
	}
	pos := int64(binary.BigEndian.Uint64(b[8:]))
	if pos < 0 {
		return 0, fmt.Errorf("%w: negative ack", errFrame)
	}
	return pos, nil
}

// frameReader splits a byte stream into frames; it holds at most one
// partial frame (bounded by maxFramePayload).
type frameReader struct {
	buf []byte // unconsumed bytes
}

// next returns the next complete frame in buf (payload aliases buf), or
// ok false when more bytes are needed.
func (r *frameReader) next() (h frameHeader, payload []byte, ok bool, err error) {
	if len(r.buf) < frameHeaderSize {
		return h, nil, false, nil
	}
	h, err = decodeFrameHeader(r.buf)
	if err != nil {
		return h, nil, false, err
	}
	if len(r.buf) < frameHeaderSize+h.n {
		return h, nil, false, nil
	}
	payload = r.buf[frameHeaderSize : frameHeaderSize+h.n]
	r.buf = r.buf[frameHeaderSize+h.n:]
	return h, payload, true, nil
}
