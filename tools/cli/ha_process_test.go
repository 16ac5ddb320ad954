package cli

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// pipelinedPuts sends windows of puts on one connection and returns the
// message ids acknowledged with 200, until the connection breaks or n puts
// were answered. stop, when closed, makes it stop after the current window.
func pipelinedPuts(addr string, n, window int, acked chan<- int64) error {
	defer close(acked)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
	w := bufio.NewWriter(nc)
	for sent := 0; sent < n; {
		k := min(window, n-sent)
		for i := 0; i < k; i++ {
			data := "acked-" + strconv.Itoa(sent+i)
			fmt.Fprintf(w, "put dur %d %d 0 %d\r\n%s", (sent+i)%4, len(data), sent+i, data)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for i := 0; i < k; i++ {
			_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			r, err := rr.Next()
			if err != nil {
				return err
			}
			if r.Code == 200 {
				f := strings.Fields(string(r.Body))
				id, _ := strconv.ParseInt(f[0], 10, 64)
				acked <- id
			}
		}
		sent += k
	}
	return nil
}

// syncReplicas=1 with real processes: a master and a slave, a producer
// pipelining puts; the master is killed with SIGKILL at a random moment
// while puts are in flight. Every put the master acknowledged is on the
// slave (query id), and the slave serves it.
func TestSyncReplicationSurvivesMasterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	mdir, sdir := t.TempDir(), t.TempDir()
	mini, maddr := writeINI(t, mdir, true, "", 0, "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=10000\n")
	sini, saddr := writeINI(t, sdir, true, "", 0, "\n[slave]\nslaveId=0\n[replication]\nmasterAddr="+maddr+"\n")
	m := startBrokerProc(t, maddr, "-c", mini)
	startBrokerProc(t, saddr, "-c", sini)

	acked := make(chan int64, 1<<16)
	done := make(chan error, 1)
	go func() { done <- pipelinedPuts(maddr, 1<<30, 200, acked) }()
	var ids []int64
	target := 2000 + rand.IntN(3000)
	deadline := time.Now().Add(120 * time.Second)
	for len(ids) < target {
		select {
		case id, ok := <-acked:
			if !ok {
				t.Fatalf("the producer stopped after %d acks: %v\n%s", len(ids), <-done, m.stderr.String())
			}
			ids = append(ids, id)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("only %d acks in time", len(ids))
		}
	}
	m.signal(syscall.SIGKILL) // puts are in flight
	for id := range acked {
		ids = append(ids, id)
	}
	<-done
	m.wait(30 * time.Second)

	nc, err := net.DialTimeout("tcp", saddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
	w := bufio.NewWriter(nc)
	for i, id := range ids {
		fmt.Fprintf(w, "query id %d %d\r\n", id, i)
		if i%500 == 499 || i == len(ids)-1 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			for j := i - i%500; j <= i; j++ {
				_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				r, err := rr.Next()
				if err != nil {
					t.Fatal(err)
				}
				if r.Kind != protocol.ReplyValue {
					t.Fatalf("acknowledged message %d (id %d) is not on the slave after the master was killed: %d %s",
						j, ids[j], r.Code, r.Body)
				}
			}
		}
	}
	t.Logf("%d acknowledged puts, all on the slave", len(ids))
	if _, err := os.Stat(filepath.Join(sdir, "data", "commitlog")); err != nil {
		t.Fatal(err)
	}
}

