package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Record format, version 1 ("MET1"). The same bytes live in the commit log
// and travel inside `value` replies, so one layout serves disk and wire.
// Every integer is big-endian.
//
//	off  len  field
//	  0    4  size            whole record, this field included
//	  4    4  magic           0x4D455431 "MET1" (0x424C4E4B "BLNK" = segment tail filler)
//	  8    4  crc             CRC-32C (Castagnoli) of bytes [12, size)
//	 12    8  msgId           brokerId<<48 | physicalOffset
//	 20    4  flag            MetaQ user flag as stored (bit 1 cleared by the broker)
//	 24    4  partition
//	 28    8  queueOffset     0, 1, 2, ... within the partition
//	 36    8  physicalOffset  byte position of the record in the commit log
//	 44    8  storeTime       unix ms, stamped under the append lock
//	 52    8  bornTime        unix ms from the producer (or storeTime)
//	 60    2  sysFlag         transaction state, delayed, retry, ...
//	 62    2  reconsumeTimes
//	 64  1+n  topic           u8 length + bytes
//	   . 2+n  properties      u16 length + URL query string
//	   . 4+n  data            u32 length + the put data block exactly
//
// A BLANK record fills the unused tail of a commit-log segment so that no
// record spans two segments. It carries only size and magic (>= 8 bytes);
// the rest of its bytes are undefined and never checksummed or served.
const (
	RecordMagic uint32 = 0x4D455431 // "MET1"
	BlankMagic  uint32 = 0x424C4E4B // "BLNK"

	// RecordHeaderSize is the fixed part before the topic length byte.
	RecordHeaderSize = 64
	// RecordOverhead is the size of a record with empty topic, properties and data.
	RecordOverhead = RecordHeaderSize + 1 + 2 + 4
	// BlankMinSize is the smallest BLANK filler (size + magic).
	BlankMinSize = 8
	// MaxSegmentSize bounds a commit-log segment: a BLANK filler covers up
	// to the rest of its segment and says how much in its 32-bit size field
	// (read unsigned), so a segment must be smaller than 4 GiB. Every other
	// in-segment size (a record, an index unit's size) is bounded by the
	// largest record, far below it.
	MaxSegmentSize = 1<<32 - 1

	MaxTopicLen      = 255
	MaxPropertiesLen = 65535
)

// Field offsets inside a record.
const (
	OffSize           = 0
	OffMagic          = 4
	OffCRC            = 8
	OffMsgID          = 12
	OffFlag           = 20
	OffPartition      = 24
	OffQueueOffset    = 28
	OffPhysicalOffset = 36
	OffStoreTime      = 44
	OffBornTime       = 52
	OffSysFlag        = 60
	OffReconsumeTimes = 62
	OffTopicLen       = 64
)

// System flags (Record.SysFlag).
const (
	SysFlagTxPrepared uint16 = 1 << 0 // transactional half message, not yet visible
	SysFlagTxCommit   uint16 = 1 << 1
	SysFlagTxRollback uint16 = 1 << 2
	SysFlagDelayed    uint16 = 1 << 3
	SysFlagRetry      uint16 = 1 << 4
	SysFlagDeadLetter uint16 = 1 << 5
	// SysFlagTraced: the producer traces the message (its connection sent
	// `trace on`, docs/trace.md); the broker writes its own trace events for
	// it, and the copies it makes (retry, delay, commit) keep the bit.
	SysFlagTraced uint16 = 1 << 6
)

