package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// `metaq brokers` lists every node of a broker group — the master and its
// slave, each with the role it registered under and the one it serves in,
// its epoch, and (the slave) its lag in bytes and ms — as JSON and as a
// table (docs/replication.md, "Setting a group up").
func TestBrokersShowReplication(t *testing.T) {
	zk := zktest.Server(t)
	m := brokertest.RunBroker(t, brokertest.Options{ZK: zk, BrokerID: 3})
	s := brokertest.RunBroker(t, brokertest.Options{ZK: zk, BrokerID: 3, ExtraINI: "\n[slave]\nslaveId=1\n"})
	c := m.Dial()
	defer c.Close()
	c.Put("test", 0, "listed", 1)
	var rows []brokerRow
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, errs, code := runCLI(t, t.Context(), zk, "", "brokers", "--json")
		rows = nil
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 2 &&
			rows[1].Serving == "slave" && rows[1].Epoch > 0 && rows[1].LagBytes == 0 &&
			s.Store.FlushedPos() == m.Store.VisiblePos() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("brokers --json: exit %d, rows %+v\n%s", code, rows, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ms, sl := rows[0], rows[1]
	if ms.ID != 3 || ms.Role != "master" || ms.Serving != "master" || !ms.Up || ms.Address != m.Addr {
		t.Fatalf("master row %+v (master at %s)", ms, m.Addr)
	}
	if sl.ID != 3 || sl.Role != "slave1" || !sl.Up || sl.Address != s.Addr || sl.Epoch != ms.Epoch || sl.LagMs != 0 {
		t.Fatalf("slave row %+v (slave at %s, master's epoch %d)", sl, s.Addr, ms.Epoch)
	}
	out, errs, code := runCLI(t, t.Context(), zk, "", "brokers")
	if code != 0 || !strings.Contains(out, "EPOCH") || !strings.Contains(out, "LAG BYTES") || !strings.Contains(out, "slave1") ||
		!strings.Contains(out, s.Addr) {
		t.Fatalf("brokers table (exit %d):\n%s\n%s", code, out, errs)
	}
}
