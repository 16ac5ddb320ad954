package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// The failover fault tests (docs/replication.md, "Failure cases"): real metaq broker processes,
// a real ZooKeeper, kill -9.

const (
	foTopic      = "fo"
	foParts      = 2
	foSessionMs  = 2000 // zk.zkSessionTimeoutMs of the brokers (the private ZooKeeper ticks 500 ms)
	foBrokerID   = 1
	foProducers  = 8 // concurrent Sends: pipelined puts on the producer's connection
	foChroot     = "/fo"
	foMaxRoundTO = 90 * time.Second
)

// foNode is one broker of the group: its configuration stays the same across restarts.
type foNode struct {
	t       *testing.T
	slaveID int
	dir     string
	ini     string
	addr    string
	proc    *brokerProc
	logs    []*syncBuffer // stderr of every run
}

func (n *foNode) name() string { return zkmeta.ReplicaName(n.slaveID) }

func writeFailoverINI(t *testing.T, dir string, slaveID int, zkConnect string) (path, addr string) {
	return writeGroupINI(t, dir, slaveID, zkConnect, true)
}

func writeGroupINI(t *testing.T, dir string, slaveID int, zkConnect string, auto bool) (path, addr string) {
	t.Helper()
	port := zktest.FreePort(t)
	var b strings.Builder
	fmt.Fprintf(&b, "[system]\nbrokerId=%d\nhostName=127.0.0.1\nbindHost=127.0.0.1\nserverPort=%d\ndashboardHttpPort=0\n", foBrokerID, port)
	fmt.Fprintf(&b, "dataPath=%s\nmaxSegmentSize=1048576\nindexFileSize=65536\nmaxMessageSize=65536\nunflushThreshold=0\n", filepath.Join(dir, "data"))
	fmt.Fprintf(&b, "[zookeeper]\nzk.zkConnect=%s\nzk.zkSessionTimeoutMs=%d\nzk.zkSyncTimeMs=0\n", zkConnect, foSessionMs)
	fmt.Fprintf(&b, "[slave]\nslaveId=%d\n", slaveID)
	fmt.Fprintf(&b, "[replication]\nsyncReplicas=1\nreplicaTimeoutMs=2000\nautoFailover=%v\n", auto)
	fmt.Fprintf(&b, "[topic=%s]\nnumPartitions=%d\n", foTopic, foParts)
	path = filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, "127.0.0.1:" + strconv.Itoa(port)
}

func (n *foNode) start() {
	n.t.Helper()
	n.proc = startBrokerProc(n.t, n.addr, "-c", n.ini)
	n.logs = append(n.logs, n.proc.stderr)
}

func (n *foNode) kill9() {
	n.t.Helper()
	n.proc.signal(syscall.SIGKILL)
	<-n.proc.done
}

func (n *foNode) alive() bool {
	select {
	case <-n.proc.done:
		return false
	default:
		return true
	}
}

func (n *foNode) allLogs() string {
	var b strings.Builder
	for i, l := range n.logs {
		fmt.Fprintf(&b, "---- %s run %d ----\n%s", n.name(), i+1, l.String())
	}
	return b.String()
}

// ack is one acknowledged put.
type ack struct {
	producer, seq int
	part          int
	offset        int64
	sent, at      time.Time // Send called, Send returned
}

type foCluster struct {
	t     *testing.T
	zk    *zkmeta.Client
	nodes []*foNode
	prod  *client.Producer
	adm   *client.Admin

	mu      sync.Mutex
	acks    []ack
	lastAck time.Time
	fails   map[string]int
	stop    atomic.Bool
	wg      sync.WaitGroup
}

func startFailoverCluster(t *testing.T, zkAddr string) *foCluster {
	t.Helper()
	zkConnect := zkAddr + foChroot
	c := &foCluster{t: t, fails: map[string]int{}}
	for _, sid := range []int{-1, 0, 1} {
		dir := t.TempDir()
		ini, addr := writeFailoverINI(t, dir, sid, zkConnect)
		n := &foNode{t: t, slaveID: sid, dir: dir, ini: ini, addr: addr}
		n.start()
		c.nodes = append(c.nodes, n)
	}
	c.attach(zkConnect)
	c.waitGroupComplete(0)
	cfg := client.Config{ZKConnect: zkConnect, ZKSessionTimeout: 10 * time.Second, DialTimeout: 2 * time.Second,
		RequestTimeout: 5 * time.Second, Producer: client.ProducerOptions{SendRetries: 1}, Logger: quietLog}
	var err error
	if c.prod, err = client.NewProducer(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.prod.Close() })
	return c
}

