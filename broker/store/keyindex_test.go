package store

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

func queryIDs(t *testing.T, s *Store, topic, key string, max int) []int64 {
	t.Helper()
	r, err := s.QueryKey(topic, key, max)
	if err == ErrNotFound {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var ids []int64
	for _, b := range r.Bufs {
		rec, _, err := protocol.DecodeRecord(b, 0)
		if err != nil || string(rec.Topic) != topic {
			t.Fatalf("bad hit: %v", err)
		}
		ids = append(ids, rec.MsgID)
	}
	if r.Count != len(ids) || r.Status != ReadFound {
		t.Fatal("count")
	}
	return ids
}

func TestQueryKey(t *testing.T) {
	for _, slots := range []int{64, 1} { // 1 slot: every key collides
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.KeyIndexSlots = slots
			cfg.KeyIndexEntries = 40 // several files
			s := mustOpen(t, cfg)
			var order []int64 // ids carrying "shared"
			for i := 0; i < 60; i++ {
				props := fmt.Sprintf("tag=x&keys=id-%d%%20shared", i)
				topic := "k"
				if i%5 == 4 {
					topic = "other" // same keys, other topic
				}
				a := mustAppend(t, s, &Message{Topic: topic, Properties: []byte(props), Data: []byte("d")})
				if topic == "k" {
					order = append(order, a.MsgID)
				}
			}
			mustAppend(t, s, &Message{Topic: "k", Properties: []byte("keys=plain+one\ttwo"), Data: []byte("e")})
			waitFor(t, "dispatch", func() bool { return s.dispatched.Load() == s.clog.visibleLimit() })
			check := func() {
				t.Helper()
				if ids := queryIDs(t, s, "k", "id-7", 10); len(ids) != 1 || ids[0] != order[6] {
					t.Fatalf("id-7: %v", ids)
				}
				if ids := queryIDs(t, s, "k", "id-9", 10); len(ids) != 0 {
					t.Fatalf("id-9 is on the other topic: %v", ids)
				}
				if ids := queryIDs(t, s, "other", "id-9", 10); len(ids) != 1 {
					t.Fatalf("other/id-9: %v", ids)
				}
				ids := queryIDs(t, s, "k", "shared", 100)
				if len(ids) != len(order) {
					t.Fatalf("shared: %d hits, want %d", len(ids), len(order))
				}
				for i := range ids { // newest first
					if ids[i] != order[len(order)-1-i] {
						t.Fatalf("shared: order differs at %d", i)
					}
				}
				if ids := queryIDs(t, s, "k", "shared", 5); len(ids) != 5 || ids[0] != order[len(order)-1] {
					t.Fatalf("max 5: %v", ids)
				}
				for _, k := range []string{"plain", "one", "two"} {
					if ids := queryIDs(t, s, "k", k, 5); len(ids) != 1 {
						t.Fatalf("key %q: %v", k, ids)
					}
				}
				if ids := queryIDs(t, s, "k", "nope", 5); ids != nil {
					t.Fatal("nope")
				}
			}
			check()
			if n := countFiles(t, filepath.Join(cfg.Dir, "keyindex")); n < 3 {
				t.Fatalf("expected several key index files, got %d", n)
			}
			mustClose(t, s)
			s = mustOpen(t, cfg)
			check()
			s.crash()
			cfg.CheckpointInterval = time.Hour
			s = mustOpen(t, cfg)
			check()
			mustClose(t, s)
		})
	}
}

func TestAppendKeyHashesMatchesProtocolKeys(t *testing.T) {
	for _, props := range []string{
		"keys=a", "keys=a%20b", "keys=a+b", "keys=%20a%20%20b%20", "tag=x&keys=  a\tb\nc ", "keys=", "tag=y",
		"keys=caf%C3%A9%20x", "keys=\xc3\xa9 x", "keys=%zz",
	} {
		want := map[uint32]bool{}
		for _, k := range protocol.Keys([]byte(props)) {
			want[keyHash([]byte("t"), []byte(k))] = true
		}
		got := appendKeyHashes(nil, []byte("t"), []byte(props))
		if len(got) != len(want) {
			t.Fatalf("%q: %d hashes, want %d", props, len(got), len(want))
		}
		for _, h := range got {
			if !want[h] {
				t.Fatalf("%q: unexpected hash", props)
			}
		}
	}
}
