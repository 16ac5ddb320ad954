package protocol

import (
	"bytes"
	"strings"
	"testing"
)

// putStream returns n pipelined 100-byte puts as a MetaQ >= 1.4.4 client
// sends them (7-field, with checksum) or as the Python/Ruby clients do.
func putStream(n int, withChecksum bool) []byte {
	payload := bytes.Repeat([]byte("x"), 100)
	checksum := ChecksumNone
	if withChecksum {
		checksum = MessageChecksum(payload)
	}
	var b []byte
	for i := 0; i < n; i++ {
		b = AppendPut(b, "benchmark-topic", int32(i%8), 0, checksum, "", int32(i), payload)
	}
	return b
}

func benchParse(b *testing.B, stream []byte, chunk int) {
	var p Parser
	n := 0
	h := func(c *Command) error { n++; return nil }
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for off := 0; off < len(stream); off += chunk {
			if err := p.Parse(stream[off:min(off+chunk, len(stream))], h); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/cmd")
}

// 1,000 pipelined 100-byte puts in one buffer (~125 KB).
func BenchmarkParsePut100(b *testing.B) { benchParse(b, putStream(1000, false), 1<<30) }

// Same, verifying a checksum per put (CRC32-IEEE of 100 bytes).
func BenchmarkParsePut100Checksum(b *testing.B) { benchParse(b, putStream(1000, true), 1<<30) }

// Same stream read in 32 KiB chunks, as a connection reads it: puts split
// across reads are accumulated.
func BenchmarkParsePut100Chunked32K(b *testing.B) { benchParse(b, putStream(1000, false), 32<<10) }

// Worst case: 4 KiB reads, 1 MiB puts all assembled in the parser's buffer.
func BenchmarkParsePut1MChunked4K(b *testing.B) {
	payload := bytes.Repeat([]byte("y"), 1<<20)
	stream := AppendPut(nil, "t", 0, 0, ChecksumNone, "", 1, payload)
	benchParse(b, stream, 4<<10)
}

func BenchmarkParseGet(b *testing.B) {
	var s []byte
	for i := 0; i < 1000; i++ {
		s = AppendGet(s, "benchmark-topic", "benchmark-group", int32(i%8), int64(i)*17, 1<<20, int32(i), 3000, "")
	}
	benchParse(b, s, 1<<30)
}

func BenchmarkAppendPutResult(b *testing.B) {
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendPutResult(dst[:0], 281474976714752+int64(i), 3, int64(i), int32(i))
	}
	b.SetBytes(int64(len(dst)))
}

func BenchmarkAppendResultString(b *testing.B) {
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendResultString(dst[:0], StatusNotFound, "no new message", int32(i))
	}
	b.SetBytes(int64(len(dst)))
}

func BenchmarkAppendValueHeader(b *testing.B) {
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendValueHeader(dst[:0], 1048576, int32(i))
	}
	b.SetBytes(int64(len(dst)))
}

func BenchmarkAppendPut100(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 100)
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendPut(dst[:0], "benchmark-topic", 3, 0, ChecksumNone, "", int32(i), payload)
	}
	b.SetBytes(int64(len(dst)))
}

// Client side: read 1,000 put results.
func BenchmarkReplyReaderPutResults(b *testing.B) {
	var s []byte
	for i := 0; i < 1000; i++ {
		s = AppendPutResult(s, 281474976714752+int64(i), 3, int64(i), int32(i))
	}
	rr := NewReplyReader(&cycleReader{b: s}, 0)
	b.SetBytes(int64(len(s)) / 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := rr.Next()
		if err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := ParsePutResult(rep.Body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStatsBody(b *testing.B) {
	keys := strings.Fields("pid broker_id uptime version curr_connections threads_count cmd_put cmd_get cmd_offset tx_begin")
	var body, dst []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		body = AppendStatsStart(body[:0])
		for j, k := range keys {
			body = AppendStatInt(body, k, int64(i+j))
		}
		body = AppendStatsEnd(body)
		dst = AppendResult(dst[:0], StatusSuccess, body, int32(i))
	}
	b.SetBytes(int64(len(dst)))
}

// BenchmarkDecodeRecord100: decode and verify one record of 100 data bytes
// (the store's readers and the replication apply path call it per record).
func BenchmarkDecodeRecord100(b *testing.B) {
	in := &Record{Topic: []byte("topic-1"), Properties: []byte("k=v"), Data: make([]byte, 100)}
	rec := make([]byte, RecordSize(len(in.Topic), len(in.Properties), len(in.Data)))
	EncodeRecord(rec, in)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRecord(rec, 0); err != nil {
			b.Fatal(err)
		}
	}
}
