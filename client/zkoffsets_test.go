package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// lateWrite makes the first conditional offset write of a store wait (as a
// request stuck in flight would) until another write has landed, then sends
// it: the late write always reaches ZooKeeper after a newer one.
type lateWrite struct {
	first   atomic.Bool
	entered chan Offset   // the late write's offset, once it is held
	release chan struct{} // closed after the next write landed
	done    chan error    // the late write's result
	once    sync.Once
}

func newLateWrite() *lateWrite {
	return &lateWrite{entered: make(chan Offset, 1), release: make(chan struct{}), done: make(chan error, 1)}
}

func (l *lateWrite) hook(_ string, _ Partition, o Offset, send func() error) error {
	if l.first.CompareAndSwap(false, true) {
		l.entered <- o
		<-l.release
		err := send()
		l.done <- err
		return err
	}
	err := send()
	if err == nil {
		l.once.Do(func() {
			close(l.release)
			// Wait until the late write has been answered: it lands (or
			// not) before this newer write's caller goes on.
			err := <-l.done
			l.done <- err
		})
	}
	return err
}

func (l *lateWrite) install(t *testing.T, c *Consumer) {
	s, ok := c.store.(*zkOffsetStore)
	if !ok {
		t.Fatalf("store %T", c.store)
	}
	h := offsetWriteHook(l.hook)
	s.writeHook.Store(&h)
}

// A commit abandoned by its caller (context ended) reaches ZooKeeper after
// newer commits — here after the final commit of Close. It must not move the
// group's offset back: offsets a consumer writes never decrease, and Close's
// final commit stays the last value written. No timing: the hook orders the
// writes.
func TestLateCommitDoesNotMoveOffsetBack(t *testing.T) {
	key := Partition{BrokerID: 1, Partition: 0}
	check := func(t *testing.T, cl *cluster, l *lateWrite, c *Consumer, col *collector, p *Producer) {
		t.Helper()
		late := <-l.entered
		sendN(t, p, "orders", "b", 10)
		col.waitDistinct(t, 20, 10*time.Second)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-l.done:
			t.Logf("late write of %v answered: %v", late, err)
		default:
			t.Fatal("the late write was never sent")
		}
		if got := cl.committed("g", "orders")[key]; got.Offset != 20 {
			t.Fatalf("committed %v after Close, want offset 20 (a late write of %v landed after the final commit)", got, late)
		}
		// The group resumes where Close left it: nothing is redelivered.
		again := newCollector()
		cl.consumer("g", "orders", "*", again.handler)
		sendN(t, p, "orders", "c", 1)
		again.waitDistinct(t, 1, 10*time.Second)
		for _, m := range again.snapshot() {
			if m.Body[0] != 'c' {
				t.Fatalf("redelivered %s after a clean Close", m.Body)
			}
		}
	}

	// An explicit Commit whose context ends while its write is in flight;
	// the next write is the final one of Close.
	t.Run("Commit", func(t *testing.T) {
		cl := newCluster(t, map[string]int{"orders": 1}, 1)
		p := cl.producer()
		col := newCollector()
		c := cl.consumer("g", "orders", "*", col.handler, func(c *Config) { c.Consumer.CommitInterval = time.Hour })
		l := newLateWrite()
		l.install(t, c)
		waitStartOffset(t, cl, key)
		sendN(t, p, "orders", "a", 10)
		col.waitDistinct(t, 10, 10*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- c.Commit(ctx) }()
		if o := <-l.entered; o.Offset != 10 {
			t.Fatalf("late write of %v, want offset 10", o)
		} else {
			l.entered <- o
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned Commit = %v", err)
		}
		check(t, cl, l, c, col, p)
	})

	// The periodic commit, abandoned at RequestTimeout; the next write is
	// a later periodic commit or the final one of Close.
	t.Run("periodic", func(t *testing.T) {
		cl := newCluster(t, map[string]int{"orders": 1}, 1)
		p := cl.producer()
		col := newCollector()
		c := cl.consumer("g", "orders", "*", col.handler, func(c *Config) { c.RequestTimeout = 2 * time.Second })
		l := newLateWrite()
		l.install(t, c)
		waitStartOffset(t, cl, key)
		sendN(t, p, "orders", "a", 10)
		check(t, cl, l, c, col, p)
	})
}

// waitStartOffset waits until group g's start offset for key is in
// ZooKeeper (written with a create, not a conditional write).
func waitStartOffset(t *testing.T, cl *cluster, key Partition) {
	t.Helper()
	zktest.Eventually(t, 15*time.Second, func() bool {
		_, ok := cl.committed("g", "orders")[key]
		return ok
	}, "start offset committed")
}

// The store itself: commits below the stored offset are not written, from
// this store (a late write) or another one (the partition's previous owner);
// the one move back allowed is this store's own, when the node still holds
// what it last wrote (the broker moved the consumer back).
func TestZKOffsetStoreNeverMovesBack(t *testing.T) {
	cl := newCluster(t, map[string]int{})
	zc := cl.zkClient()
	defer zc.Close()
	ctx := ctxT(t, 30*time.Second)
	p := Partition{BrokerID: 1, Partition: 0}
	a, b := NewZKOffsetStore(zc, "g"), NewZKOffsetStore(zc, "g")
	stored := func() Offset {
		t.Helper()
		o, ok, err := zc.LoadOffset(ctx, "g", "t", p)
		if err != nil || !ok {
			t.Fatalf("LoadOffset: %v %v", ok, err)
		}
		return o
	}
	commit := func(s OffsetStore, off int64) {
		t.Helper()
		if err := s.Commit(ctx, "t", p, Offset{MsgID: off * 10, Offset: off}); err != nil {
			t.Fatal(err)
		}
	}
	commit(a, 10) // created
	commit(a, 20) // moved on
	commit(b, 15) // another writer behind: nothing written
	if o := stored(); o.Offset != 20 {
		t.Fatalf("stored %v, want 20", o)
	}
	commit(b, 30) // another writer ahead: written
	commit(a, 25) // a is behind now, and the node is not its own any more
	if o := stored(); o.Offset != 30 {
		t.Fatalf("stored %v, want 30", o)
	}
	if _, _, err := b.Load(ctx, "t", p); err != nil {
		t.Fatal(err)
	}
	commit(b, 4) // b's own value is there: the broker moved it back
	if o := stored(); o != (Offset{MsgID: 40, Offset: 4}) {
		t.Fatalf("stored %v after the move back, want 4", o)
	}
	commit(a, 3) // a's late write: not below b's
	commit(b, 4) // unchanged: no write
	if o := stored(); o.Offset != 4 {
		t.Fatalf("stored %v, want 4", o)
	}
}
