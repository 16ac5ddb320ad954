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

	"github.com/metaqgo/metaq/broker/brokertest"
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
// while puts are in flight. Every put the master acknowledged is durable on
// the slave (its durable position is past each message id's offset while
// the master is down), the slave serves every one below its read limit (the
// master's high watermark as last heard, docs/replication.md, "Reads from a
// slave"; the rounds acknowledged after the last watermark it heard are held
// but not served), and all of them once the master is back.
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

	durable := statInt(saddr, "replication_durable_position")
	limit := statInt(saddr, "replication_committed_position")
	var below []int64
	for i, id := range ids {
		phys := id & (1<<48 - 1) // msgId = brokerId << 48 | physical offset
		if phys >= durable {
			t.Fatalf("acknowledged message %d (id %d, offset %d) is not durable on the slave after the master was killed (durable end %d)",
				i, id, phys, durable)
		}
		if phys < limit {
			below = append(below, id)
		}
	}
	queryIDs(t, saddr, below, "below the slave's read limit after the master was killed")
	t.Logf("%d acknowledged puts, all durable on the slave; %d below its read limit %d (durable end %d)",
		len(ids), len(below), limit, durable)

	// The master comes back: its high watermark covers its whole recovered log, and the slave
	// serves every acknowledged put.
	startBrokerProc(t, maddr, "-c", mini)
	waitFor(t, 60*time.Second, func() bool { return statInt(saddr, "replication_committed_position") >= durable },
		"the slave to hear the restarted master's high watermark")
	queryIDs(t, saddr, ids, "after the master restarted")
	if _, err := os.Stat(filepath.Join(sdir, "data", "commitlog")); err != nil {
		t.Fatal(err)
	}
}

// queryIDs asks the broker at addr for each message id (`query id`, pipelined) and fails the test
// on the first it does not serve.
func queryIDs(t *testing.T, addr string, ids []int64, when string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
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
					t.Fatalf("acknowledged message %d (id %d) is not served by %s %s: %d %s", j, ids[j], addr, when, r.Code, r.Body)
				}
			}
		}
	}
}

// statInt reads one integer line of `stats` from the broker at addr (-1 when it cannot).
// dialReplies connects to addr (closed when the test ends) with a reply reader on it.
func dialReplies(t *testing.T, addr string) (net.Conn, *protocol.ReplyReader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
}

// holdPut sends a put, on a connection of its own, to a master that cannot acknowledge it yet
// (syncReplicas above its linked slaves), and waits until the slave at s0addr holds it durably:
// the master's durable end has moved past before and the slave's is the same.
func holdPut(t *testing.T, maddr, s0addr string, before int64, data string) (net.Conn, *protocol.ReplyReader) {
	t.Helper()
	nc, rr := dialReplies(t, maddr)
	if _, err := fmt.Fprintf(nc, "put dur 0 %d 0 1\r\n%s", len(data), data); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool {
		m := statInt(maddr, "replication_durable_position")
		return m > before && statInt(s0addr, "replication_durable_position") == m
	}, "the slave to hold the put durably")
	return nc, rr
}

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
	// segment), and at least 256 bytes: the restarted master appends its epoch record (~100
	// bytes) where its log recovered to as soon as it runs, which must still end below the
	// torn log's end for the check below (a cut within ~100 bytes of the end made it fail).
	segBase := end / (1 << 20) * (1 << 20)
	cut := max(end-256-rand.Int64N(4096), segBase+1)
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

	// The slave starts first, while its master is down, and a reload (SIGHUP) adds a topic
	// section: the restart in place must keep server.ini as last reloaded, not go back to the
	// file loaded at process start (docs/configuration.md, "Reloading").
	s = startBrokerProc(t, saddr, "-c", sini)
	f, err := os.OpenFile(sini, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\n[topic=grown]\nnumPartitions=8\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.signal(syscall.SIGHUP)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(s.stderr.String(), "reloaded the topic sections") },
		"the slave reloaded its server.ini")
	m = startBrokerProc(t, maddr, "-c", mini)
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(s.stderr.String(), "restarting the broker in place") },
		"the slave truncates and restarts")
	s.waitReady(30 * time.Second)
	sc := brokertest.Dial(t, saddr)
	sc.Send("offset grown g 7 9 1\r\n")
	if r := sc.Reply(); r.Code != 200 {
		t.Fatalf("after the restart in place, offset on partition 7 of the reloaded topic grown (8 partitions): %d %q, want 200", r.Code, r.Body)
	}
	sc.Close()
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

