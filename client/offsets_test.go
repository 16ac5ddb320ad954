package client

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FileOffsetStore round-trips through its file and rejects a file it cannot read, naming it.
func TestFileOffsetStoreFile(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "sub") // created by the first Flush
	s, err := NewFileOffsetStore(dir, "g")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil { // nothing committed: nothing written
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatalf("Flush without commits wrote %s: %v", s.Path(), err)
	}
	p0, p1, p2 := Partition{BrokerID: 1, Partition: 2}, Partition{BrokerID: 1, Partition: 10}, Partition{BrokerID: 2, Partition: 0}
	for _, c := range []struct {
		topic string
		p     Partition
		o     Offset
	}{{"b", p2, Offset{MsgID: 7, Offset: 8}}, {"a", p1, Offset{MsgID: -1, Offset: 3}}, {"a", p0, Offset{MsgID: 5, Offset: 6}}} {
		if err := s.Commit(ctx, c.topic, c.p, c.o); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	// a/1-2, a/1-10 (numeric, not string order), then b/2-0.
	if i, j, k := strings.Index(string(data), `"1-2"`), strings.Index(string(data), `"1-10"`), strings.Index(string(data), `"2-0"`); i < 0 || !(i < j && j < k) {
		t.Fatalf("entries not sorted by topic, then partition:\n%s", data)
	}
	again, err := NewFileOffsetStore(dir, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := again.Load(ctx, "a", p1); err != nil || !ok || o != (Offset{MsgID: -1, Offset: 3}) {
		t.Fatalf("Load after reopening = %+v %v %v", o, ok, err)
	}
	if _, ok, _ := again.Load(ctx, "c", p0); ok {
		t.Fatal("Load of a topic never committed: ok")
	}

	for name, content := range map[string]string{
		"bad json":      "{",
		"bad partition": `{"group":"g","offsets":[{"topic":"a","partition":"x","offset":1,"msgId":2}]}`,
	} {
		if err := os.WriteFile(s.Path(), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := NewFileOffsetStore(dir, "g"); err == nil || !strings.Contains(err.Error(), s.Path()) {
			t.Errorf("%s: NewFileOffsetStore = %v, want an error naming %s", name, err, s.Path())
		}
	}
	if _, err := NewFileOffsetStore(dir, "bad/group"); err == nil {
		t.Error("bad group name accepted")
	}
}
