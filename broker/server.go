// Package broker is the metaq broker: a TCP server speaking MetaQ's text
// protocol on top of broker/store.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/ha"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tracelog"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/internal/logx"
)

// Version is the string `version` answers with (MetaQ clients use the
// command as a heartbeat and do not parse it).
var Version = "metaq-0.1.0"

// Options configure a Server. Zero values take MetaQ's defaults.
type Options struct {
	Addr            string // listen address, e.g. ":8123" or "127.0.0.1:0"
	BrokerID        int
	HostName        string // advertised host (ZooKeeper); defaults to the listener's host
	Store           *store.Store
	Delay           *delay.Service   // delayed messages, retry, DLQ (nil: delay properties are stored as given)
	Trace           *tracelog.Writer // the broker's own trace events (traceemit.go); nil = none
	Topics          TopicPolicy      // which topics are accepted, with how many partitions
	MaxMessageSize  int              // default 4 MiB
	MaxTransferSize int              // default 1 MiB: cap of a get's value block
	IdleTimeout     time.Duration
	WriteTimeout    time.Duration // a client that does not read for this long is cut off (default 30s)
	MaxConnections  int           // 0 = unlimited
	// MaxPendingPutBytes bounds the put data buffered across all connections
	// while it arrives (default 256 MiB; putbudget.go).
	MaxPendingPutBytes int64
	// PutDataTimeout: a put's data must arrive within this long (default
	// 30s; negative: no limit but IdleTimeout).
	PutDataTimeout time.Duration
	// MaxParkedGets bounds the long-polling gets parked on one connection
	// (default 4096; longpoll.go).
	MaxParkedGets int
	Logger        *slog.Logger
	// OnTopic is called (from its own goroutine) the first time a topic is
	// written since start, so the ZooKeeper registration can pick up topics
	// accepted through a wildcard section.
	OnTopic func(topic string, numPartitions int)
	// ConfigPath is reported by `stats config` when set.
	ConfigPath string
	// DataPath is the store's directory (`stats` reports its disk usage).
	DataPath string
	// Tx configures transactions (txserver.go); Store, BrokerID and Logger
	// are filled in.
	Tx tx.Config
	// HA is the node's replication (replication.go; nil: none).
	HA *ha.Node
	// Security ([security], security.go; all nil/zero = MetaQ's open broker):
	// Auth decides who may do what; TLS, when set, serves TLSAddr too
	// (only TLSAddr with NoPlaintext).
	Auth        *auth.Authorizer
	TLS         *tls.Config
	TLSAddr     string
	NoPlaintext bool
}

// Server is a running broker listener.
type Server struct {
	opts  Options
	log   *slog.Logger
	store *store.Store
	ln    net.Listener
	tlsLn net.Listener // [security] tlsPort (security.go); == ln with NoPlaintext
	start time.Time

	topics topicTable
	stats  counters
	lat    atomic.Pointer[latencyObserver] // metrics.go
	tx     *tx.Manager
	dly    atomic.Pointer[delay.Service] // opts.Delay, or opened on promotion (replication_run.go)
	pop    atomic.Pointer[pop.Pop]       // broker-managed delivery (popserve.go); nil on a slave (replication_run.go)
	trace  traceState                    // traced messages in flight (tracetxpop.go)

	rtMu   sync.Mutex
	rtPrev realtimeSnap

	shuttingDown atomic.Bool
	putBudget    *putBudget    // buffered put data (putbudget.go)
	appendFault  appendFault   // tests only (faults.go)
	logLimiter   *logx.Limiter // rate limiting of s.log when New set it up (nil: the caller's)
	connID       atomic.Uint64

	mu    sync.Mutex // guards conns
	conns map[*conn]struct{}

	wg        sync.WaitGroup // accept loop + connections
	closeOnce sync.Once
}

// New validates opts; Start begins serving.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("broker: Options.Store is required")
	}
	if opts.Topics == nil {
		return nil, errors.New("broker: Options.Topics is required")
	}
	if opts.BrokerID < 0 || opts.BrokerID > 32767 {
		return nil, fmt.Errorf("broker: brokerId %d out of range 0..32767", opts.BrokerID)
	}
	if opts.MaxMessageSize <= 0 {
		opts.MaxMessageSize = 4 << 20
	}
	if opts.MaxTransferSize <= 0 {
		opts.MaxTransferSize = 1 << 20
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Every log line a client can cause (a bad request, a refused topic, a
	// put failing while the disk is full) goes through a rate limiter.
	var lim *logx.Limiter
	opts.Logger, lim = logx.New(opts.Logger, logx.Options{})
	if opts.MaxPendingPutBytes <= 0 {
		opts.MaxPendingPutBytes = defaultMaxPendingPutBytes
	}
	if opts.PutDataTimeout == 0 {
		opts.PutDataTimeout = defaultPutDataTimeout
	}
	if opts.MaxParkedGets <= 0 {
		opts.MaxParkedGets = defaultMaxParkedGets
	}
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		store: opts.Store,
		conns: make(map[*conn]struct{}),

		putBudget:  newPutBudget(opts.MaxPendingPutBytes),
		logLimiter: lim,
	}
	if opts.Delay != nil {
		s.dly.Store(opts.Delay)
	}
	s.topics.init(opts.Topics)
	if err := s.openTx(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start listens on opts.Addr and serves in the background.
func (s *Server) Start() error {
	return s.listen() // security.go: the plain and TLS listeners
}

// Serve serves connections accepted on ln in the background.
func (s *Server) Serve(ln net.Listener) error {
	s.ln = ln
	s.start = time.Now()
	s.wg.Add(1)
	go s.acceptLoop(ln)
	s.log.Info("broker listening", "addr", ln.Addr().String(), "brokerId", s.opts.BrokerID)
	return nil
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Port is the listener's TCP port.
func (s *Server) Port() int {
	if a, ok := s.ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shuttingDown.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off instead of spinning.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff < time.Second {
				backoff *= 2
			}
			s.log.Error("accept failed", "err", err, "retryIn", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		nc, _ = s.wrapTLS(ln, nc)
		c := newConn(s, nc, s.connID.Add(1))
		s.mu.Lock()
		if s.shuttingDown.Load() || (s.opts.MaxConnections > 0 && len(s.conns) >= s.opts.MaxConnections) {
			n := len(s.conns)
			s.mu.Unlock()
			s.log.Warn("refusing connection", "remote", nc.RemoteAddr().String(), "connections", n, "max", s.opts.MaxConnections)
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// NumConnections is the number of open client connections.
func (s *Server) NumConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) closeGrace() time.Duration { return s.opts.WriteTimeout }

// Shutdown stops accepting, lets every connection answer what it has read
// (in-flight puts are answered once durable, parked gets get 404), closes
// them, and returns when all connection goroutines are gone or ctx ends
// (then connections are cut). It does not close the store.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.shuttingDown.Store(true)
		s.putBudget.close()
		if s.ln != nil {
			_ = s.ln.Close()
		}
		if s.tlsLn != nil && s.tlsLn != s.ln {
			_ = s.tlsLn.Close()
		}
		s.mu.Lock()
		for c := range s.conns {
			// Wake the reader: it sees shuttingDown and finishes gracefully.
			_ = c.nc.SetReadDeadline(time.Now())
		}
		s.mu.Unlock()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.mu.Lock()
			for c := range s.conns {
				c.closeWithError(errors.New("broker shutting down"))
			}
			s.mu.Unlock()
			<-done
			err = ctx.Err()
		}
		s.tx.Close()
		s.logLimiter.Stop() // pending "repeated N times" lines are written now
	})
	return err
}
