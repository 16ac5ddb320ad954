package protocol

import (
	"bytes"
	"fmt"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	var block []byte
	var want []MessageData
	for i := 0; i < 20; i++ {
		d := MessageData{Flag: int32(i - 10), Payload: []byte(fmt.Sprint("payload ", i))}
		if i%3 == 0 {
			d.Props = []byte("tag=t" + fmt.Sprint(i))
		}
		if i%5 == 0 {
			d.Attr, d.HasAttr = "attr", true
		}
		before := len(block)
		block = AppendBatchEntry(block, &d)
		if n := len(block) - before; n != BatchEntryLen(&d) {
			t.Fatalf("entry %d: %d bytes, BatchEntryLen %d", i, n, BatchEntryLen(&d))
		}
		want = append(want, d)
	}
	frame := AppendBatchPutHeader(nil, "topic", 3, len(want), len(block), MessageChecksum(block), 77)
	frame = append(frame, block...)
	var got []Command
	var p Parser
	err := p.Parse(frame, func(c *Command) error {
		cc := *c
		cc.Data = append([]byte(nil), c.Data...)
		cc.Topic = append([]byte(nil), c.Topic...)
		got = append(got, cc)
		return nil
	})
	if err != nil || len(got) != 1 {
		t.Fatalf("parse: %v, %d commands", err, len(got))
	}
	c := got[0]
	if c.Err != nil || c.Op != OpBatchPut || string(c.Topic) != "topic" || c.Partition != 3 || c.Count != 20 || c.Opaque != 77 {
		t.Fatalf("command %+v err %v", c, c.Err)
	}
	rest := c.Data
	for i, d := range want {
		flag, data, r, err := NextBatchEntry(rest)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if flag != d.SendFlag() || !bytes.Equal(data, d.AppendTo(nil)) {
			t.Fatalf("entry %d: flag %d data %q", i, flag, data)
		}
		rest = r
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}

	body := AppendBatchResultStart(nil, 3, 100)
	for _, id := range []int64{1, 2, 1 << 50} {
		body = AppendBatchResultID(body, id)
	}
	part, first, ids, err := ParseBatchPutResult(body, nil)
	if err != nil || part != 3 || first != 100 || len(ids) != 3 || ids[2] != 1<<50 {
		t.Fatalf("result %d %d %v %v", part, first, ids, err)
	}
	for _, bad := range []string{"", "3", "3 x", "3 1 ", "3 1 a", "3  1 2"} {
		if _, _, _, err := ParseBatchPutResult([]byte(bad), nil); err == nil {
			t.Errorf("ParseBatchPutResult(%q) accepted", bad)
		}
	}
}

func TestBatchAllocations(t *testing.T) {
	var block []byte
	for i := 0; i < 100; i++ {
		d := MessageData{Payload: bytes.Repeat([]byte{'x'}, 100)}
		block = AppendBatchEntry(block, &d)
	}
	ids := make([]int64, 0, 100)
	body := AppendBatchResultStart(nil, 0, 5)
	for i := 0; i < 100; i++ {
		body = AppendBatchResultID(body, int64(i)<<20)
	}
	runs := AppendBatchRun(AppendBatchRun(AppendBatchRunsStart(nil, 0, 5, 7), 176, 99), 180, 1)
	hdr := make([]byte, 0, 32)
	n := testing.AllocsPerRun(100, func() {
		rest := block
		for len(rest) > 0 {
			_, _, r, err := NextBatchEntry(rest)
			if err != nil {
				t.Fatal(err)
			}
			rest = r
		}
		if _, _, _, err := ParseBatchPutResult(body, ids); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := ParseBatchPutRuns(runs, 100, ids); err != nil {
			t.Fatal(err)
		}
		hdr = AppendBatchEntryHeader(hdr[:0], 100, -7)
	})
	if n != 0 {
		t.Fatalf("%v allocations per block", n)
	}
}

