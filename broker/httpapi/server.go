// Package httpapi is metaq's HTTP side, served on dashboardHttpPort: the
// Prometheus endpoint /metrics, the JSON API under /api/v1/ and the web
// dashboard at / (docs/observability.md). It runs next to a broker
// (ForBroker) or alone against ZooKeeper (`metaq dashboard`, New without a
// broker). Nothing here is on the broker's data path: metrics read counters
// at scrape time, and the cluster views read ZooKeeper and the brokers'
// text protocol like any admin client.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/internal/logx"
	"github.com/metaqgo/metaq/zkmeta"
)

// Options configure a Server.
type Options struct {
	Addr   string         // listen address, e.g. "127.0.0.1:8120" or "127.0.0.1:0"
	Broker *broker.Broker // nil: a dashboard without a broker (no broker metrics)
	// ZK is the cluster's ZooKeeper ([zookeeper] section); Enable=false: no
	// cluster views and no consumer lag.
	ZK     conf.ZK
	Token  string       // dashboardToken; "" = administrative actions refused
	Logger *slog.Logger // rate-limited here (internal/logx) unless it is already
	// Security is [security] (security.go); zero = open, as MetaQ.
	Security SecurityOptions

	// Delivery is the broker's delivery service behind the WebSocket
	// endpoint (docs/http.md); nil: no WebSocket endpoint.
	Delivery pop.Service
	// DataAuth, when set, decides every data-plane request (publish,
	// WebSocket subscribe) before it is served; its error is the answer
	// (a StatusError keeps its status, other errors are 403). Nil:
	// everyone may, as on the text protocol port.
	DataAuth func(r *http.Request, a DataAccess) error
	// WSOriginPatterns lists the browser origins (host patterns, as
	// coder/websocket's AcceptOptions) allowed to open WebSockets besides
	// the server's own host.
	WSOriginPatterns []string
	// MaxWSConnections bounds open WebSocket connections (default
	// DefaultMaxWSConnections).
	MaxWSConnections int
	// MaxConnections bounds the open connections, WebSockets included
	// (dashboardMaxConnections; default conf.DefaultDashboardMaxConnections):
	// Start closes further ones at once (limit.go).
	MaxConnections int

	MaxTopics    int           // metricsMaxTopics
	MaxLagSeries int           // metricsMaxLagSeries
	LagInterval  time.Duration // metricsLagIntervalMs
}

// Server is a running HTTP side.
type Server struct {
	opts       Options
	log        *slog.Logger
	logLimiter *logx.Limiter // rate limiting of log (nil: Options.Logger was limited already)
	reg        *prometheus.Registry
	mux        *http.ServeMux
	ln         net.Listener
	hs         *http.Server
	zk         *zkmeta.Client
	lag        *lagTracker
	hist       *latencyHistograms
	cl         *cluster
	smp        *sampler
	pages      pages
	guard      *auth.Guard // [security] (security.go); nil = open

	wsMu     sync.Mutex
	wsConns  map[*wsConn]struct{} // open WebSocket connections (gateway_ws.go)
	wsOwners map[wsHandle]*wsConn // held handles → the socket holding each
	wsClosed bool
	wsWG     sync.WaitGroup

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// ForBroker starts the HTTP side of a running broker as its server.ini
// says (dashboardHttpPort on bindHost; 0 = disabled, then it returns nil,
// nil).
func ForBroker(b *broker.Broker, log *slog.Logger) (*Server, error) {
	sys := b.Config.System
	if sys.DashboardHTTPPort == 0 {
		return nil, nil
	}
	sec, err := BrokerSecurity(b) // security.go
	if err != nil {
		return nil, err
	}
	return Start(Options{
		Addr:   net.JoinHostPort(sys.BindHost, fmt.Sprint(sys.DashboardHTTPPort)),
		Broker: b, Delivery: brokerDelivery(b), ZK: b.Config.ZK, Token: sys.DashboardToken, Logger: log, Security: sec,
		MaxTopics: sys.MetricsMaxTopics, MaxLagSeries: sys.MetricsMaxLagSeries, LagInterval: sys.MetricsLagInterval,
		MaxConnections: sys.DashboardMaxConnections,
	})
}

// Start listens on opts.Addr and serves in the background.
func Start(opts Options) (*Server, error) {
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("dashboardHttpPort: listen %s: %w", opts.Addr, err)
	}
	// The bound is under TLS: a refused connection costs no handshake.
	ln = newLimitListener(ln, s.opts.MaxConnections, func(remote net.Addr, max int) {
		s.log.Warn("refusing HTTP connection: dashboardMaxConnections reached", "remote", remote.String(), "max", max)
	})
	if opts.Security.TLS != nil {
		ln = tls.NewListener(ln, opts.Security.TLS)
	}
	s.Serve(ln)
	return s, nil
}