// Flag bits of the MetaQ put flag.
const (
	FlagHasAttribute  int32 = 1 << 0 // data starts with 4-byte attribute length + attribute
	FlagHasProperties int32 = 1 << 1 // data starts with a properties line ended by '\n' (stripped by the broker)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C checksum of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC32C continues a CRC-32C checksum.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// MessageChecksum is MetaQ's put checksum: CRC32-IEEE(data) & 0x7FFFFFFF.
func MessageChecksum(data []byte) int32 { return int32(crc32.ChecksumIEEE(data) & 0x7FFFFFFF) }

// Record is a decoded record. Topic, Properties and Data alias the buffer the
// record was decoded from.
type Record struct {
	Size           int32
	MsgID          int64
	Flag           int32
	Partition      int32
	QueueOffset    int64
	PhysicalOffset int64
	StoreTime      int64
	BornTime       int64
	SysFlag        uint16
	ReconsumeTimes uint16
	Topic          []byte
	Properties     []byte
	Data           []byte
}

// RecordSize is the encoded size of a record with the given variable parts.
func RecordSize(topicLen, propsLen, dataLen int) int {
	return RecordOverhead + topicLen + propsLen + dataLen
}

// Decode errors. ErrShortRecord means more bytes are needed (a torn tail when
// scanning a log); the others mean the bytes are not a valid record.
var (
	ErrShortRecord = errors.New("record: short buffer")
	ErrBadMagic    = errors.New("record: bad magic")
	ErrBadSize     = errors.New("record: bad size")
	ErrBadCRC      = errors.New("record: checksum mismatch")
	ErrBadLayout   = errors.New("record: field lengths do not add up to size")
	ErrBlank       = errors.New("record: blank filler")
)

// MakeMsgID builds a message id: brokerId<<48 | physicalOffset.
func MakeMsgID(brokerID int, physicalOffset int64) int64 {
	return int64(brokerID)<<48 | physicalOffset&(1<<48-1)
}

// SplitMsgID returns the broker id and physical offset held in a message id.
func SplitMsgID(id int64) (brokerID int, physicalOffset int64) {
	return int(id >> 48), id & (1<<48 - 1)
}

// EncodeRecord writes r into dst, which must be exactly
// RecordSize(len(r.Topic), len(r.Properties), len(r.Data)) bytes, and fills in
// Size and the checksum. It does not allocate. It panics if dst has the wrong
// length or a variable part is too long; callers validate input first.
func EncodeRecord(dst []byte, r *Record) {
	n := RecordSize(len(r.Topic), len(r.Properties), len(r.Data))
	if len(dst) != n || len(r.Topic) > MaxTopicLen || len(r.Properties) > MaxPropertiesLen {
		panic(fmt.Sprintf("protocol: EncodeRecord: bad lengths (dst %d, want %d, topic %d, props %d)",
			len(dst), n, len(r.Topic), len(r.Properties)))
	}
	be := binary.BigEndian
	be.PutUint32(dst[OffSize:], uint32(n))
	be.PutUint32(dst[OffMagic:], RecordMagic)
	be.PutUint64(dst[OffMsgID:], uint64(r.MsgID))
	be.PutUint32(dst[OffFlag:], uint32(r.Flag))
	be.PutUint32(dst[OffPartition:], uint32(r.Partition))
	be.PutUint64(dst[OffQueueOffset:], uint64(r.QueueOffset))
	be.PutUint64(dst[OffPhysicalOffset:], uint64(r.PhysicalOffset))
	be.PutUint64(dst[OffStoreTime:], uint64(r.StoreTime))
	be.PutUint64(dst[OffBornTime:], uint64(r.BornTime))
	be.PutUint16(dst[OffSysFlag:], r.SysFlag)
	be.PutUint16(dst[OffReconsumeTimes:], r.ReconsumeTimes)
	p := OffTopicLen
	dst[p] = byte(len(r.Topic))
	p++
	p += copy(dst[p:], r.Topic)
	be.PutUint16(dst[p:], uint16(len(r.Properties)))
	p += 2
	p += copy(dst[p:], r.Properties)
	be.PutUint32(dst[p:], uint32(len(r.Data)))
	p += 4
	copy(dst[p:], r.Data)
	r.Size = int32(n)
	be.PutUint32(dst[OffCRC:], CRC32C(dst[OffMsgID:n]))
}

// EncodeBlank writes a BLANK filler header into dst (len(dst) >= BlankMinSize)
// covering n bytes (at most MaxSegmentSize; see BlankEnds for larger
// segments written by older versions).
func EncodeBlank(dst []byte, n int) {
	binary.BigEndian.PutUint32(dst[OffSize:], uint32(n))
	binary.BigEndian.PutUint32(dst[OffMagic:], BlankMagic)
}

// BlankEnds reports whether a BLANK filler whose size field reads size,
// found rest bytes before the end of its segment, covers exactly that rest.
// The field is 32 bits: a segment larger than MaxSegmentSize (written before
// that bound existed) holds fillers whose size is the rest modulo 2^32.
func BlankEnds(size int, rest int64) bool {
	return rest >= BlankMinSize && uint32(size) == uint32(rest) && int64(size) <= rest
}

// PeekRecord reads size and magic at the start of b without verifying the
// record. ok is false when b holds fewer than 8 bytes.
func PeekRecord(b []byte) (size int, magic uint32, ok bool) {
	if len(b) < BlankMinSize {
		return 0, 0, false
	}
	return int(binary.BigEndian.Uint32(b[OffSize:])), binary.BigEndian.Uint32(b[OffMagic:]), true
}

// DecodeRecord decodes and verifies the record at the start of b: magic,
// size, layout and CRC. On success it returns the record (aliasing b) and
// its size. A BLANK filler returns ErrBlank with its size so scanners can
// skip it. maxSize bounds the size field (0 = no bound beyond len(b)).
func DecodeRecord(b []byte, maxSize int) (Record, int, error) {
	var r Record
	size, magic, ok := PeekRecord(b)
	if ok && magic == RecordMagic && maxSize > 0 && size > maxSize {
		return r, 0, ErrBadSize
	}
	rec, topic, props, data, err := splitRecord(b, true)
	if err != nil {
		if err == ErrBlank {
			return r, size, err
		}
		return r, 0, err
	}
	fillRecord(&r, rec, topic, props, data) // the layout was checked once, by splitRecord
	return r, size, nil
}

// SplitRecord checks the record at the start of b as DecodeRecord does —
// magic, size, layout and, when crc is set, the CRC-32C — without decoding
// its fixed fields (read them at their Off… offsets): it returns the whole
// record (len(rec) is its size), its properties and where its data starts.
// A BLANK filler returns ErrBlank with rec covering the filler (skip
// len(rec) bytes), clipped to b.
func SplitRecord(b []byte, crc bool) (rec, props []byte, data int, err error) {
	rec, _, props, data, err = splitRecord(b, crc)
	return rec, props, data, err
}

// SplitRecordTopic is SplitRecord with the CRC checked, returning the
// topic's bytes too: a replica's check of the records it receives
// (broker/store) needs both, and each record is looked at once.
func SplitRecordTopic(b []byte) (rec, topic, props []byte, err error) {
	rec, topic, props, _, err = splitRecord(b, true)
	return rec, topic, props, err
}

// splitRecord is SplitRecord returning the topic too (DecodeRecord fills
// a Record from it without checking the layout again).
func splitRecord(b []byte, crc bool) (rec, topic, props []byte, data int, err error) {
	size, magic, ok := PeekRecord(b)
	if !ok {
		return nil, nil, nil, 0, ErrShortRecord
	}
	switch magic {
	case RecordMagic:
	case BlankMagic:
		if size < BlankMinSize {
			return nil, nil, nil, 0, ErrBadSize
		}
		return b[:min(size, len(b))], nil, nil, 0, ErrBlank
	default:
		return nil, nil, nil, 0, ErrBadMagic
	}
	if size < RecordOverhead+1 || size > 1<<31-1 {
		return nil, nil, nil, 0, ErrBadSize
	}
	if len(b) < size {
		return nil, nil, nil, 0, ErrShortRecord
	}
	rec = b[:size:size]
	topic, props, data, err = RecordLayout(rec)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if crc && binary.BigEndian.Uint32(rec[OffCRC:]) != CRC32C(rec[OffMsgID:]) {
		return nil, nil, nil, 0, ErrBadCRC
	}
	return rec, topic, props, data, nil
}

// DecodeRecordNoCRC decodes like DecodeRecord but skips the checksum; for
// readers that verified the record before (the dispatcher on its own log).
func DecodeRecordNoCRC(b []byte) (Record, int, error) {
	var r Record
	size, magic, ok := PeekRecord(b)
	if !ok {
		return r, 0, ErrShortRecord
	}
	if magic == BlankMagic {
		if size < BlankMinSize {
			return r, 0, ErrBadSize
		}
		return r, size, ErrBlank
	}
	if magic != RecordMagic {
		return r, 0, ErrBadMagic
	}
	if size < RecordOverhead+1 {
		return r, 0, ErrBadSize
	}
	if len(b) < size {
		return r, 0, ErrShortRecord
	}
	if err := decodeFieldsInto(&r, b[:size]); err != nil {
		return r, 0, err
	}
	return r, size, nil
}

// RecordLayout checks the variable part of a whole record (rec is exactly
// the record, at least RecordOverhead+1 bytes): a topic of 1..255 bytes,
// then the properties and data whose lengths must end exactly at the
// record's end. It returns the topic, the properties and where the data
// starts; the fixed fields are read at their Off… offsets.
func RecordLayout(rec []byte) (topic, props []byte, data int, err error) {
	be := binary.BigEndian
	size := len(rec)
	p := OffTopicLen
	tl := int(rec[p])
	p++
	if tl == 0 || p+tl+2 > size {
		return nil, nil, 0, ErrBadLayout
	}
	topic = rec[p : p+tl]
	p += tl
	pl := int(be.Uint16(rec[p:]))
	p += 2
	if p+pl+4 > size {
		return nil, nil, 0, ErrBadLayout
	}
	props = rec[p : p+pl]
	p += pl
	if int(be.Uint32(rec[p:])) != size-p-4 {
		return nil, nil, 0, ErrBadLayout
	}
	return topic, props, p + 4, nil
}

func decodeFieldsInto(r *Record, rec []byte) error {
	topic, props, p, err := RecordLayout(rec)
	if err != nil {
		return err
	}
	fillRecord(r, rec, topic, props, p)
	return nil
}

// fillRecord sets r from a record whose layout RecordLayout checked (topic,
// props and data p are what it returned).
func fillRecord(r *Record, rec, topic, props []byte, p int) {
	be := binary.BigEndian
	size := len(rec)
	*r = Record{
		Size:           int32(size),
		MsgID:          int64(be.Uint64(rec[OffMsgID:])),
		Flag:           int32(be.Uint32(rec[OffFlag:])),
		Partition:      int32(be.Uint32(rec[OffPartition:])),
		QueueOffset:    int64(be.Uint64(rec[OffQueueOffset:])),
		PhysicalOffset: int64(be.Uint64(rec[OffPhysicalOffset:])),
		StoreTime:      int64(be.Uint64(rec[OffStoreTime:])),
		BornTime:       int64(be.Uint64(rec[OffBornTime:])),
		SysFlag:        be.Uint16(rec[OffSysFlag:]),
		ReconsumeTimes: be.Uint16(rec[OffReconsumeTimes:]),
		Topic:          topic,
		Properties:     props,
		Data:           rec[p:size:size],
	}
}

// RecordIterator walks the records of a `value` block.
//
//	it := protocol.NewRecordIterator(block)
//	for it.Next() { r := it.Record() ... }
//	if err := it.Err(); err != nil { ... }
type RecordIterator struct {
	buf []byte
	rec Record
	err error
}

// NewRecordIterator iterates over the records in b (a value block).
func NewRecordIterator(b []byte) *RecordIterator { return &RecordIterator{buf: b} }

// Next advances to the next record; it returns false at the end or on error.
func (it *RecordIterator) Next() bool {
	for len(it.buf) > 0 && it.err == nil {
		r, n, err := DecodeRecord(it.buf, 0)
		if err == ErrBlank {
			it.buf = it.buf[min(n, len(it.buf)):]
			continue
		}
		if err != nil {
			it.err = err
			return false
		}
		it.rec = r
		it.buf = it.buf[n:]
		return true
	}
	return false
}

// Record returns the current record (valid until the next call to Next).
func (it *RecordIterator) Record() *Record { return &it.rec }

// Err returns the first decode error met.
func (it *RecordIterator) Err() error { return it.err }
