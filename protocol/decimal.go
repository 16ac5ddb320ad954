package protocol

import (
	"encoding/binary"
	"math/bits"
)

// Decimal rendering for the encoders and replies (reply.go, encode.go,
// batch.go). Every put reply carries five numbers, its msgId ~15-19
// digits, so the digits are made eight at a time: one 64-bit division per
// eight digits, then the eight digits at once in one 64-bit register
// (digits8) and one store, instead of a chain of 64-bit divisions by 100
// and two byte stores per pair (BenchmarkAppendPutResult, issue 21).
// TestDecimal compares them with strconv.

// pow10 holds 10^0 … 10^19.
var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
	1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// uintLen returns the number of decimal digits of u (1 for 0).
func uintLen(u uint64) int {
	u |= 1 // 0 has one digit, as 1 has
	// floor(log10(2^Len64(u))): the number of digits, or one less.
	t := bits.Len64(u) * 1233 >> 12
	if u < pow10[t] {
		return t
	}
	return t + 1
}

// intLen returns the number of bytes of the decimal form of v.
func intLen(v int64) int {
	if v < 0 {
		return 1 + uintLen(-uint64(v))
	}
	return uintLen(uint64(v))
}

// digits8 returns w (< 1e8) as eight decimal digit values, leading zeros
// included, one a byte, the first digit in the low byte (the order of a
// little-endian store). Each step splits every lane in two with a
// multiply-shift division that is exact for the lane's range: the 4-digit
// halves by 100 (n*5243>>19 = n/100 for n < 43699), the 2-digit quarters
// by 10 (n*103>>10 = n/10 for n < 179); no lane's product reaches the next
// lane.
func digits8(w uint32) uint64 {
	x := uint64(w/10000) | uint64(w%10000)<<32
	y := x * 5243 >> 19 & 0x0000007F_0000007F
	x = y | (x-y*100)<<16
	y = x * 103 >> 10 & 0x000F000F_000F000F
	return y | (x-y*10)<<8
}

// putDecBack writes v in decimal so that it ends just before b[end] and
// returns the index of its first byte. It stores whole 8-byte words, the
// first one below the number's start: bytes of b[end-24:end] before the
// returned index are overwritten with junk, so a caller renders right to
// left and writes what lies left of a number after the number.
func putDecBack(b []byte, end int, v int64) int {
	u := uint64(v)
	if v < 0 {
		u = -u
	}
	i := end
	for u >= 1e8 {
		q := u / 1e8
		binary.LittleEndian.PutUint64(b[i-8:i], digits8(uint32(u-q*1e8))|0x30303030_30303030)
		i -= 8
		u = q
	}
	d := digits8(uint32(u))
	binary.LittleEndian.PutUint64(b[i-8:i], d|0x30303030_30303030)
	i -= 8 - bits.TrailingZeros64(d|1<<56)/8 // the leading zeros' bytes are zero (the last digit counts, even 0)
	if v < 0 {
		i--
		b[i] = '-'
	}
	return i
}

// putIntBack is putDecBack into a stack buffer (room: 24 bytes before end).
func putIntBack(b *[64]byte, end int, v int64) int { return putDecBack(b[:], end, v) }
