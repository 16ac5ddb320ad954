package store

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

// indexFields (the dispatcher's decode) accepts exactly the records
// protocol.DecodeRecordNoCRC accepts and reads the same fields.
func FuzzIndexFields(f *testing.F) {
	for _, props := range []string{"", "tag=a", "tag=b&keys=k1%20k2"} {
		r := protocol.Record{MsgID: 9, Partition: 3, QueueOffset: 77, StoreTime: 1234, Topic: []byte("topic"),
			Properties: []byte(props), Data: []byte("body")}
		b := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
		protocol.EncodeRecord(b, &r)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= protocol.BlankMinSize {
			binary.BigEndian.PutUint32(b[protocol.OffSize:], uint32(len(b))) // the dispatcher cuts records by their size
			if binary.BigEndian.Uint32(b[protocol.OffMagic:]) == protocol.BlankMagic {
				return // skipped before decoding
			}
		}
		got, err := indexFields(b)
		want, _, werr := protocol.DecodeRecordNoCRC(b)
		if (err == nil) != (werr == nil) {
			t.Fatalf("indexFields err %v, DecodeRecordNoCRC err %v", err, werr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(got.topic, want.Topic) || !bytes.Equal(got.props, want.Properties) || got.partition != want.Partition ||
			got.queueOffset != want.QueueOffset || got.storeTime != want.StoreTime {
			t.Fatalf("indexFields %+v, DecodeRecordNoCRC %+v", got, want)
		}
	})
}