// attach logs the nodes' output if the test fails, and connects the cluster's ZooKeeper client
// and admin client.
func (c *foCluster) attach(zkConnect string) {
	t := c.t
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("%s", n.allLogs())
			}
		}
	})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkConnect, SessionTimeout: 10 * time.Second, Logger: quietPrintf{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	c.zk = zc
	if c.adm, err = client.NewAdmin(client.Config{DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.adm.Close() })
}

type quietPrintf struct{}

func (quietPrintf) Printf(string, ...any) {}

// group reads the election's state and the replicas.
func (c *foCluster) group() (zkmeta.HAGroup, []zkmeta.ReplicaState) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.zk.HAGroup(ctx, foBrokerID)
	if err != nil {
		c.t.Fatal(err)
	}
	reps, err := c.zk.ReadReplicas(ctx, foBrokerID)
	if err != nil {
		c.t.Fatal(err)
	}
	return g, reps
}

// waitGroupComplete waits until there is a master of an epoch > minEpoch and all three replicas
// follow it in sync at that epoch.
func (c *foCluster) waitGroupComplete(minEpoch int64) (zkmeta.HAGroup, []zkmeta.ReplicaState) {
	c.t.Helper()
	var g zkmeta.HAGroup
	var reps []zkmeta.ReplicaState
	waitFor(c.t, foMaxRoundTO, func() bool {
		g, reps = c.group()
		if g.Master == "" || g.Epoch.Value <= minEpoch || len(reps) != len(c.nodes) {
			return false
		}
		for _, r := range reps {
			if r.Epoch != g.Epoch.Value || !r.InSync || r.MasterSeen != g.Master {
				return false
			}
		}
		return true
	}, "a complete group (master + 2 slaves in sync, epoch > "+strconv.FormatInt(minEpoch, 10)+")")
	return g, reps
}

func (c *foCluster) nodeAt(addr string) *foNode {
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	c.t.Fatalf("no node at %s", addr)
	return nil
}

