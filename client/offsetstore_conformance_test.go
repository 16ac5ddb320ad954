package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// offsetBacking opens stores of one group on one backing (a ZooKeeper
// ensemble, a directory, a database); a second open of the same group sees
// what the first flushed.
type offsetBacking func(t *testing.T, group string) OffsetStore

// testOffsetStoreConformance is what every OffsetStore must do: ZooKeeper,
// file and SQL stores run it (TestOffsetStoreConformance).
func testOffsetStoreConformance(t *testing.T, newBacking func(t *testing.T) offsetBacking) {
	ctx := context.Background()
	p10, p11, p20 := Partition{BrokerID: 1, Partition: 0}, Partition{BrokerID: 1, Partition: 1}, Partition{BrokerID: 2, Partition: 0}
	mustCommit := func(t *testing.T, s OffsetStore, topic string, p Partition, o Offset) {
		t.Helper()
		if err := s.Commit(ctx, topic, p, o); err != nil {
			t.Fatalf("Commit %s/%s %+v: %v", topic, p, o, err)
		}
	}
	expect := func(t *testing.T, s OffsetStore, topic string, p Partition, want Offset, wantOK bool) {
		t.Helper()
		o, ok, err := s.Load(ctx, topic, p)
		if err != nil || ok != wantOK || (ok && o != want) {
			t.Fatalf("Load %s/%s = %+v %v %v; want %+v %v", topic, p, o, ok, err, want, wantOK)
		}
	}
	t.Run("empty", func(t *testing.T) {
		s := newBacking(t)(t, "g-empty")
		expect(t, s, "orders", p10, Offset{}, false)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("roundTrip", func(t *testing.T) {
		open := newBacking(t)
		s := open(t, "g-rt")
		mustCommit(t, s, "orders", p10, Offset{MsgID: 281474976710656, Offset: 1})
		mustCommit(t, s, "orders", p11, Offset{MsgID: -1, Offset: 0})
		mustCommit(t, s, "orders", p20, Offset{MsgID: 7<<48 | 123, Offset: 1 << 40})
		mustCommit(t, s, "payments", p10, Offset{MsgID: 5, Offset: 6})
		expect(t, s, "orders", p10, Offset{MsgID: 281474976710656, Offset: 1}, true)
		expect(t, s, "orders", p11, Offset{MsgID: -1, Offset: 0}, true)
		expect(t, s, "orders", p20, Offset{MsgID: 7<<48 | 123, Offset: 1 << 40}, true)
		expect(t, s, "payments", p10, Offset{MsgID: 5, Offset: 6}, true)
		expect(t, s, "payments", p11, Offset{}, false)
		// Moving forward replaces the position.
		mustCommit(t, s, "orders", p10, Offset{MsgID: 281474976710756, Offset: 2})
		expect(t, s, "orders", p10, Offset{MsgID: 281474976710756, Offset: 2}, true)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Durable: a new store on the same backing reads it.
		again := open(t, "g-rt")
		expect(t, again, "orders", p10, Offset{MsgID: 281474976710756, Offset: 2}, true)
		expect(t, again, "orders", p20, Offset{MsgID: 7<<48 | 123, Offset: 1 << 40}, true)
		expect(t, again, "payments", p10, Offset{MsgID: 5, Offset: 6}, true)
		again.Close()
	})
	t.Run("groupsApart", func(t *testing.T) {
		open := newBacking(t)
		a, b := open(t, "g-a"), open(t, "g-b")
		mustCommit(t, a, "orders", p10, Offset{MsgID: 1, Offset: 10})
		mustCommit(t, b, "orders", p10, Offset{MsgID: 2, Offset: 20})
		for _, s := range []OffsetStore{a, b} {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, a, "orders", p10, Offset{MsgID: 1, Offset: 10}, true)
		expect(t, b, "orders", p10, Offset{MsgID: 2, Offset: 20}, true)
		a.Close()
		b.Close()
		expect(t, open(t, "g-a"), "orders", p10, Offset{MsgID: 1, Offset: 10}, true)
	})
	t.Run("concurrent", func(t *testing.T) {
		open := newBacking(t)
		s := open(t, "g-conc")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				p := Partition{BrokerID: 1 + w%2, Partition: w}
				for i := 1; i <= 20; i++ {
					if err := s.Commit(ctx, "orders", p, Offset{MsgID: int64(i), Offset: int64(i)}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again := open(t, "g-conc")
		for w := range 8 {
			expect(t, again, "orders", Partition{BrokerID: 1 + w%2, Partition: w}, Offset{MsgID: 20, Offset: 20}, true)
		}
	})
}

// openSQLite opens a SQLite database file the way the tests use it: WAL,
// and a busy timeout so that concurrent writers wait instead of failing.
func openSQLite(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOffsetStoreConformance(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		testOffsetStoreConformance(t, func(t *testing.T) offsetBacking {
			dir := t.TempDir()
			return func(t *testing.T, group string) OffsetStore {
				s, err := NewFileOffsetStore(dir, group)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		})
	})
	t.Run("sql", func(t *testing.T) {
		testOffsetStoreConformance(t, func(t *testing.T) offsetBacking {
			path := filepath.Join(t.TempDir(), "offsets.db")
			return func(t *testing.T, group string) OffsetStore {
				s, err := SQLOffsetStore(openSQLite(t, path), "metaq_offsets")
				if err != nil {
					t.Fatal(err)
				}
				g, err := s.ForGroup(group)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
		})
	})
	t.Run("zookeeper", func(t *testing.T) {
		addr := zktest.Server(t)
		n := 0
		testOffsetStoreConformance(t, func(t *testing.T) offsetBacking {
			n++
			// Groups of one backing share a unique prefix: ZooKeeper outlives the test.
			prefix := "conf" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(n) + "-"
			return func(t *testing.T, group string) OffsetStore {
				zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: addr, Logger: slogPrintf{testLogger()}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { zc.Close() })
				return NewZKOffsetStore(zc, prefix+group)
			}
		})
	})
}

// SQLOffsets specifics: positions only move forward; CommitWithTx is a
// compare-and-set inside the caller's transaction; bad table names; the
// consumer binds the store to its group.
func TestSQLOffsetStore(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t, filepath.Join(t.TempDir(), "o.db"))
	for _, bad := range []string{"", "a b", "x;DROP TABLE y", "1abc", "a.b.c", "t-1"} {
		if _, err := SQLOffsetStore(db, bad); err == nil {
			t.Errorf("table name %q accepted", bad)
		}
	}
	if _, err := SQLOffsetStore(nil, "t"); err == nil {
		t.Error("nil db accepted")
	}
	st, err := SQLOffsetStore(db, "main.offs")
	if err != nil {
		t.Fatal(err)
	}
	p := Partition{BrokerID: 3, Partition: 1}
	if _, _, err := st.Load(ctx, "orders", p); err == nil {
		t.Fatal("unbound store loaded")
	}
	g, err := st.ForGroup("billing")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx, "orders", p, Offset{MsgID: 9, Offset: 10}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx, "orders", p, Offset{MsgID: 4, Offset: 5}); err != nil { // backwards: ignored
		t.Fatal(err)
	}
	if o, _, _ := g.Load(ctx, "orders", p); o != (Offset{MsgID: 9, Offset: 10}) {
		t.Fatalf("after a backward commit: %+v", o)
	}

	tx := func(f func(*sql.Tx) error) error {
		t.Helper()
		x, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f(x); err != nil {
			x.Rollback()
			return err
		}
		return x.Commit()
	}
	m := &Message{Topic: "orders", Partition: p, Offset: 10, MsgID: 11}
	if err := tx(func(x *sql.Tx) error { return CommitWithTx(ctx, x, g, m) }); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := g.Load(ctx, "orders", p); o != (Offset{MsgID: 11, Offset: 11}) {
		t.Fatalf("after CommitWithTx: %+v", o)
	}
	// The same message again (another consumer after a rebalance): refused.
	if err := tx(func(x *sql.Tx) error { return CommitWithTx(ctx, x, g, m) }); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("second CommitWithTx of one message: %v", err)
	}
	// A rolled-back transaction leaves the position alone.
	m2 := &Message{Topic: "orders", Partition: p, Offset: 14, MsgID: 15}
	if err := tx(func(x *sql.Tx) error {
		if err := CommitWithTx(ctx, x, g, m2); err != nil {
			return err
		}
		return fmt.Errorf("business write failed")
	}); err == nil {
		t.Fatal("rollback")
	}
	if o, _, _ := g.Load(ctx, "orders", p); o.Offset != 11 {
		t.Fatalf("after a rollback: %+v", o)
	}
	// A first commit for a partition inserts the row.
	m3 := &Message{Topic: "new", Partition: p, Offset: 0, MsgID: 1}
	if err := tx(func(x *sql.Tx) error { return CommitWithTx(ctx, x, g, m3) }); err != nil {
		t.Fatal(err)
	}
	if o, ok, _ := g.Load(ctx, "new", p); !ok || o.Offset != 1 {
		t.Fatalf("first CommitWithTx: %+v %v", o, ok)
	}
	if err := CommitWithTx(ctx, nil, g, m3); err == nil {
		t.Fatal("nil tx accepted")
	}

	// NewConsumer binds an unbound store to its group, once.
	cfg := Config{ZKConnect: "127.0.0.1:1", ZKConnectionTimeout: 300 * time.Millisecond, Logger: testLogger()}
	unbound, _ := SQLOffsetStore(db, "offs2")
	cfg.Consumer.OffsetStore = unbound
	c, err := NewConsumer(cfg, "g1")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if unbound.Group() != "g1" {
		t.Fatalf("bound to %q", unbound.Group())
	}
	if c2, err := NewConsumer(cfg, "g2"); err == nil {
		c2.Close()
		t.Fatal("one store bound to two groups")
	}
}
