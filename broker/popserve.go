package broker

import (
	"context"
	"path/filepath"
	"time"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// openPop starts broker-managed delivery (docs/push.md) for srv: topics
// are the ones srv serves for subscription, dead letters go through the
// delay service's dead-letter queue.
func openPop(c *conf.Config, st *store.Store, d *delay.Service, srv *Server, adjust func(*pop.Config)) (*pop.Pop, error) {
	if !startsAsMaster(c) {
		// A slave's log is the master's, byte for byte: the service, which
		// writes %POP% records, runs on the master only (docs/push.md); a
		// promoted slave opens it then (replication_run.go).
		return nil, nil
	}
	return startPop(c, st, d, srv, adjust)
}

// startPop opens the delivery service from the %POP% records in the log
// and installs it on srv (at start on a master, on promotion).
func startPop(c *conf.Config, st *store.Store, d *delay.Service, srv *Server, adjust func(*pop.Config)) (*pop.Pop, error) {
	pc := pop.Config{
		Store:         st,
		Topics:        srv.popTopic,
		MaxDeliveries: c.System.Pop.MaxDeliveries,
		MaxInflight:   c.System.Pop.MaxInflight,
		MaxGroups:     c.System.Pop.MaxGroups,
		MaxRecordSize: c.System.MaxMessageSize,
		Logger:        srv.log,
		SpillAfter:    time.Duration(c.System.Pop.SpillAfterMs) * time.Millisecond,
		SpillMemory:   int64(c.System.Pop.MemoryMb) << 20,
		OnEvent:       srv.popTraceHook(), // tracetxpop.go
	}
	if c.System.Pop.MemoryMb >= 0 {
		pc.SpillDir = filepath.Join(c.System.DataPath, "pop-spill")
	}
	if d != nil {
		pc.DeadLetter = func(group string, msgID int64, reason string) (*store.Flush, error) {
			_, f, _, err := d.Retry(group, msgID, -1, []byte(reason), nil)
			return f, err
		}
	}
	if adjust != nil {
		adjust(&pc)
	}
	p, err := pop.Open(pc)
	if err != nil {
		return nil, err
	}
	srv.pop.Store(p)
	return p, nil
}

// popTopic reports whether topic is served for subscription, and with how
// many partitions.
func (s *Server) popTopic(topic string) (int, bool) {
	ts := (*s.topics.m.Load())[topic]
	if ts == nil {
		ts = s.topics.lookup([]byte(topic), -1, nil) // a read interns no topic (topics.go)
	}
	if ts == nil || !ts.settings.AcceptSubscribe {
		return 0, false
	}
	return ts.settings.NumPartitions, true
}

// Pop is the broker's delivery service (docs/push.md), for the HTTP and
// WebSocket gateway and embedding. On a slave it is pop.Disabled.
func (b *Broker) Pop() pop.Service {
	if p := b.PopService(); p != nil {
		return p
	}
	return pop.Disabled{}
}

// LivePop is the delivery service as the broker's role changes: each call
// goes to the service running at that moment (pop.Disabled while the node is
// a slave), so a gateway built when the broker started serves a node that is
// promoted later (docs/replication.md, "What a promoted slave starts").
func (b *Broker) LivePop() pop.Service { return livePop{b} }

type livePop struct{ b *Broker }

func (l livePop) Receive(ctx context.Context, group, topic string, f pop.Filter, max int, invisible time.Duration) ([]pop.Delivery, error) {
	return l.b.Pop().Receive(ctx, group, topic, f, max, invisible)
}
func (l livePop) Ack(group, h string) error    { return l.b.Pop().Ack(group, h) }
func (l livePop) Reject(group, h string) error { return l.b.Pop().Reject(group, h) }
func (l livePop) Release(group, h string, d time.Duration) error {
	return l.b.Pop().Release(group, h, d)
}
func (l livePop) Extend(group, h string, d time.Duration) error {
	return l.b.Pop().Extend(group, h, d)
}
func (l livePop) Available() bool { return l.b.PopService() != nil }

// PopService is the concrete service (statistics, tests); nil on a slave.
func (b *Broker) PopService() *pop.Pop {
	if b.Server == nil {
		return b.pop
	}
	return b.Server.pop.Load()
}

// appendPopStats adds the delivery service's counters to `stats` (and, with
// detail, one group of lines per group and topic for `stats pop`).
func (s *Server) appendPopStats(b []byte, detail bool) []byte {
	p := s.pop.Load()
	if p == nil {
		return b
	}
	c := p.Counters()
	b = protocol.AppendStatInt(b, "pop_delivered", c.Delivered.Load())
	b = protocol.AppendStatInt(b, "pop_redelivered", c.Redelivered.Load())
	b = protocol.AppendStatInt(b, "pop_acked", c.Acked.Load())
	b = protocol.AppendStatInt(b, "pop_released", c.Released.Load())
	b = protocol.AppendStatInt(b, "pop_rejected", c.Rejected.Load())
	b = protocol.AppendStatInt(b, "pop_extended", c.Extended.Load())
	b = protocol.AppendStatInt(b, "pop_expired", c.Expired.Load())
	b = protocol.AppendStatInt(b, "pop_dead_letters", c.DeadLettered.Load())
	b = protocol.AppendStatInt(b, "pop_checkpoints", c.Checkpoints.Load())
	b = protocol.AppendStatInt(b, "pop_timer_entries", int64(p.TimerLen()))
	b = protocol.AppendStatInt(b, "pop_spilled", c.Spilled.Load())
	slices, bytes := p.SpillStats()
	b = protocol.AppendStatInt(b, "pop_spill_slices", int64(slices))
	b = protocol.AppendStatInt(b, "pop_spill_file_bytes", bytes)
	if detail {
		for _, sn := range p.Snapshots() {
			k := "pop_" + sn.Group + "_" + sn.Topic
			b = protocol.AppendStatInt(b, k+"_inflight", int64(sn.Inflight))
			b = protocol.AppendStatInt(b, k+"_ready", int64(sn.Ready))
			b = protocol.AppendStatInt(b, k+"_window", int64(sn.Window))
		}
	}
	return b
}
