package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/zkmeta"
)

// replicationStoreConfig: syncReplicas > 0 needs group-commit rounds, i.e.
// sync flush (docs/replication.md); a node that does not start as master
// opens its store as a replica: it refuses local appends from the start,
// before any service could write, and serves only up to the high watermark
// its master last acknowledged, kept in the data directory
// (store.Config.Replica).
func replicationStoreConfig(c *conf.Config, sc *store.Config, log *slog.Logger) {
	sc.Replica = !startsAsMaster(c)
	if c.Replication.SyncReplicas > 0 && sc.UnflushThreshold > 0 {
		log.Warn("config: [replication] syncReplicas > 0 needs sync flush: unflushThreshold is taken as 0",
			"unflushThreshold", sc.UnflushThreshold)
		sc.UnflushThreshold = 0
	}
}

// restartSignal is closed when replication asks for the store to be
// reopened (a truncation or reset marker was written): the process running
// the broker stops it and starts it again (tools/cli `metaq broker` does).
type restartSignal struct {
	once sync.Once
	ch   chan struct{}
	why  string
}

// NeedsRestart is closed when the broker must be stopped and started again
// (replication wrote a store reset marker that only opening the store
// applies; docs/replication.md). RestartReason says why.
func (b *Broker) NeedsRestart() <-chan struct{} { return b.restart.ch }

// RestartReason is why NeedsRestart was closed.
func (b *Broker) RestartReason() string { return b.restart.why }

// newHA builds the replication node of c's broker.
func (b *Broker) newHA(c *conf.Config, st *store.Store, log *slog.Logger) (*ha.Node, error) {
	b.restart.ch = make(chan struct{})
	hc := ha.Config{
		Store:          st,
		BrokerID:       c.System.BrokerID,
		SlaveID:        c.Slave.ID,
		SyncReplicas:   c.Replication.SyncReplicas,
		ReplicaTimeout: c.Replication.ReplicaTimeout,
		MaxDelay:       c.Slave.MaxDelay,
		AutoFailover:   c.Replication.AutoFailover,
		MasterAddr:     c.Replication.MasterAddr,
		Logger:         log,
		Restart: func(why string) {
			b.restart.once.Do(func() {
				b.restart.why = why
				log.Warn("the broker must be restarted to reopen its store", "why", why)
				close(b.restart.ch)
			})
		},
		BeforeMaster: b.startWriters,
		OnRole: func(role ha.Role, slaveID int) {
			b.roleServices(role)
			if b.zk != nil {
				b.zk.setRole(slaveID)
			}
		},
	}
	dial, err := ReplicationDialer(c) // TLS and auth on the link (security.go)
	if err != nil {
		return nil, err
	}
	hc.Dial = dial
	if b.zk != nil {
		z := b.zk
		hc.FindMaster = func(ctx context.Context) (string, error) {
			z.mu.Lock()
			client := z.client
			z.mu.Unlock()
			if client == nil {
				return "", errors.New("ZooKeeper not connected yet")
			}
			bs, err := client.Brokers(ctx)
			if err != nil {
				return "", err
			}
			for _, bi := range bs {
				if bi.ID == c.System.BrokerID {
					return bi.Master, nil
				}
			}
			return "", nil
		}
	}
	return ha.New(hc)
}

