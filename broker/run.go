package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tracelog"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/internal/logx"
)

// Broker is a whole broker process: store, server and (when enabled)
// ZooKeeper registration, started and stopped in the right order.
type Broker struct {
	Config *conf.Config
	Store  *store.Store
	Delay  *delay.Service
	Trace  *tracelog.Writer // the broker's trace events (traceemit.go)
	Server *Server
	pop    *pop.Pop // broker-managed delivery (popserve.go)
	zk     *zkRegistration
	HA     *ha.Node // replication (replication_run.go)
	log    *slog.Logger

	restart     restartSignal
	stopElect   func() // the election's stop (autoFailover), nil when none
	delayAdjust func(*delay.Config)
	lateMu      sync.Mutex
	lateDelay   *delay.Service // opened on promotion (replication_run.go)
	latePop     *pop.Pop       // opened on promotion (replication_run.go)
	popAdjust   func(*pop.Config)
	// writersFault (tests, export_test.go) fails startWriters at a step.
	writersFault func(step string) error
	security     *securityState // [security] (security.go)

	logLimiter *logx.Limiter
	// stoppedTopics is the topic configuration in force when Stop ended,
	// for the broker that resumes this one (StartOptions.Resume).
	stoppedTopics *topicOverlay
}

// StartOptions adjust a broker started by StartWith (tests, embedding).
type StartOptions struct {
	Logger *slog.Logger
	Server func(*Options)      // changes to the server options derived from the config
	Store  func(*store.Config) // changes to the store configuration
	Delay  func(*delay.Config) // changes to the delay service configuration
	Pop    func(*pop.Config)   // changes to the delivery service configuration
	// Resume is the stopped broker this one replaces in the same process
	// with the same Config (the restart in place replication asks for,
	// NeedsRestart): the topic configuration in force when it stopped
	// (server.ini as last reloaded, the online configuration) carries over
	// instead of the server.ini loaded at first (docs/configuration.md,
	// "Reloading").
	Resume *Broker
}

// Start opens the store, starts the listener and registers in ZooKeeper.
// ZooKeeper being down does not stop the broker from serving: registration
// keeps retrying in the background.
func Start(c *conf.Config, log *slog.Logger) (*Broker, error) {
	return StartWith(c, StartOptions{Logger: log})
}

