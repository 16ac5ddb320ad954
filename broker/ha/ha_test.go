package ha_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/protocol"
)

// slaveINI is the [slave]/[replication] part of a slave's server.ini.
func slaveINI(k int, master string, extra string) string {
	return fmt.Sprintf("\n[slave]\nslaveId=%d\nslaveMaxDelayInMills=500\n[replication]\nmasterAddr=%s\n%s", k, master, extra)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logSum is the SHA-256 of the first n bytes of the commit log in dataDir.
func logSum(t *testing.T, dataDir string, n int64) string {
	t.Helper()
	dir := filepath.Join(dataDir, "commitlog")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if len(e.Name()) == 20 {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	var pos int64
	for _, name := range names {
		if pos >= n {
			break
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		take := min(int64(len(b)), n-pos)
		h.Write(b[:take])
		pos += take
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

type group struct {
	master *brokertest.Broker
	slaves []*brokertest.Broker
}

func startGroup(t *testing.T, slaves int, sync bool, masterExtra string) *group {
	t.Helper()
	g := &group{}
	g.master = brokertest.RunBroker(t, brokertest.Options{Sync: sync, SegSize: 1 << 20, ExtraINI: masterExtra})
	for k := 0; k < slaves; k++ {
		g.slaves = append(g.slaves, brokertest.RunBroker(t, brokertest.Options{Sync: sync, SegSize: 1 << 20,
			ExtraINI: slaveINI(k, g.master.Addr, "")}))
	}
	return g
}

func (g *group) waitCaughtUp(t *testing.T) {
	t.Helper()
	waitFor(t, "slaves caught up", func() bool {
		end := g.master.Store.VisiblePos()
		for _, s := range g.slaves {
			if s.Store.FlushedPos() != end {
				return false
			}
		}
		return true
	})
}

// A master and two slaves: the slaves' commit logs are byte-identical to
// the master's (checksums over the common length), across segment rolls;
// gets, offsets and `query id` on a slave agree with the master; a put to a
// slave is refused with 403 naming the master; stats show the roles.
func TestReplicaLogsIdentical(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncFlush=%v", sync), func(t *testing.T) {
			g := startGroup(t, 2, sync, "")
			c := g.master.Dial()
			defer c.Close()
			type put struct {
				id   int64
				part int32
				off  int64
			}
			var puts []put
			for i := 0; i < 3200; i += 100 { // ~ 3 segments of 1 MiB, pipelined 100 at a time
				for j := i; j < i+100; j++ {
					data := fmt.Sprintf("message %d %s", j, strings.Repeat("x", 1000))
					c.Send(fmt.Sprintf("put test %d %d 0 %d\r\n%s", j%4, len(data), j, data))
				}
				for j := i; j < i+100; j++ {
					r := c.Reply()
					id, part, off, err := protocol.ParsePutResult(r.Body)
					if r.Code != 200 || err != nil {
						t.Fatalf("put %d: %d %s", j, r.Code, r.Body)
					}
					puts = append(puts, put{id, part, off})
				}
			}
			g.waitCaughtUp(t)
			end := g.master.Store.VisiblePos()
			want := logSum(t, g.master.Dir, end)
			for k, s := range g.slaves {
				if got := logSum(t, s.Dir, end); got != want {
					t.Fatalf("slave %d: commit log checksum %s, master %s (over %d bytes)", k, got, want, end)
				}
			}
			s := g.slaves[1]
			sc := s.Dial()
			defer sc.Close()
			for _, p := range []put{puts[0], puts[333], puts[len(puts)-1]} {
				sc.Send(fmt.Sprintf("query id %d 7\r\n", p.id))
				r := sc.Reply()
				if r.Code != 0 && r.Code != 200 {
					t.Fatalf("query id %d on the slave: %d %s", p.id, r.Code, r.Body)
				}
				recs := brokertest.Records(t, r.Body)
				if len(recs) != 1 || recs[0].MsgID != p.id || recs[0].QueueOffset != p.off || recs[0].Partition != p.part {
					t.Fatalf("query id %d on the slave: %+v", p.id, recs)
				}
			}
			waitFor(t, "slave indexes", func() bool { return s.Store.MaxOffset("test", 3) == g.master.Store.MaxOffset("test", 3) })
			sc.Send("get test meta-group 3 0 4194304 9\r\n")
			r := sc.Reply()
			recs := brokertest.Records(t, r.Body)
			if len(recs) != 800 {
				t.Fatalf("get on the slave: %d records, want 800", len(recs))
			}
			sc.Send("put test 0 5 0 11\r\nhello")
			r = sc.Reply()
			if r.Code != 403 || !bytes.Contains(r.Body, []byte(g.master.Addr)) {
				t.Fatalf("put on a slave: %d %s, want 403 naming the master", r.Code, r.Body)
			}
			sc.Send("stats 13\r\n")
			r = sc.Reply()
			if !bytes.Contains(r.Body, []byte("replication_role slave")) {
				t.Fatalf("slave stats: %s", r.Body)
			}
			c.Send("stats 14\r\n")
			r = c.Reply()
			if !bytes.Contains(r.Body, []byte("replication_role master")) || !bytes.Contains(r.Body, []byte("replication_slave1_in_sync")) {
				t.Fatalf("master stats: %s", r.Body)
			}
			// One latency sample per send the slaves acked (lathist.go).
			if !bytes.Contains(r.Body, []byte("replication_slave1_latency_hist ")) {
				t.Fatalf("master stats: %s", r.Body)
			}
			for _, ri := range g.master.HA.Replicas() {
				if ri.Latency.Samples == 0 || ri.Latency.Hist == "-" {
					t.Fatalf("slave %d: no latency samples after catching up: %+v", ri.SlaveID, ri.Latency)
				}
			}
			if g.slaves[0].HA.Role() != ha.RoleSlave || g.master.HA.Role() != ha.RoleMaster {
				t.Fatal("roles")
			}
		})
	}
}