// setRole re-registers the broker in ZooKeeper under its new role: master
// (slaveID -1) or slave slaveID (docs/zookeeper.md).
func (z *zkRegistration) setRole(slaveID int) {
	z.mu.Lock()
	z.slaveID = slaveID
	client, old, stop := z.client, z.reg, z.stopFollow
	z.mu.Unlock()
	if client == nil || old == nil || old.Broker().SlaveID == slaveID {
		return // start registers the current role
	}
	if stop != nil {
		stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := old.Unregister(ctx); err != nil {
		z.log.Warn("unregistering the old role", "err", err)
	}
	cancel()
	b := old.Broker()
	b.SlaveID = slaveID
	reg, err := z.newRegistry(client, b)
	if err != nil {
		z.log.Error("ZooKeeper registration", "err", err)
		return
	}
	for _, name := range old.Topics() {
		z.registerTopic(reg, name)
	}
	if err := reg.Start(); err != nil {
		z.log.Error("ZooKeeper registration", "err", err)
	}
	stop = z.followClusterTopics(client, reg)
	z.mu.Lock()
	z.reg, z.stopFollow = reg, stop
	z.mu.Unlock()
	z.log.Info("re-registered in ZooKeeper under the new role", "broker", b.String())
}

// startsAsMaster: the node takes puts from the start (no election, no
// [slave] slaveId).
func startsAsMaster(c *conf.Config) bool { return c.Slave.ID < 0 && !c.Replication.AutoFailover }

// delayService is the running delay service (nil on a slave).
func (s *Server) delayService() *delay.Service { return s.dly.Load() }

// replicationServerOptions: a slave's transaction table is in standby (it
// checks nothing and writes nothing until a promotion; broker/tx/standby.go).
func replicationServerOptions(c *conf.Config, o *Options) {
	if !startsAsMaster(c) {
		o.Tx.Standby = true
	}
}

// startWriters starts the services that write, from the records in the
// log, the way a broker starting as master opens them (docs/replication.md,
// "What a promoted slave starts"): the delay timer (%SCHEDULE%), the
// transaction check-back (its table rebuilt from %TX_HALF%/%TX_OP%: half
// messages that arrived from the old master are checked back) and the
// delivery service (%POP%: what was delivered and not acknowledged on the
// old master is delivered again). ha.Node.Promote calls it after writing
// its epoch record and before the node takes its first put; on an error
// the promotion fails (what was started is stopped again).
func (b *Broker) startWriters() (err error) {
	b.lateMu.Lock()
	defer b.lateMu.Unlock()
	srv := b.Server
	if srv == nil {
		return nil
	}
	var opened []func()
	defer func() {
		if err != nil {
			for _, undo := range opened {
				undo()
			}
		}
	}()
	if srv.delayService() == nil {
		d, err := b.openDelayService()
		if err != nil {
			return err
		}
		b.lateDelay = d
		srv.dly.Store(d)
		opened = append(opened, func() {
			srv.dly.Store(nil)
			b.lateDelay = nil
			_ = d.Close()
		})
	}
	if srv.tx.Standby() {
		if err := b.injectWritersFault("tx"); err != nil {
			return fmt.Errorf("rebuilding the transaction table: %w", err)
		}
		if err := srv.tx.Recover(); err != nil {
			return fmt.Errorf("rebuilding the transaction table: %w", err)
		}
		opened = append(opened, func() { srv.tx.SetStandby(true) })
	}
	if srv.pop.Load() == nil {
		if err := b.injectWritersFault("pop"); err != nil {
			return fmt.Errorf("starting the delivery service: %w", err)
		}
		p, err := startPop(b.Config, b.Store, srv.delayService(), srv, b.popAdjust)
		if err != nil {
			return fmt.Errorf("starting the delivery service: %w", err)
		}
		b.latePop = p
	}
	return nil
}

// injectWritersFault is the test hook of startWriters (nil in production).
func (b *Broker) injectWritersFault(step string) error {
	if b.writersFault == nil {
		return nil
	}
	return b.writersFault(step)
}

// openDelayService opens the delay service the way both a broker starting
// as master (StartWith) and a promotion (startWriters) do: trace events for
// what it delivers, then StartOptions.Delay's adjustments.
func (b *Broker) openDelayService() (*delay.Service, error) {
	return openDelay(b.Config, b.Store, b.log, b.zk, func(dc *delay.Config) {
		dc.OnDelivered = traceDelivered(b.Trace, b.Config.System.BrokerID)
		if b.delayAdjust != nil {
			b.delayAdjust(dc)
		}
	})
}

// roleServices stops the services that write when a master becomes a
// slave without a restart (startWriters starts them on promotion): the
// delay timer and the delivery service are closed (their last checkpoint
// is refused: the log is the new master's now), the transaction table goes
// back to standby.
func (b *Broker) roleServices(role ha.Role) {
	if role != ha.RoleSlave {
		return
	}
	b.lateMu.Lock()
	defer b.lateMu.Unlock()
	srv := b.Server
	if srv == nil {
		return
	}
	srv.tx.SetStandby(true)
	if p := srv.pop.Swap(nil); p != nil {
		if p == b.latePop {
			b.latePop = nil
		}
		if err := p.Close(); err != nil && !errors.Is(err, store.ErrReplica) {
			b.log.Warn("stopping the delivery service after demotion", "err", err)
		}
	}
	if d := srv.dly.Swap(nil); d != nil {
		if d == b.Delay {
			return // opened at start: closed by Stop
		}
		b.lateDelay = nil
		if err := d.Close(); err != nil && !errors.Is(err, store.ErrReplica) {
			b.log.Warn("stopping the delay service after demotion", "err", err)
		}
	}
}

// closeLateServices closes what startWriters opened (Stop).
func (b *Broker) closeLateServices() error {
	b.lateMu.Lock()
	defer b.lateMu.Unlock()
	var errs []error
	if p := b.latePop; p != nil {
		b.latePop = nil
		errs = append(errs, p.Close())
	}
	if d := b.lateDelay; d != nil {
		b.lateDelay = nil
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// dropReplicaRefusals: a service that records its state at Close (a
// checkpoint record) cannot on a slave, whose log only the master writes;
// that is expected, not a failed stop.
func dropReplicaRefusals(errs []error, log *slog.Logger) []error {
	out := errs[:0]
	for _, err := range errs {
		if errors.Is(err, store.ErrReplica) {
			log.Info("a service could not record its state at stop: this broker is a slave", "err", err)
			continue
		}
		out = append(out, err)
	}
	return out
}

// startElection starts the election when [replication] autoFailover=true
// (broker/ha/election*.go): the node started as a slave following nobody
// and the election calls Promote or Demote on it.
func (b *Broker) startElection() {
	c := b.Config
	if !c.Replication.AutoFailover || b.zk == nil {
		return
	}
	b.zk.mu.Lock()
	client := b.zk.client
	b.zk.mu.Unlock()
	if client == nil {
		b.log.Error("autoFailover: no ZooKeeper client; this node stays a slave following nobody")
		return
	}
	stop, err := ha.StartElection(ha.ElectionConfig{
		ZK:         client,
		BrokerID:   c.System.BrokerID,
		SlaveID:    c.Slave.ID,
		Addr:       net.JoinHostPort(c.System.HostName, strconv.Itoa(b.Server.Port())),
		Controller: b.HA,
		Logger:     b.log,
	})
	if err != nil {
		b.log.Error("autoFailover: the election did not start; this node stays a slave following nobody", "err", err)
		return
	}
	b.stopElect = stop
}

func (b *Broker) stopElection() {
	if b.stopElect != nil {
		b.stopElect()
		b.stopElect = nil
	}
}

// newRegistry: with autoFailover the master node is the election's
// (zkmeta.NewElectedBrokerRegistry never creates it, not even after a
// session expiry); otherwise the broker registers it itself.
func (z *zkRegistration) newRegistry(c *zkmeta.Client, b zkmeta.Broker) (*zkmeta.BrokerRegistry, error) {
	if z.cfg.Replication.AutoFailover {
		return zkmeta.NewElectedBrokerRegistry(c, b)
	}
	return zkmeta.NewBrokerRegistry(c, b)
}