// FuzzBatchBlock splits arbitrary blocks: never a panic, every entry's data
// lies inside the block, and the parts add up to the block.
func FuzzBatchBlock(f *testing.F) {
	f.Add([]byte("3 0\r\nabc5 2\ntag=x"))
	f.Add([]byte("0 0\n"))
	f.Add([]byte("99999999999 0\r\n"))
	f.Add([]byte("-1 0\r\nx"))
	f.Add([]byte("1 -2147483649\r\nx"))
	f.Add([]byte("12345678901234567890123456789012345 0\n"))
	f.Add([]byte("3 2\r\nabc"))
	f.Add([]byte("0 1 5 176x6 4"))
	f.Add([]byte("00000000005 0\nabcde"))
	f.Add([]byte("5 -0\r\nabcde"))
	f.Fuzz(func(t *testing.T, block []byte) {
		rest := block
		total := 0
		for k := 0; len(rest) > 0 && k < MaxBatchCount; k++ {
			_, data, r, err := NextBatchEntry(rest)
			if err != nil {
				return
			}
			if len(r) >= len(rest) || len(data) > len(rest) {
				t.Fatalf("no progress: %d → %d", len(rest), len(r))
			}
			total += len(rest) - len(r)
			rest = r
		}
		if total+len(rest) != len(block) {
			t.Fatalf("parts %d + %d != %d", total, len(rest), len(block))
		}
		_, _, _, _ = ParseBatchPutResult(block, nil)
		if _, _, ids, err := ParseBatchPutRuns(block, 7, nil); err == nil && len(ids) != 7 {
			t.Fatalf("runs parsed into %d ids for 7 messages", len(ids))
		}
		// The one-pass header parser agrees with the straightforward one
		// (refNextBatchEntry) except on numbers zero-padded past 10 digits.
		f1, d1, r1, err1 := NextBatchEntry(block)
		f2, d2, r2, err2 := refNextBatchEntry(block)
		switch {
		case err1 == nil && (err2 != nil || f1 != f2 || !bytes.Equal(d1, d2) || len(r1) != len(r2)):
			t.Fatalf("NextBatchEntry %d %q %d, reference %d %q %d %v", f1, d1, len(r1), f2, d2, len(r2), err2)
		case err1 != nil && err2 == nil && !longNumber(block):
			t.Fatalf("NextBatchEntry refused (%v) what the reference accepts", err1)
		case err1 != nil && err2 != nil && err1 != err2 && !longNumber(block):
			t.Fatalf("NextBatchEntry says %v, the reference %v", err1, err2)
		}
	})
}

// refNextBatchEntry is NextBatchEntry written plainly: a bounded header
// line split at its space.
func refNextBatchEntry(b []byte) (flag int32, data, rest []byte, err error) {
	w := b
	if len(w) > 32 {
		w = w[:32]
	}
	nl := bytes.IndexByte(w, '\n')
	if nl < 0 {
		return 0, nil, nil, errEntryHeader
	}
	line := trimCR(w[:nl])
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, nil, nil, errEntryHeader
	}
	size, ok1 := parseInt64(line[:sp])
	f, ok2 := parseInt32(line[sp+1:])
	if !ok1 || !ok2 || size < 0 || line[0] == '-' {
		return 0, nil, nil, errEntryHeader
	}
	b = b[nl+1:]
	if size > int64(len(b)) {
		return 0, nil, nil, errEntrySize
	}
	return f, b[:size:size], b[size:], nil
}

