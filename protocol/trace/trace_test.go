package trace

import (
	"errors"
	"reflect"
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
	// The keys property: every id (once; -1 = none) and every key, so the key index finds them.
	props := append([]byte{}, b.Props...)
	keys := protocol.Keys(props)
	for _, k := range []string{"281474976710912", "o-1", "o-2", "o-3", "0"} {
		if !strings.Contains(" "+strings.Join(keys, " ")+" ", " "+k+" ") {
			t.Errorf("keys %q lack %s", keys, k)
		}
	}
	if strings.Count(string(b.Props), "281474976710912") != 1 || strings.Contains(string(b.Props)+" ", " -1 ") {
		t.Errorf("keys property %q", b.Props)
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
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("Decode(%q) = %v, want ErrBadRecord", in, err)
		}
	}
	for _, in := range []string{"", "e=produce&id=1", "id=1\n", "e=produce\n", "e=&id=1\n", "e=p&id=x\n", "e=p&id=1\r\n", "x\n"} {
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