// gatedGroup is the configuration of a master with syncReplicas=2 and two slaves: with one
// slave linked, a put is held (neither 200 nor 503: a long replicaTimeoutMs) while the slave
// holds it durably.
type gatedGroup struct {
	mini, maddr          string
	s0dir, s0ini, s0addr string
	s1ini, s1addr        string
}

func newGatedGroup(t *testing.T) gatedGroup {
	t.Helper()
	var g gatedGroup
	g.mini, g.maddr = writeINI(t, t.TempDir(), true, "", 0, "\n[replication]\nsyncReplicas=2\nreplicaTimeoutMs=300000\n")
	slave := func(dir string, k int) (string, string) {
		return writeINI(t, dir, true, "", 0, fmt.Sprintf("\n[slave]\nslaveId=%d\n[replication]\nmasterAddr=%s\n", k, g.maddr))
	}
	g.s0dir = t.TempDir()
	g.s0ini, g.s0addr = slave(g.s0dir, 0)
	g.s1ini, g.s1addr = slave(t.TempDir(), 1)
	return g
}

// The high watermark, with real processes (docs/replication.md, "Reads from a slave"): a master
// with syncReplicas=2 and one slave ships a put, the slave holds it durably, but the master has not
// acknowledged it (the second slave is missing): the slave does not serve it (get finds nothing,
// offset and seek do not count it). Once a second slave joins, the master acknowledges the put,
// and the first slave serves it (get, offset, seek, query id).
func TestSlaveServesOnlyAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	g := newGatedGroup(t)
	maddr, s0addr, s1addr, s1ini := g.maddr, g.s0addr, g.s1addr, g.s1ini
	startBrokerProc(t, maddr, "-c", g.mini)
	startBrokerProc(t, s0addr, "-c", g.s0ini)
	waitFor(t, 60*time.Second, func() bool {
		c := statInt(maddr, "replication_committed_position")
		return c >= 0 && statInt(s0addr, "replication_committed_position") == c &&
			statInt(s0addr, "replication_durable_position") == statInt(maddr, "replication_durable_position")
	}, "the slave to link and learn the master's committed position")
	before := statInt(maddr, "replication_committed_position")

	ask := func(nc net.Conn, rr *protocol.ReplyReader, cmd string) protocol.Reply {
		t.Helper()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := nc.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
		r, err := rr.Next()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const data = "held-by-the-gate"
	pc, prr := holdPut(t, maddr, s0addr, before, data)
	if c := statInt(maddr, "replication_committed_position"); c != before {
		t.Fatalf("the master's committed position moved to %d (from %d) with one of two slaves", c, before)
	}
	sc, srr := dialReplies(t, s0addr)
	// A long poll: without the limit the slave would answer it as soon as its dispatcher indexed
	// the record; with it, it waits the 5 s out and finds nothing.
	if r := ask(sc, srr, "get dur g 0 0 65536 2 5000\r\n"); r.Kind == protocol.ReplyValue || r.Code != 404 {
		t.Fatalf("get on the slave before the master acknowledged the put: %d %q, want 404", r.Code, r.Body)
	}
	if r := ask(sc, srr, "offset dur g 0 9 3\r\n"); string(r.Body) != "0" {
		t.Fatalf("offset on the slave before the master acknowledged the put: %d %q, want 0", r.Code, r.Body)
	}
	// seek past every store time: the first offset it may not serve.
	if r := ask(sc, srr, "seek dur 0 99999999999999 7\r\n"); string(r.Body) != "0" {
		t.Fatalf("seek on the slave before the master acknowledged the put: %d %q, want 0", r.Code, r.Body)
	}
	if c := statInt(s0addr, "replication_committed_position"); c != before {
		t.Fatalf("the slave's read limit is %d, want the master's committed %d", c, before)
	}

	startBrokerProc(t, s1addr, "-c", s1ini)
	_ = pc.SetReadDeadline(time.Now().Add(60 * time.Second))
	r, err := prr.Next()
	if err != nil || r.Code != 200 {
		t.Fatalf("the put once two slaves hold it: %v %d %q", err, r.Code, r.Body)
	}
	id := strings.Fields(string(r.Body))[0]
	waitFor(t, 60*time.Second, func() bool {
		r := ask(sc, srr, "get dur g 0 0 65536 4\r\n")
		return r.Kind == protocol.ReplyValue && strings.Contains(string(r.Body), data)
	}, "the slave to serve the acknowledged put")
	if r := ask(sc, srr, "offset dur g 0 9 5\r\n"); string(r.Body) != "1" {
		t.Fatalf("offset on the slave after the put was acknowledged: %d %q, want 1", r.Code, r.Body)
	}
	if r := ask(sc, srr, "seek dur 0 99999999999999 8\r\n"); string(r.Body) != "1" {
		t.Fatalf("seek on the slave after the put was acknowledged: %d %q, want 1", r.Code, r.Body)
	}
	if r := ask(sc, srr, "query id "+id+" 6\r\n"); r.Kind != protocol.ReplyValue {
		t.Fatalf("query id %s on the slave after the put was acknowledged: %d %q", id, r.Code, r.Body)
	}
}