// longNumber reports whether b's header has a number of more than 10
// digits (which NextBatchEntry refuses even when zero-padded).
func longNumber(b []byte) bool {
	run := 0
	for _, c := range b {
		if c == '\n' {
			return false
		}
		if c >= '0' && c <= '9' {
			if run++; run > 10 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

func TestBatchRuns(t *testing.T) {
	body := AppendBatchRunsStart(nil, 3, 100, 1<<48|500)
	body = AppendBatchRun(body, 176, 3)
	body = AppendBatchRun(body, 200, 1)
	body = AppendBatchRun(body, 90, 2)
	if string(body) != "3 100 281474976711156 176x3 200 90x2" {
		t.Fatalf("body %q", body)
	}
	part, first, ids, err := ParseBatchPutRuns(body, 6, nil)
	want := []int64{1<<48 | 500, 1<<48 | 676, 1<<48 | 852, 1<<48 | 1028, 1<<48 | 1228, 1<<48 | 1318}
	if err != nil || part != 3 || first != 100 || fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("runs %d %d %v %v, want ids %v", part, first, ids, err, want)
	}
	for _, bad := range []string{"", "3", "3 1", "3 1 5", "3 1 5 176x5", "3 1 5 176x7", "3 1 5 176x0 176x6",
		"3 1 5 176x6 ", "3 1 5 176 x5", "3 1 5 10x6", "3 1 -5 176x6", "3 -1 5 176x6", "3 1 5 176y6", "3 1 5 176x6 1"} {
		if _, _, _, err := ParseBatchPutRuns([]byte(bad), 6, nil); err == nil {
			t.Errorf("ParseBatchPutRuns(%q, 6) accepted", bad)
		}
	}
	for _, c := range []struct {
		size int
		flag int32
	}{{0, 0}, {100, -7}, {1 << 30, 1<<31 - 1}, {5, -1 << 31}} {
		h := AppendBatchEntryHeader(nil, c.size, c.flag)
		if want := fmt.Sprintf("%d %d\r\n", c.size, c.flag); string(h) != want {
			t.Errorf("AppendBatchEntryHeader(%d, %d) = %q, want %q", c.size, c.flag, h, want)
		}
	}
}

// The header's optional fields: a checksum, `runs`, both, or neither.
func TestBatchPutHeaderForms(t *testing.T) {
	block := AppendBatchEntry(nil, &MessageData{Payload: []byte("abc")})
	sum := MessageChecksum(block)
	cases := []struct {
		line    string
		runs    bool
		hasSum  bool
		wantErr string
	}{
		{string(AppendBatchPutHeader(nil, "t", 1, 1, len(block), ChecksumNone, 9)), false, false, ""},
		{string(AppendBatchPutHeader(nil, "t", 1, 1, len(block), sum, 9)), false, true, ""},
		{string(AppendBatchPutRunsHeader(nil, "t", 1, 1, len(block), ChecksumNone, 9)), true, false, ""},
		{string(AppendBatchPutRunsHeader(nil, "t", 1, 1, len(block), sum, 9)), true, true, ""},
		{fmt.Sprintf("mput t 1 1 %d runz 9\r\n", len(block)), false, false, "invalid checksum"},
		{fmt.Sprintf("mput t 1 1 %d %d rnus 9\r\n", len(block), sum), false, false, "usage"},
		{fmt.Sprintf("mput t 1 1 %d runs %d 9\r\n", len(block), sum), false, false, "usage"},
	}
	for _, tc := range cases {
		var p Parser
		var got Command
		err := p.Parse(append([]byte(tc.line), block...), func(c *Command) error { got = *c; return nil })
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if tc.wantErr != "" {
			if got.Err == nil || !bytes.Contains([]byte(got.Err.Msg), []byte(tc.wantErr)) {
				t.Errorf("%q: error %v, want %q", tc.line, got.Err, tc.wantErr)
			}
			continue
		}
		if got.Err != nil || got.BatchRuns != tc.runs || got.HasChecksum != tc.hasSum || got.Opaque != 9 || got.Count != 1 {
			t.Errorf("%q: %+v", tc.line, got)
		}
	}
}

// An entry takes at least MinBatchEntry bytes (`0 0\n`), so a header
// announcing more entries than its block can hold is refused from the header
// (the broker sizes its scratch from the count), the block skipped.
func TestBatchPutCountBoundedByBlock(t *testing.T) {
	cases := []struct {
		in      string
		count   int32
		wantErr bool
	}{
		{"mput t 1 1 4 9\r\n0 0\n", 1, false},
		{"mput t 1 2 8 9\r\n0 0\n0 0\n", 2, false},
		{"mput t 1 2 7 9\r\n0 0\n0 0", 0, true},
		{fmt.Sprintf("mput t 0 %d 4 9\r\n0 0\n", MaxBatchCount), 0, true},
	}
	for _, tc := range cases {
		var p Parser
		var got []Command
		if err := p.Parse([]byte(tc.in+"version 1\r\n"), func(c *Command) error { got = append(got, *c); return nil }); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if len(got) != 2 || got[1].Op != OpVersion {
			t.Fatalf("%q: %d commands, the block not skipped", tc.in, len(got))
		}
		c := got[0]
		if tc.wantErr {
			if c.Err == nil || c.Err.Code != StatusBadRequest || !bytes.Contains([]byte(c.Err.Msg), []byte("an entry takes at least 4")) || c.Opaque != 9 {
				t.Errorf("%q: %+v, want 400 (count beyond the block)", tc.in, c.Err)
			}
			continue
		}
		if c.Err != nil || c.Count != tc.count {
			t.Errorf("%q: %+v", tc.in, c)
		}
	}
}
