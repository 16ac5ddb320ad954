package ha

import (
	"log/slog"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// BenchmarkGateCheck: one gate check of a master with two connected slaves
// (the gate's ticker runs it every 20 ms and on every ack).
func BenchmarkGateCheck(b *testing.B) {
	st, err := store.Open(store.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	n := &Node{cfg: Config{SyncReplicas: 1, MaxDelay: time.Hour, ReplicaTimeout: time.Hour}, st: st,
		log: slog.New(slog.DiscardHandler), replicas: map[int]*replica{}}
	n.role.Store(int32(RoleMaster))
	for id := range 2 {
		r := &replica{id: id}
		r.connected.Store(true)
		r.confirmed.Store(true)
		n.replicas[id] = r
	}
	g := &gate{n: n, wake: make(chan struct{}, 1)}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		g.check(now)
	}
}