// StartWith is Start with adjustments.
func StartWith(c *conf.Config, so StartOptions) (*Broker, error) {
	log := so.Logger
	if log == nil {
		log = slog.Default()
	}
	// Repeated identical lines (store and server) are rate-limited
	// (internal/logx); Stop writes the pending counts.
	if r := so.Resume; r != nil {
		if r.Config != c {
			return nil, errors.New("broker: StartOptions.Resume is a broker of another Config")
		}
		resumeTopics(c, r.stoppedTopics) // topicwatch.go
	}
	log, lim := logx.New(log, logx.Options{})
	for _, w := range c.Warnings {
		log.Warn("config: " + w)
	}
	sc := StoreConfig(c, log)
	replicationStoreConfig(c, &sc, log) // replication_run.go
	if so.Store != nil {
		so.Store(&sc)
	}
	st, err := store.Open(sc)
	if err != nil {
		lim.Stop()
		dropOverlay(c)
		return nil, fmt.Errorf("opening store at %s: %w", c.System.DataPath, err)
	}
	opts := ServerOptions(c, log)
	opts.Store = st
	replicationServerOptions(c, &opts) // replication_run.go
	b := &Broker{Config: c, Store: st, log: log, logLimiter: lim}
	if c.ZK.Enable {
		b.zk = newZKRegistration(c, log)
		opts.OnTopic = b.zk.topicWritten
	}
	b.Trace = tracelog.New(st, brokerHost(c), log) // traceemit.go
	opts.Trace = b.Trace
	var dl *delay.Service
	var srv *Server
	// fail undoes what was opened so far, in reverse order (every field it
	// looks at is nil until opened).
	fail := func(err error) (*Broker, error) {
		if b.pop != nil {
			_ = b.pop.Close()
		}
		if srv != nil {
			srv.tx.Close() // opened by New (txconn.go)
		}
		b.stopSecurity()
		if b.HA != nil {
			b.HA.Close()
		}
		if dl != nil {
			_ = dl.Close()
		}
		b.Trace.Close()
		_ = st.Close()
		lim.Stop()
		dropOverlay(c)
		return nil, err
	}
	b.delayAdjust, b.popAdjust = so.Delay, so.Pop
	if startsAsMaster(c) { // a slave runs no service that writes (replication_run.go)
		if dl, err = b.openDelayService(); err != nil {
			return fail(err)
		}
	}
	b.Delay, opts.Delay = dl, dl
	if b.HA, err = b.newHA(c, st, log); err != nil { // replication_run.go
		return fail(err)
	}
	opts.HA = b.HA
	if err := b.setupSecurity(c, &opts); err != nil {
		return fail(err)
	}
	if so.Server != nil {
		so.Server(&opts)
	}
	srv, err = New(opts)
	if err == nil {
		b.pop, err = openPop(c, st, dl, srv, so.Pop)
		if err == nil {
			err = srv.Start()
		}
	}
	if err != nil {
		return fail(err)
	}
	b.Server = srv
	b.HA.Start()
	if b.zk != nil {
		b.zk.start(srv, st)
		b.startElection()    // replication_run.go (autoFailover)
		b.watchTopicConfig() // topicwatch.go
		b.watchUsersZK()     // security.go
	}
	log.Info("broker started", "brokerId", c.System.BrokerID, "addr", srv.Addr().String(),
		"dataPath", c.System.DataPath, "flush", flushMode(c), "zookeeper", c.ZK.Enable)
	return b, nil
}

func flushMode(c *conf.Config) string {
	if c.System.SyncFlush() {
		return "sync (group commit)"
	}
	return fmt.Sprintf("async (every %d messages or %v)", c.System.UnflushThreshold, c.System.UnflushInterval)
}

// Stop shuts down in MetaQ's order: unregister from ZooKeeper first (so
// clients move away), wait zk.zkSyncTimeMs, stop serving (in-flight requests
// are answered), then flush and close the store (checkpoint, abort marker
// removed). ctx bounds the whole stop; when it ends, connections are cut.
func (b *Broker) Stop(ctx context.Context) error {
	var errs []error
	b.stopTopicWatch() // topicwatch.go
	b.stopElection()   // replication_run.go: before the ZooKeeper client closes
	if b.zk != nil {
		b.zk.unregister()
		wait := b.Config.ZK.SyncTime
		b.log.Info("unregistered from ZooKeeper; waiting before closing", "zkSyncTime", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	if err := b.Server.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	b.HA.Close() // after the server: in-flight puts still reach the slaves
	if b.zk != nil {
		b.zk.close()
	}
	b.stopSecurity()
	if b.pop != nil {
		if err := b.pop.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.Delay != nil {
		if err := b.Delay.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.closeLateServices(); err != nil { // replication_run.go
		errs = append(errs, err)
	}
	b.Trace.Close() // its last events, before the store closes
	if err := b.Store.Close(); err != nil {
		errs = append(errs, err)
	}
	// The topic configuration in force (reloaded server.ini, online
	// configuration) served until here: nothing asks it any more. It is
	// kept for a broker that resumes this one (StartOptions.Resume).
	if v, ok := overlays.Load(b.Config); ok {
		b.stoppedTopics = v.(*topicOverlay)
	}
	dropOverlay(b.Config)                   // topicconfig.go
	errs = dropReplicaRefusals(errs, b.log) // replication_run.go
	b.log.Info("broker stopped")
	b.logLimiter.Stop()
	return errors.Join(errs...)
}
