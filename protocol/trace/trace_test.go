package trace

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/protocol"
)

func sample() []Event {
	return []Event{
		{Type: Produce, MsgID: 281474976710912, Topic: "orders", Keys: "o-1 o-2", Tag: "paid", Time: 1767225600000, Cost: 812,
			OK: true, Host: "app1", Group: "shop", Broker: 1, Partition: 0, Offset: 41, Attempt: 1, Size: 120},
		{Type: ConsumeEnd, MsgID: 281474976710912, RecordID: 281474976711000, Topic: "orders", Time: 1767225600100, Cost: 5,
			Err: "boom & bust = 100%\u00e9", Host: "h", Group: "billing", Client: "c-1", Broker: 1, Partition: 2, Offset: -1,
			Attempt: 3, Reconsume: 2, Detail: "from %RETRY%billing"},
		{Type: Produce, MsgID: -1, Topic: "orders", Keys: "o-3", Err: "no partitions", Broker: -1, Partition: -1, Offset: -1},
		{Type: Store, MsgID: 0, Broker: 0, Partition: 0, Offset: 0, OK: true},
	}
}

func TestRoundTrip(t *testing.T) {
	var b Batch
	want := sample()
	for i := range want {
		b.Add(&want[i])
	}
	if err := Validate(b.Data); err != nil {
		t.Fatalf("Validate: %v\n%s", err, b.Data)
	}
	got, err := Decode(b.Data)
	if err != nil {
		t.Fatalf("Decode: %v\n%s", err, b.Data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// The keys property: the bucket of every id and record id (once; -1 = none) and every
	// key, so the key index finds them.
	props := append([]byte{}, b.Props...)
	keys := protocol.Keys(props)
	for _, k := range []string{BucketKey(281474976710912), BucketKey(281474976711000), "o-1", "o-2", "o-3", BucketKey(0)} {
		if !strings.Contains(" "+strings.Join(keys, " ")+" ", " "+k+" ") {
			t.Errorf("keys %q lack %s", keys, k)
		}
	}
	if len(keys) != 5 || BucketKey(281474976710912) != "~4294967296" {
		t.Errorf("keys property %q", b.Props)
	}
	// Lines after the first are continuation lines.
	if lines := strings.Split(string(b.Data), "\n"); !strings.HasPrefix(lines[0], "e=produce&id=") || lines[1][0] != '+' {
		t.Errorf("data %q", b.Data)
	}
	b.Reset()
	if b.N != 0 || len(b.Data) != 0 || len(b.Props) != 0 {
		t.Fatal("Reset left data")
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"e=produce&id=1",                      // no newline
		"id=1\n",                              // no type
		"e=produce\n",                         // no id
		"e=produce&id=x\n",                    // bad id
		"e=produce&id=1&o=-5\n",               // negative offset
		"e=produce&id=99999999999999999999\n", // overflow
		"e=produce&id=1\x01\n",                // control byte
		"e=produce&id=1\n\n",                  // empty line
		"e=produce&id=1&at=" + strings.Repeat("9", 30) + "\n",
		"e=x&id=1&d=" + strings.Repeat("a", MaxLine) + "\n",
		"+id=1\n",                             // a continuation first
		"e=p&id=5\n+id=-7\n",                  // id below -1
		"e=p&id=5&o=3\n+o=-5\n",               // offset below -1
		"e=p&id=5\n+b=-2\n",                   // broker below -1
		"e=p&id=1\n+id=9223372036854775807\n", // overflow
		"e=p&id=1\n+e=\n",                     // no type
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("Decode(%q) = %v, want ErrBadRecord", in, err)
		}
	}
	for _, in := range []string{"", "e=produce&id=1", "id=1\n", "e=produce\n", "e=&id=1\n", "e=p&id=x\n", "e=p&id=1\r\n", "x\n",
		"+id=1\n", "e=p&id=1\n+\r\n"} {
		if err := Validate([]byte(in)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("Validate(%q) = %v, want ErrBadRecord", in, err)
		}
	}
	// Unknown keys are ignored (later versions may add some).
	evs, err := Decode([]byte("e=produce&id=7&zz=1&t=a\n"))
	if err != nil || len(evs) != 1 || evs[0].Topic != "a" || evs[0].MsgID != 7 {
		t.Fatalf("unknown key: %v %+v", err, evs)
	}
}

// Continuation lines: differences, clearing, and what a producer's stream costs.
func TestContinuation(t *testing.T) {
	base := Event{Type: Produce, MsgID: 1 << 48, Topic: "bench", Time: 1767225600000, Cost: 812, OK: true,
		Host: "app-host-1", Group: "g", Broker: 1, Partition: 3, Offset: 123456, Attempt: 1, Size: 100}
	var want []Event
	for i := range 256 {
		e := base
		e.MsgID += int64(i) * 163
		e.Partition = i % 4
		e.Offset += int64(i / 4)
		e.Cost += int64(i % 7)
		e.Time += int64(i / 100)
		want = append(want, e)
	}
	// then fields that change and clear
	f := want[len(want)-1]
	f.OK, f.Err, f.Broker, f.Partition, f.Offset, f.MsgID, f.Keys = false, "timeout", -1, -1, -1, -1, "k1 k2"
	want = append(want, f)
	g := base
	g.Type, g.RecordID, g.Detail, g.Reconsume = ConsumeEnd, 5<<48, "from %RETRY%g", 2
	want = append(want, g, base)
	var b Batch
	for i := range want {
		b.Add(&want[i])
	}
	if err := Validate(b.Data); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b.Data)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.Data)
	}
	if !reflect.DeepEqual(got, want) {
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("event %d:\n got %+v\nwant %+v\n%s", i, got[i], want[i], b.Data)
			}
		}
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	if per := len(b.Data) / len(want); per > 32 {
		t.Errorf("%d bytes per event", per)
	}
	if n := strings.Count(string(b.Props), "~"); n > 4 {
		t.Errorf("keys %q: %d buckets for 256 neighbouring messages", b.Props, n)
	}
}

