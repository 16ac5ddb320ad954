package ha_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/store"
)

// syncBuf is a log sink tests read.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func bufLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// rangeSum is the SHA-256 of the commit log bytes [from, to) in dataDir.
func rangeSum(t *testing.T, dataDir string, from, to int64) string {
	t.Helper()
	dir := filepath.Join(dataDir, "commitlog")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if len(e.Name()) == 20 {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		base, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := max(from, base), min(to, base+int64(len(b)))
		if lo < hi {
			h.Write(b[lo-base : hi-base])
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// restartOnRequest starts a broker and, whenever it asks for a restart
// (a store reset marker), stops it and starts it again with the same
// options, as `metaq broker` does; it returns the broker once it runs
// without asking, after at most n restarts.
func restartOnRequest(t *testing.T, o brokertest.Options, ready func(*brokertest.Broker) bool) (*brokertest.Broker, int) {
	t.Helper()
	b := brokertest.RunBroker(t, o)
	restarts := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-b.NeedsRestart():
			b.Stop()
			restarts++
			if restarts > 3 {
				t.Fatal("more than 3 restarts")
			}
			b = brokertest.RunBroker(t, o)
			continue
		case <-time.After(20 * time.Millisecond):
		}
		if ready(b) {
			return b, restarts
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker never got ready")
		}
	}
}

// An empty slave joining a master whose oldest segments were deleted by
// retention starts at the master's oldest segment (logged), and its log is
// then identical to the master's over what the master still holds.
func TestSlaveBehindRetention(t *testing.T) {
	master := brokertest.RunBroker(t, brokertest.Options{Sync: true, StoreConf: func(c *store.Config) {
		c.Retention = time.Minute
		c.CheckpointInterval = 10 * time.Millisecond
	}})
	c := master.Dial()
	defer c.Close()
	body := strings.Repeat("r", 900)
	for i := 0; i < 4000; i++ { // ~ 4 MiB: 4 segments of 1 MiB
		c.Put("test", i%4, body, int32(i))
	}
	waitFor(t, "retention", func() bool {
		n, err := master.Store.DeleteExpired(time.Now().Add(30 * 24 * time.Hour))
		return err == nil && n > 0 || master.Store.MinPos() > 0
	})
	minPos := master.Store.MinPos()
	if minPos == 0 {
		t.Fatal("retention deleted nothing")
	}
	var logs syncBuf
	so := brokertest.Options{Sync: true, Logger: bufLogger(&logs), ExtraINI: slaveINI(0, master.Addr, ""), Dir: t.TempDir()}
	slave, restarts := restartOnRequest(t, so, func(s *brokertest.Broker) bool {
		return s.Store.FlushedPos() == master.Store.VisiblePos()
	})
	if restarts != 1 {
		t.Fatalf("%d restarts, want 1 (the reset)", restarts)
	}
	if !strings.Contains(logs.String(), "behind the master's retention") {
		t.Fatalf("the reset was not logged:\n%s", logs.String())
	}
	if slave.Store.MinPos() != minPos {
		t.Fatalf("the slave's log starts at %d, the master's at %d", slave.Store.MinPos(), minPos)
	}
	end := master.Store.VisiblePos()
	if a, b := rangeSum(t, master.Dir, minPos, end), rangeSum(t, slave.Dir, minPos, end); a != b {
		t.Fatalf("logs differ over [%d, %d)", minPos, end)
	}
	// The slave serves what the master holds, from the same queue offsets.
	waitFor(t, "slave indexes", func() bool { return slave.Store.MaxOffset("test", 1) == master.Store.MaxOffset("test", 1) })
	if a, b := master.Store.MinOffset("test", 1), slave.Store.MinOffset("test", 1); a != b {
		t.Fatalf("min offset %d on the master, %d on the slave", a, b)
	}
}

// A former master whose log holds records the new master never received
// (its unreplicated tail) truncates them at the divergence point — the
// start of the new master's epoch — when it rejoins as a slave, logs what
// it cut, and ends up byte-identical to the new master.
func TestDemoteTruncatesDivergence(t *testing.T) {
	aDir := t.TempDir()
	a := brokertest.RunBroker(t, brokertest.Options{Dir: aDir})
	b := brokertest.RunBroker(t, brokertest.Options{ExtraINI: slaveINI(0, a.Addr, "")})
	ca := a.Dial()
	for i := 0; i < 100; i++ {
		ca.Put("test", i%4, fmt.Sprintf("common %d", i), int32(i))
	}
	waitFor(t, "b caught up", func() bool { return b.Store.FlushedPos() == a.Store.VisiblePos() })
	common := a.Store.VisiblePos()
	b.Stop() // the link breaks; a keeps accepting (async replication)
	for i := 0; i < 50; i++ {
		ca.Put("test", i%4, fmt.Sprintf("only on a %d", i), int32(i))
	}
	ca.Close()
	a.Stop()
	aEnd := a.Store.WritePos()
	if aEnd <= common {
		t.Fatal("a holds nothing past the common part")
	}

	// b comes back as the master of epoch 1, takes new puts.
	b2 := brokertest.RunBroker(t, brokertest.Options{Dir: b.Dir})
	if err := b2.HA.Promote(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cb := b2.Dial()
	for i := 0; i < 30; i++ {
		cb.Put("test", i%4, fmt.Sprintf("new master %d", i), int32(i))
	}
	cb.Close()

	// a rejoins as a slave of b2.
	var logs syncBuf
	ao := brokertest.Options{Dir: aDir, Logger: bufLogger(&logs), ExtraINI: slaveINI(1, b2.Addr, "")}
	a2, restarts := restartOnRequest(t, ao, func(s *brokertest.Broker) bool {
		return s.Store.FlushedPos() == b2.Store.VisiblePos()
	})
	if restarts != 1 {
		t.Fatalf("%d restarts, want 1 (the truncation)", restarts)
	}
	// The 50 puts, and whatever a's services recorded after them.
	if cut := logInt(logs.String(), "messagesCut="); cut < 50 {
		t.Fatalf("the truncation was not logged with the 50 messages cut (%d):\n%s", cut, logs.String())
	}
	end := b2.Store.VisiblePos()
	if x, y := rangeSum(t, b2.Dir, 0, end), rangeSum(t, a2.Dir, 0, end); x != y {
		t.Fatal("logs differ after the truncation")
	}
	// b2 started as master (a new epoch where its log recovered to, after
	// the one a opened at b's first link); Promote(1) is not newer.
	if a2.HA.Epoch() != b2.HA.Epoch() || a2.HA.Epoch() != 2 {
		t.Fatalf("a's epoch %d, b2's %d, want 2", a2.HA.Epoch(), b2.HA.Epoch())
	}
}

// logInt is the number after key in the log text (-1 when absent).
func logInt(s, key string) int {
	i := strings.Index(s, key)
	if i < 0 {
		return -1
	}
	n := 0
	for _, c := range s[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
