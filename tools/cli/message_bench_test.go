package cli

import (
	"io"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
)

// BenchmarkPrintMessage is `metaq consume`'s output of one 100-byte message
// in each --format.
func BenchmarkPrintMessage(b *testing.B) {
	m := &client.Message{Topic: "orders", Body: []byte("order 4711 paid by customer 42, 3 items, total 99.90 EUR, shipping to the warehouse in Hangzhou"),
		Tag: "paid", Keys: []string{"order-4711"}, MsgID: 1<<48 | 12345, Partition: client.Partition{BrokerID: 1, Partition: 2},
		Offset: 77, StoreTime: time.UnixMilli(1764547200000), BornTime: time.UnixMilli(1764547200000)}
	for _, f := range []string{formatText, formatVerbose, formatJSON} {
		b.Run(f, func(b *testing.B) {
			b.SetBytes(int64(len(m.Body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := printMessage(io.Discard, f, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