func TestTimelineOrder(t *testing.T) {
	var b1, b2 Batch
	evs := []Event{
		{Type: ConsumeEnd, MsgID: 5, Time: 20, Broker: -1, Partition: -1, Offset: -1},
		{Type: Produce, MsgID: 5, Time: 10, Broker: -1, Partition: -1, Offset: -1},
		{Type: ConsumeBegin, MsgID: 5, Time: 20, Broker: -1, Partition: -1, Offset: -1},
		{Type: Produce, MsgID: 6, Time: 1, Broker: -1, Partition: -1, Offset: -1},
	}
	b1.Add(&evs[0])
	b1.Add(&evs[3])
	b2.Add(&evs[1])
	b2.Add(&evs[2])
	b2.Add(&evs[2]) // a duplicate (a record read twice)
	store := Event{Type: Store, MsgID: 5, Time: 10, Broker: -1, Partition: -1, Offset: -1}
	got, bad := Timeline(5, &store, [][]byte{b1.Data, []byte("garbage"), b2.Data})
	if bad != 1 {
		t.Errorf("bad = %d, want 1", bad)
	}
	var types []Type
	for _, e := range got {
		types = append(types, e.Type)
	}
	want := []Type{Produce, Store, ConsumeBegin, ConsumeEnd}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("timeline %v, want %v", types, want)
	}
}

func TestValidateNoAlloc(t *testing.T) {
	var b Batch
	for _, e := range sample() {
		b.Add(&e)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Validate(b.Data) }); n != 0 {
		t.Fatalf("Validate allocates %v times", n)
	}
}

// FuzzDecode: Decode never panics, accepts only what re-encodes to an equal event list,
// and never accepts what Validate refuses.
func FuzzDecode(f *testing.F) {
	var b Batch
	for _, e := range sample() {
		b.Add(&e)
	}
	f.Add(b.Data)
	f.Add([]byte("e=produce&id=1\n"))
	f.Add([]byte("e=%zz&id=1&t=%\n"))
	f.Add([]byte("e=produce&id=1&o=4&p=1\n+id=2&o=-1&p=-1&ok=0&err=x\n+rid=0&e=retry&at=5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		verr := Validate(data)
		evs, err := Decode(data)
		if err != nil {
			return
		}
		if verr != nil {
			t.Fatalf("Decode accepted what Validate refused (%v): %q", verr, data)
		}
		var again Batch
		for i := range evs {
			again.Add(&evs[i])
		}
		evs2, err := Decode(again.Data)
		if err != nil || !reflect.DeepEqual(evs, evs2) {
			t.Fatalf("re-encoding %q: %v\n%+v\n%+v", data, err, evs, evs2)
		}
	})
}

