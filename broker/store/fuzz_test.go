package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

// fuzzSegment builds an 8 KiB commit-log segment holding valid records of
// topic "f" (partitions 0 and 1), then zeros.
func fuzzSegment() []byte {
	seg := make([]byte, 8192)
	pos := 0
	next := [2]int64{}
	for i := 0; i < 12; i++ {
		p := int32(i % 2)
		r := protocol.Record{MsgID: protocol.MakeMsgID(1, int64(pos)), Partition: p, QueueOffset: next[p],
			PhysicalOffset: int64(pos), StoreTime: int64(1000 + i), BornTime: 5, Topic: []byte("f"),
			Properties: []byte("tag=a&keys=k"), Data: bytes.Repeat([]byte{byte(i)}, 30*i)}
		n := protocol.RecordSize(1, len(r.Properties), len(r.Data))
		protocol.EncodeRecord(seg[pos:pos+n], &r)
		pos += n
		next[p]++
	}
	return seg
}

// FuzzRecoverLog overwrites part of a crashed store's commit log with
// arbitrary bytes and checks that recovery neither panics nor fails, and that
// everything it serves afterwards verifies, with increasing offsets.
func FuzzRecoverLog(f *testing.F) {
	seg := fuzzSegment()
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0xFF}, uint16(5))                      // torn size of the first record
	f.Add([]byte("\x00\x00\x00\x10BLNK"), uint16(120))  // blank in the middle of a record
	f.Add(seg[200:400], uint16(1000))                   // a valid-looking copy at the wrong place
	f.Add([]byte("\x00\x00\x1f\xf0BLNK"), uint16(2000)) // blank filler after the records
	f.Fuzz(func(t *testing.T, data []byte, at uint16) {
		dir := t.TempDir()
		img := fuzzSegment()
		off := int(at) % len(img)
		copy(img[off:], data)
		os.MkdirAll(filepath.Join(dir, "commitlog"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, "commitlog", segmentName(0)), img, 0o644); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "abort"), nil, 0o644)
		cfg := testConfig(t, dir)
		cfg.BrokerID = 1
		cfg.SegmentSize = 8192
		s, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		for _, ti := range s.Topics() {
			for _, pi := range ti.Partitions {
				prev := int64(-1)
				for _, r := range readAll(t, s, ti.Topic, pi.Partition, pi.Min, nil) {
					if r.QueueOffset <= prev || r.QueueOffset >= pi.Max || string(r.Topic) != ti.Topic || r.Partition != pi.Partition {
						t.Fatalf("%s/%d: bad record at offset %d (prev %d, max %d)", ti.Topic, pi.Partition, r.QueueOffset, prev, pi.Max)
					}
					prev = r.QueueOffset
				}
			}
		}
		checkSegments(t, s)
		if _, err := s.Append(&Message{Topic: "f", Data: []byte("after")}); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}

// FuzzDecodeMetadata feeds arbitrary bytes to the checkpoint, key-index
// header and index-unit decoders: no panic, and what decodes re-encodes to
// the same value.
func FuzzDecodeMetadata(f *testing.F) {
	var b [checkpointSize]byte
	(&checkpointData{flushed: 100, lastRecord: 20, dispatched: 90, logMin: 0, time: 7}).encode(b[:])
	f.Add(b[:])
	var k [keyHeaderSize]byte
	(&keyHeader{slots: 4, maxEntries: 8, entries: 3, beginTime: 1, endTime: 2, endPhys: 9}).encode(k[:])
	f.Add(k[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		if c, err := decodeCheckpoint(in); err == nil {
			var out [checkpointSize]byte
			c.encode(out[:])
			if c2, err := decodeCheckpoint(out[:]); err != nil || c2 != c {
				t.Fatalf("checkpoint round trip: %+v %+v %v", c, c2, err)
			}
		}
		if h, ok := decodeKeyHeader(in); ok {
			var out [keyHeaderSize]byte
			h.encode(out[:])
			if h2, ok := decodeKeyHeader(out[:]); !ok || h2 != h {
				t.Fatalf("key header round trip")
			}
		}
		if len(in) >= unitSize {
			phys, size, tag := getUnit(in)
			var u [unitSize]byte
			putUnit(u[:], phys, size, tag)
			if !bytes.Equal(u[:], in[:unitSize]) {
				t.Fatal("unit round trip")
			}
		}
		if len(in) >= keyEntrySize {
			h, phys, prev := getKeyEntry(in)
			var e [keyEntrySize]byte
			putKeyEntry(e[:], h, phys, int32(bytes.IndexByte(in, 0)), prev)
			if g, p2, pr2 := getKeyEntry(e[:]); g != h || p2 != phys || pr2 != prev {
				t.Fatal("key entry round trip")
			}
		}
	})
}