// A slave restarted while it holds bytes its master has not acknowledged (docs/replication.md,
// "Reads from a slave": the high watermark is kept in the slave's data directory and its store
// opens with it as its read limit). Real processes: a master with syncReplicas=2 and one slave
// holds a put (the slave has it durably); the slave is killed with SIGKILL and restarted, with
// its watermark file intact and then damaged: a get long poll, offset and stats on it do not show
// the put. A second slave joins, the put is acknowledged, and the restarted slave serves it.
// Then a second put is held the same way, the master and the slave are killed, and the slave
// restarted alone does not serve it either; the master's restart acknowledges it (its whole
// recovered log is its history) and the slave serves it. The restarted master writes its epoch
// record above the slave's read limit (one slave of two: the gate holds it): the slave, killed
// and restarted once more, reports that epoch (found past its read limit), so it is not told to
// truncate (409) and follows on.
func TestRestartedSlaveServesOnlyAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	g := newGatedGroup(t)
	mini, maddr, s0ini, s0addr, s1ini, s1addr := g.mini, g.maddr, g.s0ini, g.s0addr, g.s1ini, g.s1addr
	m := startBrokerProc(t, maddr, "-c", mini)
	s0 := startBrokerProc(t, s0addr, "-c", s0ini)
	// linked waits until the slave holds the master's log and its read limit is at least the
	// master's committed position, then checks that it is no more than that.
	linked := func(what string) {
		t.Helper()
		waitFor(t, 60*time.Second, func() bool {
			c := statInt(maddr, "replication_committed_position")
			return c >= 0 && statInt(s0addr, "replication_committed_position") >= c &&
				statInt(s0addr, "replication_durable_position") == statInt(maddr, "replication_durable_position")
		}, what)
		if c, l := statInt(maddr, "replication_committed_position"), statInt(s0addr, "replication_committed_position"); l != c {
			t.Fatalf("%s: the slave's read limit is %d, the master's committed position %d", what, l, c)
		}
	}
	linked("the slave to link and learn the master's committed position")

	ask := func(addr, cmd string) protocol.Reply {
		t.Helper()
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := nc.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
		r, err := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20).Next()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// hold sends a put the master cannot acknowledge yet (one slave of two) on a connection of
	// its own, and waits until the slave holds it durably.
	hold := func(data string) (net.Conn, *protocol.ReplyReader) {
		t.Helper()
		return holdPut(t, maddr, s0addr, statInt(maddr, "replication_durable_position"), data)
	}
	// serves checks what the slave shows of partition 0: want messages (offset, seek), the last
	// of them data (a get at its offset), and nothing past them (a long poll finds nothing).
	serves := func(want int, data, when string) {
		t.Helper()
		if r := ask(s0addr, "offset dur g 0 9 3\r\n"); string(r.Body) != strconv.Itoa(want) {
			t.Fatalf("offset on the slave %s: %d %q, want %d", when, r.Code, r.Body, want)
		}
		if r := ask(s0addr, "seek dur 0 99999999999999 7\r\n"); string(r.Body) != strconv.Itoa(want) {
			t.Fatalf("seek on the slave %s: %d %q, want %d", when, r.Code, r.Body, want)
		}
		if want > 0 {
			r := ask(s0addr, fmt.Sprintf("get dur g 0 %d 65536 4\r\n", want-1))
			if r.Kind != protocol.ReplyValue || !strings.Contains(string(r.Body), data) {
				t.Fatalf("get of offset %d on the slave %s: %d %q, want %q", want-1, when, r.Code, r.Body, data)
			}
		}
		if r := ask(s0addr, fmt.Sprintf("get dur g 0 %d 65536 2 1000\r\n", want)); r.Kind == protocol.ReplyValue || r.Code != 404 {
			t.Fatalf("get of offset %d on the slave %s: %d %q, want 404", want, when, r.Code, r.Body)
		}
	}
	restartSlave := func() {
		t.Helper()
		s0.signal(syscall.SIGKILL)
		s0.wait(30 * time.Second)
		s0 = startBrokerProc(t, s0addr, "-c", s0ini)
	}
	noTruncation := func() {
		t.Helper()
		if out := s0.stderr.String(); strings.Contains(out, "must be reopened") || strings.Contains(out, "truncated the commit log") {
			t.Fatalf("the restarted slave was told to truncate:\n%s", out)
		}
	}
	wmPath := filepath.Join(g.s0dir, "data", "watermark")

	// 1. The master holds the put, the slave restarts: the put is not served.
	pc, prr := hold("held-1")
	committed := statInt(maddr, "replication_committed_position")
	restartSlave()
	serves(0, "", "restarted while the master holds the put")
	linked("the restarted slave to link again")
	if c := statInt(s0addr, "replication_committed_position"); c != committed {
		t.Fatalf("the restarted slave's read limit is %d, want the master's committed %d", c, committed)
	}
	noTruncation()
	// The same with its watermark file torn (a crash of the machine in the middle of its
	// rewrite): it serves nothing past what it had indexed before, says so, and follows on.
	s0.signal(syscall.SIGKILL)
	s0.wait(30 * time.Second)
	if err := os.WriteFile(wmPath, []byte("0000000000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	s0 = startBrokerProc(t, s0addr, "-c", s0ini)
	linked("the slave restarted with a torn watermark file to link again")
	serves(0, "", "restarted with a torn watermark file")
	if !strings.Contains(s0.stderr.String(), "high watermark file is damaged") {
		t.Fatalf("the slave did not report its damaged watermark file:\n%s", s0.stderr.String())
	}

	// 2. A second slave joins: the put is acknowledged and the restarted slave serves it.
	s1 := startBrokerProc(t, s1addr, "-c", s1ini)
	_ = pc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if r, err := prr.Next(); err != nil || r.Code != 200 {
		t.Fatalf("the put once two slaves hold it: %v %d %q", err, r.Code, r.Body)
	}
	waitFor(t, 60*time.Second, func() bool {
		return statInt(s0addr, "replication_committed_position") >= statInt(maddr, "replication_durable_position")
	},
		"the slave to hear that the put is acknowledged")
	serves(1, "held-1", "after the put was acknowledged")

	// 3. The second slave goes, a second put is held; the master and the slave are killed, and
	// the slave restarted alone does not serve it.
	s1.signal(syscall.SIGKILL)
	s1.wait(30 * time.Second)
	hold("held-2")
	m.signal(syscall.SIGKILL)
	m.wait(30 * time.Second)
	restartSlave()
	serves(1, "held-1", "restarted while the master is gone")

	// 4. The master restarts: its recovered log is acknowledged (its floor), the slave serves
	// the put. Its epoch record is appended after that floor and, with one slave of two, held
	// above the slave's read limit.
	m = startBrokerProc(t, maddr, "-c", mini)
	waitFor(t, 60*time.Second, func() bool {
		return statInt(s0addr, "replication_durable_position") == statInt(maddr, "replication_durable_position") &&
			statInt(s0addr, "replication_committed_position") == statInt(maddr, "replication_committed_position")
	}, "the slave to follow the restarted master")
	serves(2, "held-2", "after the master restarted")
	epoch := statInt(maddr, "replication_epoch")
	if lim, end := statInt(s0addr, "replication_committed_position"), statInt(s0addr, "replication_durable_position"); lim >= end {
		t.Fatalf("the slave's read limit %d is not below its log's end %d: the restarted master's epoch record (epoch %d) should be held above it",
			lim, end, epoch)
	}
	if e := statInt(s0addr, "replication_epoch"); e != epoch {
		t.Fatalf("the slave is in epoch %d, the master in %d", e, epoch)
	}
	noTruncation()

	// 5. The slave restarts with that epoch record past its read limit: it reports the
	// master's epoch and follows on, without a truncation.
	restartSlave()
	linked("the slave restarted with an epoch record past its read limit to link again")
	noTruncation()
	if e := statInt(s0addr, "replication_epoch"); e != epoch {
		t.Fatalf("the restarted slave is in epoch %d, the master in %d", e, epoch)
	}
	serves(2, "held-2", "restarted with an epoch record past its read limit")
	if _, err := os.Stat(wmPath); err != nil {
		t.Fatalf("the slave's watermark file: %v", err)
	}
}