// TestAddMoved: AddMoved writes exactly what Add writes for the same event, and declines what
// it cannot write (an empty batch, a copy's event, a negative id, an overflowing difference).
func TestAddMoved(t *testing.T) {
	base := Event{Type: Produce, MsgID: 1 << 48, Topic: "orders", Tag: "t", Time: 1767225600000, Cost: 812, OK: true,
		Host: "app1", Group: "shop", Broker: 1, Partition: 3, Offset: 41, Attempt: 1, Size: 100}
	var a, b Batch
	if b.AddMoved(1, 2, 3, 0, 4) {
		t.Fatal("AddMoved into an empty batch")
	}
	a.Add(&base)
	b.Add(&base)
	e := base
	steps := []struct {
		did, dat, cost int64
		part           int
		doff           int64
	}{{140, 0, 790, 0, -40}, {140, 1, 790, 1, 7}, {0, 0, 790, 1, 0}, {65536 * 3, 12, 1_234_567, -1, 1 << 40},
		{-5, -3, 0, 2, -1}, {9, 999999, 1000000, 3, 999999}}
	for i, s := range steps {
		e.MsgID += s.did
		e.Time += s.dat
		e.Cost = s.cost
		e.Partition = s.part
		e.Offset += s.doff
		a.Add(&e)
		if !b.AddMoved(e.MsgID, e.Time, e.Cost, e.Partition, e.Offset) {
			t.Fatalf("step %d declined", i)
		}
		if string(a.Data) != string(b.Data) || string(a.Props) != string(b.Props) || a.N != b.N {
			t.Fatalf("step %d:\nAdd      %q %q\nAddMoved %q %q", i, a.Data, a.Props, b.Data, b.Props)
		}
	}
	evs, err := Decode(b.Data)
	if err != nil || len(evs) != len(steps)+1 || evs[len(evs)-1].MsgID != e.MsgID || evs[len(evs)-1].Offset != e.Offset {
		t.Fatalf("decoded %v %+v", err, evs)
	}
	if b.AddMoved(-1, e.Time, 0, 0, 0) || b.AddMoved(e.MsgID, e.Time, 0, -2, 0) ||
		b.AddMoved(e.MsgID, -1<<63, 0, 0, e.Offset) {
		t.Fatal("AddMoved took what a continuation line cannot hold")
	}
	c := base
	c.RecordID = c.MsgID + 80
	var r Batch
	r.Add(&c)
	if r.AddMoved(c.MsgID+1, c.Time, 0, 0, 0) {
		t.Fatal("AddMoved after a copy's event")
	}
}

// TestAppendInt: appendInt writes what strconv does, around every boundary of its fast paths.
func TestAppendInt(t *testing.T) {
	var vs []int64
	for p := int64(1); p <= 1e12; p *= 10 {
		vs = append(vs, p-1, p, p+1, 2*p-1, 5*p+7)
	}
	vs = append(vs, 0, -1, -10, 100000009, 12345678, 99990001, 10000, 10001, 10010, 10100, 1<<62, -1<<63)
	for v := int64(0); v < 20000; v++ {
		vs = append(vs, v)
	}
	for _, v := range vs {
		if got, want := string(appendInt([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendInt(%d) = %q, want %q", v, got, want)
		}
	}
}

// FuzzAddMoved: for any step from an event, AddMoved writes exactly what Add writes (or declines,
// and then Add is what a writer uses).
func FuzzAddMoved(f *testing.F) {
	f.Add(int64(1<<48), int64(1767225600000), int64(812), 3, int64(41), int64(140), int64(0), int64(790), 0, int64(1))
	f.Add(int64(5), int64(0), int64(0), -1, int64(0), int64(-5), int64(-3), int64(1000000), 2, int64(-1))
	f.Fuzz(func(t *testing.T, id, at, cost int64, part int, off, did, dat, cost2 int64, part2 int, doff int64) {
		base := Event{Type: Produce, MsgID: id, Topic: "q", Time: at, Cost: cost, OK: true, Host: "h", Broker: 1,
			Partition: part, Offset: off, Attempt: 1, Size: 100}
		if base.MsgID < 0 || base.Partition < -1 {
			return
		}
		var a, b Batch
		a.Add(&base)
		b.Add(&base)
		e := base
		e.MsgID, e.Time, e.Cost, e.Partition, e.Offset = id+did, at+dat, cost2, part2, off+doff
		if !b.AddMoved(e.MsgID, e.Time, e.Cost, e.Partition, e.Offset) {
			return
		}
		a.Add(&e)
		if string(a.Data) != string(b.Data) || string(a.Props) != string(b.Props) || a.N != b.N {
			t.Fatalf("Add      %q %q\nAddMoved %q %q", a.Data, a.Props, b.Data, b.Props)
		}
	})
}