// produce runs foProducers goroutines of sequential Sends until stop.
func (c *foCluster) produce() {
	for p := range foProducers {
		c.wg.Go(func() {
			for seq := 0; !c.stop.Load(); seq++ {
				body := fmt.Sprintf("p%d-%d", p, seq)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				sent := time.Now()
				res, err := c.prod.Send(ctx, &client.Message{Topic: foTopic, Body: []byte(body)})
				cancel()
				now := time.Now()
				c.mu.Lock()
				if err == nil {
					c.acks = append(c.acks, ack{producer: p, seq: seq, part: res.Partition.Partition, offset: res.Offset, sent: sent, at: now})
					c.lastAck = now
				} else {
					c.fails[firstLine(err.Error())]++
				}
				c.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	// addresses and offsets vary: keep the kind of failure
	if len(s) > 90 {
		s = s[:90]
	}
	return s
}

// firstAckAfter waits for the first acknowledgement of a put sent after t0. (A put sent
// before the kill may be acknowledged just after it: its reply was on its way from the old
// master. Counting it measured failovers of 0 s.)
func (c *foCluster) firstAckAfter(t0 time.Time) time.Time {
	c.t.Helper()
	var at time.Time
	waitFor(c.t, foMaxRoundTO, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		found := false
		if c.lastAck.After(t0) {
			for i := len(c.acks) - 1; i >= 0 && c.acks[i].at.After(t0); i-- {
				if c.acks[i].sent.After(t0) && (!found || c.acks[i].at.Before(at)) {
					at, found = c.acks[i].at, true
				}
			}
		}
		return found
	}, "an acknowledged put sent after the kill")
	return at
}

// verify reads every partition from the master and checks every acknowledged message.
func (c *foCluster) verify(master string) (acked, read int) {
	c.t.Helper()
	c.mu.Lock()
	acks := slices.Clone(c.acks)
	c.mu.Unlock()
	byPart := map[int]map[int64]string{}
	for p := range foParts {
		byPart[p] = map[int64]string{}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var off int64
		lastSeq := map[int]int{}
		for {
			res, err := c.adm.Fetch(ctx, master, foTopic, p, off, 1<<20)
			if err != nil {
				var be *client.BrokerError
				if errors.As(err, &be) && be.Code == 404 {
					break
				}
				cancel()
				c.t.Fatalf("fetch %s-%d@%d from %s: %v", foTopic, p, off, master, err)
			}
			if len(res.Messages) == 0 {
				if res.Moved {
					off = res.NextOffset
					continue
				}
				break
			}
			for _, m := range res.Messages {
				byPart[p][m.Offset] = string(m.Body)
				read++
				var prod, seq int
				if _, err := fmt.Sscanf(string(m.Body), "p%d-%d", &prod, &seq); err == nil {
					if last, ok := lastSeq[prod]; ok && seq <= last {
						c.t.Errorf("partition %d: producer %d's seq %d at offset %d after seq %d: out of order", p, prod, seq, m.Offset, last)
					}
					lastSeq[prod] = seq
				}
			}
			off = res.NextOffset
		}
		cancel()
	}
	missing := 0
	for _, a := range acks {
		got, ok := byPart[a.part][a.offset]
		want := fmt.Sprintf("p%d-%d", a.producer, a.seq)
		if !ok || got != want {
			if missing < 10 {
				c.t.Errorf("acknowledged %s (partition %d offset %d, at %s) reads back as %q (present %v)",
					want, a.part, a.offset, a.at.Format("15:04:05.000"), got, ok)
			}
			missing++
		}
	}
	if missing > 0 {
		c.t.Errorf("%d of %d acknowledged messages are not readable from the master %s", missing, len(acks), master)
	}
	return len(acks), read
}

// logDigests: the sha256 of each node's commit log over [0, upTo).
func logDigest(t *testing.T, dataPath string, upTo int64) string {
	t.Helper()
	dir := filepath.Join(dataPath, "commitlog")
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
	var pos int64
	for _, name := range names {
		base, err := strconv.ParseInt(name, 10, 64)
		if err != nil || base != pos || pos >= upTo {
			if pos >= upTo {
				break
			}
			t.Fatalf("%s: segment %s where offset %d was expected", dir, name, pos)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		n := min(st.Size(), upTo-pos)
		if _, err := io.CopyN(h, f, n); err != nil {
			f.Close()
			t.Fatal(err)
		}
		f.Close()
		pos += st.Size()
	}
	if pos < upTo {
		t.Fatalf("%s holds %d bytes, want at least %d", dir, pos, upTo)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestFailoverKill9 is the fault test of automatic failover: a master with syncReplicas=1 and
// two slaves, producers pipelining puts through ZooKeeper; the current master is killed with
// SIGKILL at a random moment, METAQ_FAILOVER_ROUNDS times (default 5), and restarted with its
// unchanged server.ini. Afterwards every acknowledged message is readable from the current
// master at its acknowledged offset, in order per partition, and the three commit logs are
// byte-identical over their common length. The failover time (kill → first acknowledged put
// on the new master) is logged per round with p50/max.
func TestFailoverKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level fault test")
	}
	rounds := 5
	if v := os.Getenv("METAQ_FAILOVER_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("METAQ_FAILOVER_ROUNDS=%q", v)
		}
	}
	zk := zktest.StartZooKeeper(t)
	c := startFailoverCluster(t, zk.Addr())
	g, _ := c.group()
	t.Logf("group up: master %s, epoch %d", g.Master, g.Epoch.Value)
	c.produce()
	var times []time.Duration
	for round := 1; round <= rounds; round++ {
		time.Sleep(time.Duration(200+rand.IntN(1300)) * time.Millisecond)
		g, _ = c.group()
		victim := c.nodeAt(g.Master)
		c.mu.Lock()
		before := len(c.acks)
		c.mu.Unlock()
		killed := time.Now()
		victim.kill9()
		first := c.firstAckAfter(killed)
		d := first.Sub(killed)
		times = append(times, d)
		victim.start()
		ng, _ := c.waitGroupComplete(g.Epoch.Value)
		c.mu.Lock()
		after := len(c.acks)
		c.mu.Unlock()
		t.Logf("round %d: killed %s (%s, epoch %d) after %d acks; new master %s (%s, epoch %d); failover %s; group complete again %s after the kill",
			round, victim.name(), victim.addr, g.Epoch.Value, before, c.nodeAt(ng.Master).name(), ng.Master, ng.Epoch.Value,
			d.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
		_ = after
	}
	c.stop.Store(true)
	c.wg.Wait()

	// Every node holds the same log: wait for the same durable position everywhere.
	var reps []zkmeta.ReplicaState
	waitFor(t, foMaxRoundTO, func() bool {
		g, reps = c.group()
		if len(reps) != 3 {
			return false
		}
		for _, r := range reps[1:] {
			if r.Pos != reps[0].Pos || r.Epoch != reps[0].Epoch {
				return false
			}
		}
		return true
	}, "every replica at the same durable position")
	acked, read := c.verify(g.Master)
	upTo := reps[0].Pos
	digests := map[string]string{}
	for _, n := range c.nodes {
		digests[n.name()] = logDigest(t, filepath.Join(n.dir, "data"), upTo)
	}
	if digests["m"] != digests["s0"] || digests["m"] != digests["s1"] {
		t.Errorf("commit logs differ over [0, %d): %v", upTo, digests)
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	c.mu.Lock()
	fails := c.fails
	c.mu.Unlock()
	var truncs []string
	for _, n := range c.nodes {
		for _, line := range strings.Split(n.allLogs(), "\n") {
			if strings.Contains(line, "truncat") || strings.Contains(line, "bytesCut") {
				truncs = append(truncs, n.name()+": "+line)
			}
		}
	}
	t.Logf("%d rounds: %d acknowledged puts, %d messages read back from the master %s, commit logs identical over %d bytes (sha256 %s…)",
		rounds, acked, read, g.Master, upTo, digests["m"][:16])
	t.Logf("failover time (kill -9 → first acknowledged put on the new master), session timeout %dms: p50 %s, max %s, all %v",
		foSessionMs, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), roundAll(times))
	t.Logf("refused puts during failovers (the producer retried them): %v", fails)
	t.Logf("truncations logged: %d\n%s", len(truncs), strings.Join(truncs, "\n"))
}

func roundAll(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}

// blackhole is a TCP proxy that can stop forwarding (both ways) while keeping the connections
// open: to the broker behind it ZooKeeper looks hung (as with SIGSTOP), to everybody else it is
// fine.
type blackhole struct {
	ln      net.Listener
	target  string
	holding atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) serve(c net.Conn) {
	if b.holding.Load() {
		b.track(c) // accepted, never answered
		return
	}
	up, err := net.Dial("tcp", b.target)
	if err != nil {
		c.Close()
		return
	}
	b.track(c, up)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for b.holding.Load() {
				time.Sleep(10 * time.Millisecond) // hold: nothing passes (the bytes read wait)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
}

func (b *blackhole) track(cs ...net.Conn) {
	b.mu.Lock()
	b.conns = append(b.conns, cs...)
	b.mu.Unlock()
}

// TestFailoverZooKeeperPartition cuts the master off ZooKeeper (a blackholing proxy between them:
// its ZooKeeper looks hung) while producers still reach it directly. It must fence itself and
// acknowledge nothing the new master does not have: every put it acknowledged after the cut is
// readable from the new master, and once a new master exists it answers puts with an error
// (fenced, and its slaves follow the new master, so it could not gather an acknowledgement
// anyway). When the partition heals it rejoins as a slave.
func TestFailoverZooKeeperPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level fault test")
	}
	zk := zktest.StartZooKeeper(t)
	hole := newBlackhole(t, zk.Addr())
	zkConnect := zk.Addr() + foChroot
	var nodes []*foNode
	for _, sid := range []int{-1, 0, 1} {
		dir := t.TempDir()
		via := zkConnect
		if sid < 0 {
			via = hole.addr() + foChroot
		}
		ini, addr := writeFailoverINI(t, dir, sid, via)
		n := &foNode{t: t, slaveID: sid, dir: dir, ini: ini, addr: addr}
		n.start()
		nodes = append(nodes, n)
	}
	c := &foCluster{t: t, nodes: nodes, fails: map[string]int{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s", n.allLogs())
			}
		}
	})
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkConnect, SessionTimeout: 10 * time.Second, Logger: quietPrintf{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	c.zk = zc
	g, _ := c.waitGroupComplete(0)
	if g.Master != nodes[0].addr {
		t.Fatalf("the configured master did not win the first election: %+v", g)
	}
	if c.adm, err = client.NewAdmin(client.Config{DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.adm.Close() })
	// A producer that talks to the master directly (no ZooKeeper: it keeps sending to it).
	direct := directProducer(t, nodes[0].addr)
	t.Cleanup(func() { direct.Close() })
	type put struct {
		part     int
		offset   int64
		body     string
		sent, at time.Time
	}
	var mu sync.Mutex
	var acked []put
	var refused []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for seq := 0; !stop.Load(); seq++ {
				body := fmt.Sprintf("d%d-%d", p, seq)
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := direct.SendToPartition(ctx, &client.Message{Topic: foTopic, Body: []byte(body)}, client.Partition{BrokerID: foBrokerID, Partition: p % foParts})
				cancel()
				mu.Lock()
				if err == nil {
					acked = append(acked, put{res.Partition.Partition, res.Offset, body, sent, time.Now()})
				} else {
					refused = append(refused, firstLine(err.Error()))
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(time.Second)
	cut := time.Now()
	hole.holding.Store(true)
	// The master's session expires, a slave is elected.
	var ng zkmeta.HAGroup
	waitFor(t, foMaxRoundTO, func() bool {
		ng, _ = c.group()
		return ng.Master != "" && ng.Master != nodes[0].addr && ng.Epoch.Value > g.Epoch.Value
	}, "a new master while the old one is partitioned")
	elected := time.Now()
	// Keep producing against the partitioned master for a while after the election.
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	var afterCut, afterElection int
	for _, a := range acked {
		if a.at.After(cut) {
			afterCut++
		}
		if a.sent.After(elected) {
			afterElection++ // sent once the new master existed: the old one must refuse it
		}
	}
	total := len(acked)
	refusedN := len(refused)
	kinds := map[string]int{}
	for _, r := range refused {
		kinds[r]++
	}
	mu.Unlock()
	t.Logf("cut at %s; new master %s (epoch %d) %s after the cut; the old master acknowledged %d puts in all, %d after the cut, %d sent after the election; refused %d: %v",
		cut.Format("15:04:05.000"), ng.Master, ng.Epoch.Value, elected.Sub(cut).Round(time.Millisecond), total, afterCut, afterElection, refusedN, kinds)
	if afterElection > 0 {
		t.Errorf("the partitioned master acknowledged %d puts sent after a new master was elected", afterElection)
	}
	// Everything it acknowledged is on the new master.
	newMaster := ng.Master
	missing := 0
	for _, a := range acked {
		res, err := c.adm.Fetch(context.Background(), newMaster, foTopic, a.part, a.offset, 65536)
		if err != nil || len(res.Messages) == 0 || res.Messages[0].Offset != a.offset || !bytes.Equal(res.Messages[0].Body, []byte(a.body)) {
			if missing < 5 {
				t.Errorf("acknowledged %s at %d-%d (at %s) is not on the new master: %v", a.body, a.part, a.offset, a.at.Format("15:04:05.000"), err)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d puts acknowledged by the partitioned master are missing on the new master", missing, total)
	}
	// Heal: the old master learns its session expired, sees the newer epoch and follows.
	hole.holding.Store(false)
	waitFor(t, foMaxRoundTO, func() bool {
		_, reps := c.group()
		for _, r := range reps {
			if r.Name == "m" && r.Role == "slave" && r.MasterSeen == newMaster {
				return true
			}
		}
		return false
	}, "the old master following the new one after the partition healed")
	if !strings.Contains(nodes[0].allLogs(), "fenc") {
		t.Errorf("the partitioned master did not log its fencing")
	}
}

// TestFailoverPlannedPromote: `metaq broker promote 1 0` while producers run: the slave becomes
// master under a new epoch, no acknowledged message is lost, puts are paused only around the
// switch (the longest gap between acknowledgements is logged), and switching back works.
func TestFailoverPlannedPromote(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level fault test")
	}
	zk := zktest.StartZooKeeper(t)
	c := startFailoverCluster(t, zk.Addr())
	g, _ := c.group()
	if g.Master != c.nodes[0].addr {
		t.Fatalf("the configured master did not win the first election: %+v", g)
	}
	c.produce()
	zkConnect := zk.Addr() + foChroot
	for _, step := range []struct{ arg, want string }{{"0", "s0"}, {"m", "m"}} {
		time.Sleep(time.Second)
		start := time.Now()
		out, errs, code := runCLI(t, context.Background(), zkConnect, "", "broker", "promote", "1", step.arg, "--timeout", "60s")
		if code != 0 {
			t.Fatalf("promote 1 %s: exit %d\n%s%s", step.arg, code, out, errs)
		}
		took := time.Since(start)
		ng, _ := c.waitGroupComplete(g.Epoch.Value)
		if c.nodeAt(ng.Master).name() != step.want {
			t.Fatalf("after promote 1 %s the master is %s", step.arg, ng.Master)
		}
		// The promoted node serves its whole log: its high watermark file is gone; the slaves
		// (the demoted one too) keep theirs (docs/replication.md, "Reads from a slave").
		for _, n := range c.nodes {
			path := filepath.Join(n.dir, "data", "watermark")
			if n.addr == ng.Master {
				waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(path); return os.IsNotExist(err) },
					"the promoted "+n.name()+" to remove its watermark file")
			} else {
				waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(path); return err == nil },
					"slave "+n.name()+" to keep its watermark file")
			}
		}
		time.Sleep(time.Second)
		c.mu.Lock()
		var gap time.Duration
		for i := 1; i < len(c.acks); i++ {
			if c.acks[i].at.After(start) {
				gap = max(gap, c.acks[i].at.Sub(c.acks[i-1].at))
			}
		}
		c.mu.Unlock()
		t.Logf("promote 1 %s: %s; command took %s; longest gap between acknowledged puts since: %s", step.arg, strings.TrimSpace(out),
			took.Round(time.Millisecond), gap.Round(time.Millisecond))
		g = ng
	}
	c.stop.Store(true)
	c.wg.Wait()
	acked, read := c.verify(g.Master)
	t.Logf("%d acknowledged, %d read back from %s", acked, read, g.Master)
}

// TestConsumersFallBackToSlave: a static group (autoFailover=false: nobody is promoted) loses its
// master. The Go client's group consumer and `metaq consume` read the partitions from the slave
// meanwhile (same offsets: the logs are identical) and return to the master when it is back,
// without skipping anything or delivering anything twice beyond the commit window.
func TestConsumersFallBackToSlave(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level fault test")
	}
	zk := zktest.StartZooKeeper(t)
	zkConnect := zk.Addr() + foChroot
	var nodes []*foNode
	for _, sid := range []int{-1, 0} {
		dir := t.TempDir()
		ini, addr := writeGroupINI(t, dir, sid, zkConnect, false)
		n := &foNode{t: t, slaveID: sid, dir: dir, ini: ini, addr: addr}
		n.start()
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s", n.allLogs())
			}
		}
	})
	cfg := client.Config{ZKConnect: zkConnect, ZKSessionTimeout: 10 * time.Second, DialTimeout: 2 * time.Second,
		RequestTimeout: 5 * time.Second, Logger: quietLog}
	prod, err := client.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	send := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			var err error
			for range 50 { // the slave must be in sync first (syncReplicas=1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = prod.Send(ctx, &client.Message{Topic: foTopic, Body: []byte(fmt.Sprintf("m-%d", i))})
				cancel()
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	send(0, 200)
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkConnect, SessionTimeout: 10 * time.Second, Logger: quietPrintf{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	masterGone := func() bool {
		bs, err := zc.Brokers(context.Background())
		return err == nil && len(bs) == 1 && bs[0].Master == "" && bs[0].Slaves[0] == nodes[1].addr
	}
	// The slave must hold all 200 before the master goes (sync replication: it does once acked),
	// and must have heard that the master acknowledged them: a slave serves reads only below the
	// master's high watermark as last heard (docs/replication.md), which follows an ack by a
	// heartbeat, so a kill right after the last ack could leave the last puts unserved.
	waitFor(t, foMaxRoundTO, func() bool {
		c := statInt(nodes[0].addr, "replication_committed_position")
		return c > 0 && statInt(nodes[1].addr, "replication_committed_position") >= c
	}, "the slave has heard the master's high watermark for all 200")
	nodes[0].kill9()
	waitFor(t, foMaxRoundTO, masterGone, "the master's node gone, the slave's still there")

	// metaq consume (no group) reads everything from the slave.
	out, errs, code := runCLI(t, context.Background(), zkConnect, "", "consume", "-t", foTopic, "--from", "earliest", "--count", "200", "--timeout", "60s")
	lines := strings.Fields(out)
	if code != 0 || len(lines) != 200 {
		t.Fatalf("metaq consume from the slave: exit %d, %d lines\n%s", code, len(lines), errs)
	}

	// The Go group consumer too, and it keeps going when the master comes back.
	// seen counts the bodies delivered; at counts deliveries per stored position. send retries a
	// put that timed out, and such a put may have been stored too: then one body is stored twice,
	// at two positions, and both copies are delivered. That is the producer's duplicate, not the
	// consumer's; a consumer that redelivers hands out one position twice.
	type position struct {
		p   client.Partition
		off int64
	}
	var mu sync.Mutex
	seen := map[string]int{}
	at := map[position]int{}
	cons, err := client.NewConsumer(client.Config{ZKConnect: zkConnect, ZKSessionTimeout: 10 * time.Second, DialTimeout: 2 * time.Second,
		RequestTimeout: 5 * time.Second, Logger: quietLog, Consumer: client.ConsumerOptions{CommitInterval: 200 * time.Millisecond}}, "fallback")
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe(foTopic, "", func(_ context.Context, m *client.Message) error {
		mu.Lock()
		seen[string(m.Body)]++
		at[position{m.Partition, m.Offset}]++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close() })
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	waitFor(t, foMaxRoundTO, func() bool { return count() == 200 }, "the group consumer reading 200 messages from the slave")

	nodes[0].start()
	waitFor(t, foMaxRoundTO, func() bool {
		bs, err := zc.Brokers(context.Background())
		return err == nil && len(bs) == 1 && bs[0].Master == nodes[0].addr
	}, "the master registered again")
	send(200, 100)
	waitFor(t, foMaxRoundTO, func() bool { return count() == 300 }, "the group consumer reading the 100 new messages")
	mu.Lock()
	for i := range 300 {
		if seen[fmt.Sprintf("m-%d", i)] == 0 {
			t.Errorf("m-%d never delivered", i)
		}
	}
	dups, stored := 0, 0
	for _, n := range at {
		dups += n - 1
	}
	for _, n := range seen {
		stored += n
	}
	stored -= dups
	mu.Unlock()
	if dups > 0 {
		t.Errorf("%d messages delivered twice at the same position (none expected: no consumer restarted)", dups)
	}
	if stored > 300 {
		t.Logf("%d bodies stored twice: puts that timed out on the client and were retried", stored-300)
	}
	// metaq consume returns to the master as well: its partitions are read from the master now.
	out, errs, code = runCLI(t, context.Background(), zkConnect, "", "consume", "-t", foTopic, "--from", "earliest", "--count", "300", "--timeout", "60s", "--verbose")
	if code != 0 || len(strings.Fields(out)) != 300 {
		t.Fatalf("metaq consume after the master came back: exit %d, %d lines\n%s", code, len(strings.Fields(out)), errs)
	}
}