// New builds a Server without listening (Serve, Handler).
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxTopics == 0 && opts.Broker == nil {
		opts.MaxTopics = conf.DefaultMetricsMaxTopics
	}
	if opts.MaxLagSeries <= 0 {
		opts.MaxLagSeries = conf.DefaultMetricsMaxLagSeries
	}
	if opts.MaxWSConnections <= 0 {
		opts.MaxWSConnections = DefaultMaxWSConnections
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = conf.DefaultDashboardMaxConnections
	}
	if opts.LagInterval <= 0 {
		opts.LagInterval = conf.DefaultMetricsLagInterval
	}
	// Every log line a client can cause (a TLS handshake failing, a bad
	// request) goes through a rate limiter, as on the broker's port.
	lg, lim := logx.New(opts.Logger, logx.Options{})
	s := &Server{opts: opts, log: lg.With("component", "http"), logLimiter: lim, reg: newRegistry(), mux: http.NewServeMux()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if opts.ZK.Enable {
		zc, err := zkmeta.New(zkmeta.Config{
			ConnectString: opts.ZK.Connect, Root: opts.ZK.Root,
			SessionTimeout: opts.ZK.SessionTimeout, ConnectionTimeout: opts.ZK.ConnectionTimeout,
			Auth:   opts.ZK.Auth,
			Logger: slogPrintf{s.log},
		})
		if err != nil {
			lim.Stop()
			return nil, err
		}
		s.zk = zc
	}
	cl, err := newCluster(s.zk, opts.Security.clusterClient())
	if err != nil {
		if s.zk != nil {
			s.zk.Close()
		}
		lim.Stop()
		return nil, err
	}
	s.cl, s.smp = cl, newSampler(cl)
	if s.zk != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.smp.run(s.ctx)
		}()
	}
	if b := opts.Broker; b != nil {
		s.hist = newLatencyHistograms()
		s.hist.register(s.reg)
		s.reg.MustRegister(&brokerCollector{srv: b.Server, dataPath: b.Config.System.DataPath, ha: b.HA,
			own: map[string]bool{}, maxTopics: opts.MaxTopics})
		s.reg.MustRegister(featureCollector{b})
		s.reg.MustRegister(replicationCollector{b}) // replication_metrics.go
		b.Server.SetLatencyObserver(s.hist)
		b.Store.SetFlushObserver(s.hist.flushObserver(b.Config.System.SyncFlush()))
		if s.zk != nil {
			s.lag = newLagTracker(s.zk, b.Store, b.Config.System.BrokerID, opts.LagInterval, opts.MaxLagSeries, s.log)
			s.reg.MustRegister(s.lag)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.lag.run(s.ctx)
			}()
		}
	}
	s.setupSecurity() // security.go
	s.routes()
	s.apiRoutes()
	s.pageRoutes()
	s.traceRoutes() // trace.go
	s.gatewayRoutes()
	return s, nil
}

func (s *Server) routes() {
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog: slogErrorLog{s.log}, MaxRequestsInFlight: 4, Timeout: 30 * time.Second,
	}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler() }

// Registry is the Prometheus registry behind /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Serve serves ln in the background, as it is: the connection bound
// (Options.MaxConnections) is Start's.
func (s *Server) Serve(ln net.Listener) {
	s.ln = ln
	s.hs = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: s.serverErrorLog(), MaxHeaderBytes: 64 << 10}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server stopped", "err", err)
		}
	}()
	s.log.Info("HTTP side listening (/metrics, /api/v1/, /)", "addr", ln.Addr().String())
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is http://<addr> (https:// with httpTls).
func (s *Server) URL() string {
	if s.opts.Security.TLS != nil {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// RefreshLag asks the lag tracker for a pass now (no-op without one).
func (s *Server) RefreshLag() {
	if s.lag != nil {
		s.lag.refresh()
	}
}

// Close stops serving and the background work, and detaches the broker hooks.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		if b := s.opts.Broker; b != nil {
			b.Server.SetLatencyObserver(nil)
			b.Store.SetFlushObserver(nil)
		}
		s.closeWS() // hijacked: http.Server.Shutdown does not wait for them
		if s.hs != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = s.hs.Shutdown(ctx)
			cancel()
			if err != nil {
				_ = s.hs.Close()
			}
		}
		s.cancel()
		s.wg.Wait()
		s.cl.close()
		if s.zk != nil {
			s.zk.Close()
		}
		s.logLimiter.Stop() // pending "repeated N times" lines are written now
	})
	return err
}

type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(format string, args ...any) { p.l.Info(fmt.Sprintf(format, args...)) }

type slogErrorLog struct{ l *slog.Logger }

func (p slogErrorLog) Println(v ...any) { p.l.Error(fmt.Sprint(v...)) }