// statInt reads one integer line of `stats` from the broker at addr (-1 when it cannot).
func statInt(addr, key string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(client.Config{DialTimeout: time.Second, RequestTimeout: 3 * time.Second, Logger: quietLog})
	if err != nil {
		return -1
	}
	defer adm.Close()
	st, err := adm.Stats(ctx, addr, "")
	if err != nil {
		return -1
	}
	for _, s := range st {
		if s.Key == key {
			v, err := strconv.ParseInt(s.Value, 10, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

// tearTail simulates a machine crash that lost the end of a commit log (what was written but not
// yet on the disk, which a master's slaves may already hold): the bytes from cut on are zeroed in
// the segment holding cut, later segments are removed, and the checkpoint goes too (its flushed
// position may be past cut), so the next start scans the log and ends it at cut.
func tearTail(t *testing.T, dataPath string, cut int64) {
	t.Helper()
	dir := filepath.Join(dataPath, "commitlog")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		base, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || len(e.Name()) != 20 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case base > cut:
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		case base+fi.Size() > cut:
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, base+fi.Size()-cut), cut-base); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Remove(filepath.Join(dataPath, "checkpoint")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// A master ships what it has written before it is durable (syncReplicas=1: the master and its
// slave fsync a round in parallel; docs/replication.md, "Cost"), so after a crash of the
// master's machine its slave may hold more than the master recovered. Real processes: a master
// with syncReplicas=1 and a slave; both are killed with SIGKILL, the master's log loses its tail
// (tearTail), the master restarts alone and appends new records over the lost range (its puts
// time out: no slave) and is killed and restarted once more, then the slave restarts. Its link
// to the restarted master must cut what the master no longer has (each start of a master opens
// a new epoch where its log recovered to, so the slave's epoch ends where the first restart's
// log did: 409 → truncation marker → restart in place) and copy the new records: afterwards both logs are byte-identical, and an acknowledged put made after the
// rejoin is on the slave.
func TestSlaveAheadOfRestartedMasterTruncates(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	mdir, sdir := t.TempDir(), t.TempDir()
	mini, maddr := writeINI(t, mdir, true, "", 0, "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=2000\n")
	sini, saddr := writeINI(t, sdir, true, "", 0, "\n[slave]\nslaveId=0\n[replication]\nmasterAddr="+maddr+"\n")
	m := startBrokerProc(t, maddr, "-c", mini)
	s := startBrokerProc(t, saddr, "-c", sini)

	put := func(n int) (acked int) {
		t.Helper()
		ch := make(chan int64, n)
		if err := pipelinedPuts(maddr, n, 100, ch); err != nil {
			t.Fatal(err)
		}
		for range ch {
			acked++
		}
		return acked
	}
	if got := put(3000); got != 3000 {
		t.Fatalf("%d of 3000 puts acknowledged with the slave in sync", got)
	}
	end := statInt(maddr, "replication_durable_position")
	waitFor(t, 60*time.Second, func() bool { return statInt(saddr, "replication_durable_position") == end },
		"the slave holds the master's log")
	s.signal(syscall.SIGKILL)
	s.wait(30 * time.Second)
	m.signal(syscall.SIGKILL)
	m.wait(30 * time.Second)

	// Lose up to 4 KiB of the master's tail (cut mid-record, at a random point of the last
	// segment).
	segBase := end / (1 << 20) * (1 << 20)
	cut := max(end-1-rand.Int64N(4096), segBase+1)
	tearTail(t, filepath.Join(mdir, "data"), cut)
	m = startBrokerProc(t, maddr, "-c", mini)
	e0 := statInt(maddr, "replication_durable_position")
	if e0 < 0 || e0 >= end {
		t.Fatalf("the restarted master's log ends at %d; the torn log was %d bytes and cut at %d", e0, end, cut)
	}
	// New records over the lost range, and past where the slave's log ends. Without a slave
	// they are not acknowledged (503 after replicaTimeoutMs) but they are in the log.
	ch := make(chan int64, 200)
	go func() { _ = pipelinedPuts(maddr, 200, 200, ch) }()
	waitFor(t, 60*time.Second, func() bool { return statInt(maddr, "replication_durable_position") > end+4096 },
		"the restarted master appended past the slave's end")
	for range ch {
	}
	// And the master is restarted once more before the slave comes back: its log now
	// reaches past the slave's end with bytes the slave does not have.
	m.signal(syscall.SIGKILL)
	m.wait(30 * time.Second)
	m = startBrokerProc(t, maddr, "-c", mini)

	s = startBrokerProc(t, saddr, "-c", sini)
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(s.stderr.String(), "restarting the broker in place") },
		"the slave truncates and restarts")
	s.waitReady(30 * time.Second)
	// The master refused puts while it had no slave in sync (replicaTimeoutMs): it accepts
	// them again once the slave has caught up.
	waitFor(t, 60*time.Second, func() bool { return put(1) == 1 }, "a put acknowledged after the slave rejoined")
	if got := put(500); got != 500 {
		t.Fatalf("%d of 500 puts acknowledged after the slave rejoined", got)
	}
	end2 := statInt(maddr, "replication_durable_position")
	waitFor(t, 60*time.Second, func() bool { return statInt(saddr, "replication_durable_position") == end2 },
		"the slave caught up with the restarted master")
	if a, b := logDigest(t, filepath.Join(mdir, "data"), end2), logDigest(t, filepath.Join(sdir, "data"), end2); a != b {
		t.Fatalf("the logs differ over [0, %d) after the rejoin", end2)
	}
	t.Logf("master's log %d → cut at %d, durable to %d after the restart; the slave truncated from %d and holds the master's %d bytes",
		end, cut, e0, end, end2)
}
