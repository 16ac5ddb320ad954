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
	})
}
