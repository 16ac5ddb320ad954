package broker

import (
	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
)

// openPop starts broker-managed delivery (docs/push.md) for srv: topics
// are the ones srv serves for subscription, dead letters go through the
// delay service's dead-letter queue.
func openPop(c *conf.Config, st *store.Store, d *delay.Service, srv *Server, adjust func(*pop.Config)) (*pop.Pop, error) {
	pc := pop.Config{
		Store:         st,
		Topics:        srv.popTopic,
		MaxDeliveries: c.System.Pop.MaxDeliveries,
		MaxInflight:   c.System.Pop.MaxInflight,
		MaxRecordSize: c.System.MaxMessageSize,
		Logger:        srv.log,
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
	srv.pop = p
	return p, nil
}

// popTopic reports whether topic is served for subscription, and with how
// many partitions.
func (s *Server) popTopic(topic string) (int, bool) {
	ts := (*s.topics.m.Load())[topic]
	if ts == nil {
		ts = s.topics.get([]byte(topic))
	}
	if ts == nil || !ts.settings.AcceptSubscribe {
		return 0, false
	}
	return ts.settings.NumPartitions, true
}

// Pop is the broker's delivery service (docs/push.md), for the HTTP and
// WebSocket gateway and embedding.
func (b *Broker) Pop() pop.Service { return b.pop }

// PopService is the concrete service (statistics, tests).
func (b *Broker) PopService() *pop.Pop { return b.pop }
