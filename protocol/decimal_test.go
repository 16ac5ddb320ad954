package protocol

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// decimalEdges are the values a renderer gets wrong: 0, ±1, the int32 and
// int64 limits, and 10^k-1, 10^k, 10^k+1 and their negatives for every k.
func decimalEdges() []int64 {
	vs := []int64{0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64,
		math.MaxInt64 - 1, math.MinInt64 + 1, 1 << 48, 1<<48 | 4096, 1<<63 - 1<<48}
	p := int64(1)
	for k := 1; k <= 18; k++ {
		p *= 10
		for _, v := range []int64{p - 1, p, p + 1} {
			vs = append(vs, v, -v)
		}
	}
	return vs
}

// checkDecimal compares every renderer of decimal.go, AppendPutResult and
// the length helpers with strconv for v.
func checkDecimal(t *testing.T, v int64) {
	t.Helper()
	want := strconv.FormatInt(v, 10)
	var b [64]byte
	for _, end := range []int{len(b), 24 + len(want)} {
		if i := putIntBack(&b, end, v); string(b[i:end]) != want {
			t.Fatalf("putIntBack(%d) end %d = %q", v, end, b[i:end])
		}
	}
	if n := intLen(v); n != len(want) {
		t.Fatalf("intLen(%d) = %d, want %d", v, n, len(want))
	}
	if v >= 0 {
		if n := uintLen(uint64(v)); n != len(want) {
			t.Fatalf("uintLen(%d) = %d", v, n)
		}
	}
	if got := appendIntField([]byte("x"), v); string(got) != "x "+want {
		t.Fatalf("appendIntField(%d) = %q", v, got)
	}
	for _, o := range []int32{int32(v), int32(v >> 32), math.MinInt32, math.MaxInt32, 0} {
		body := want + " " + strconv.Itoa(int(o)) + " " + strconv.FormatInt(-v>>1, 10)
		wantReply := "pre" + string(AppendResultString(nil, StatusSuccess, body, o))
		got := AppendPutResult([]byte("pre"), v, o, -v>>1, o)
		if string(got) != wantReply {
			t.Fatalf("AppendPutResult(%d, %d, %d, %d) = %q, want %q", v, o, -v>>1, o, got, wantReply)
		}
		if n := PutResultBodyLen(v, o, -v>>1); n != len(body) {
			t.Fatalf("PutResultBodyLen = %d, want %d", n, len(body))
		}
	}
}

func TestDecimal(t *testing.T) {
	for _, v := range decimalEdges() {
		checkDecimal(t, v)
	}
	if n := uintLen(math.MaxUint64); n != 20 {
		t.Fatalf("uintLen(MaxUint64) = %d", n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		checkDecimal(t, r.Int64()>>r.IntN(64)*(1-2*r.Int64N(2)))
	}
	for u := uint64(0); u < 1e8; u += 1 + u>>6 {
		if d := digits8(uint32(u)) | 0x30303030_30303030; string(appendLE(nil, d)) != strconv.FormatUint(u+1e8, 10)[1:] {
			t.Fatalf("digits8(%d) = %q", u, appendLE(nil, d))
		}
	}
}

func appendLE(b []byte, d uint64) []byte {
	for range 8 {
		b = append(b, byte(d))
		d >>= 8
	}
	return b
}

func FuzzDecimal(f *testing.F) {
	for _, v := range decimalEdges() {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) { checkDecimal(t, v) })
}
