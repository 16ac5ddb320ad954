package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/zkmeta"
)

// zkRegistration publishes the broker and its topics in ZooKeeper (the layout
// of docs/zookeeper.md) through zkmeta, which keeps the ephemeral nodes alive across session
// expiries and ZooKeeper restarts. Nothing here blocks the broker: when
// ZooKeeper is down the broker serves connected clients and registers once
// it is back.
type zkRegistration struct {
	cfg *conf.Config
	log *slog.Logger

	mu      sync.Mutex // guards client, reg, pending, stopFollow and clusterTopics
	client  *zkmeta.Client
	reg     *zkmeta.BrokerRegistry
	pending map[string]int // topics written before the registry existed

	stopFollow    func()   // ends followClusterTopics (zktopics.go)
	clusterTopics []string // the cluster's topic list last seen (zktopics.go)
	slaveID       int      // the role registered: -1 master, else slave<slaveID> (replication_run.go)
}

func newZKRegistration(c *conf.Config, log *slog.Logger) *zkRegistration {
	return &zkRegistration{cfg: c, log: log.With("component", "zookeeper"), pending: map[string]int{}, slaveID: c.Slave.ID}
}

// slogPrintf adapts slog to zkmeta's Printf logger.
type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(format string, args ...any) { p.l.Info(fmt.Sprintf(format, args...)) }

// start connects in the background and registers the broker, every topic
// named in server.ini, and every accepted topic that already has data.
func (z *zkRegistration) start(srv *Server, st *store.Store) {
	c := z.cfg
	client, err := zkmeta.New(zkmeta.Config{
		ConnectString:     c.ZK.Connect,
		Root:              c.ZK.Root,
		SessionTimeout:    c.ZK.SessionTimeout,
		ConnectionTimeout: c.ZK.ConnectionTimeout,
		Auth:              c.ZK.Auth,
		Logger:            slogPrintf{z.log},
	})
	if err != nil {
		z.log.Error("ZooKeeper client", "err", err)
		return
	}
	host := c.System.HostName
	z.mu.Lock()
	role := zkmeta.SlaveBroker(c.System.BrokerID, z.slaveID, host, srv.Port()) // -1: the master
	z.mu.Unlock()
	reg, err := z.newRegistry(client, role) // replication_run.go
	if err != nil {
		z.log.Error("ZooKeeper registration", "err", err)
		client.Close()
		return
	}
	topics := map[string]int{}
	for _, name := range c.ExplicitTopics() {
		if t, ok := c.Topic(name); ok {
			topics[name] = t.NumPartitions
		}
	}
	for _, ti := range st.Topics() {
		if t, ok := c.Topic(ti.Topic); ok {
			topics[ti.Topic] = t.NumPartitions
		}
	}
	z.mu.Lock()
	z.client, z.reg = client, reg
	for name, n := range z.pending {
		topics[name] = n
	}
	z.pending = nil
	z.mu.Unlock()
	for name := range topics {
		z.registerTopic(reg, name)
	}
	if err := reg.Start(); err != nil {
		z.log.Error("ZooKeeper registration", "err", err)
		return
	}
	stop := z.followClusterTopics(client, reg)
	z.mu.Lock()
	z.stopFollow = stop
	z.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.ZK.ConnectionTimeout+c.ZK.SessionTimeout*2)
		defer cancel()
		if err := reg.Wait(ctx); err != nil {
			z.log.Warn("broker not registered in ZooKeeper yet; still trying", "err", err)
			return
		}
		z.log.Info("registered in ZooKeeper", "broker", reg.Broker().String(), "topics", len(reg.Topics()))
	}()
}

func (z *zkRegistration) registerTopic(reg *zkmeta.BrokerRegistry, name string) {
	t, ok := topicConfig(z.cfg, name) // server.ini + online configuration (topicconfig.go)
	if !ok {
		return
	}
	err := reg.RegisterTopic(name, zkmeta.TopicConfig{
		NumPartitions: t.NumPartitions, AcceptPublish: t.AcceptPublish, AcceptSubscribe: t.AcceptSubscribe,
	})
	if err != nil {
		z.log.Error("registering topic", "topic", name, "err", err)
	}
}

// topicWritten is Options.OnTopic: a topic accepted through a wildcard is
// registered on its first put (MetaQ's registerTopicInZk).
func (z *zkRegistration) topicWritten(topic string, numPartitions int) {
	z.mu.Lock()
	reg := z.reg
	if reg == nil {
		if z.pending != nil {
			z.pending[topic] = numPartitions
		}
		z.mu.Unlock()
		return
	}
	z.mu.Unlock()
	z.registerTopic(reg, topic)
}

// unregister removes the broker's nodes (topics first), bounded in time.
func (z *zkRegistration) unregister() {
	z.stopFollowing()
	z.mu.Lock()
	reg := z.reg
	z.mu.Unlock()
	if reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Unregister(ctx); err != nil {
		z.log.Warn("unregistering from ZooKeeper", "err", err)
	}
}

func (z *zkRegistration) close() {
	z.stopFollowing()
	z.mu.Lock()
	client := z.client
	z.client, z.reg = nil, nil
	z.mu.Unlock()
	if client != nil {
		client.Close()
	}
}

// ZK returns the broker's ZooKeeper client (nil in standalone mode or before
// it started); for tests and diagnostics.
func (b *Broker) ZK() *zkmeta.Client {
	if b.zk == nil {
		return nil
	}
	b.zk.mu.Lock()
	defer b.zk.mu.Unlock()
	return b.zk.client
}
