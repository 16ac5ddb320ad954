package httpapi

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/conf"
)

// The HTTP side under [security] (docs/security.md): HTTPS (httpTls),
// authentication of every request (auth.Guard: signatures, bearer tokens,
// the dashboard login), the per-route rights the Authorizer decides, and
// the metaq_auth_* metrics. Nothing here runs without [security].

// SecurityOptions are the HTTP side's [security] settings.
type SecurityOptions struct {
	Auth            *auth.Authorizer // nil: no authentication (MetaQ's open broker)
	TLS             *tls.Config      // nil: plain HTTP
	SignatureWindow time.Duration
	SessionTTL      time.Duration
	// Client is how the cluster views reach brokers' text protocol (TLS,
	// user and secret of the broker's own links).
	ClientTLS     *tls.Config
	ClientTLSPort int // with ClientTLS: the port dialed on every broker's host (client.Config.TLSPort)
	ClientUser    string
	ClientSecret  string
}

// BrokerSecurity derives the HTTP side's settings from a broker's [security].
func BrokerSecurity(b *broker.Broker) (SecurityOptions, error) {
	return securityFrom(b.Config.Security, b.Server.Authorizer())
}

func securityFrom(sec conf.Security, a *auth.Authorizer) (SecurityOptions, error) {
	o := SecurityOptions{Auth: a, SignatureWindow: sec.SignatureWindow, SessionTTL: sec.SessionTTL,
		ClientUser: sec.ReplicationUser, ClientSecret: sec.ReplicationSecret}
	if sec.HTTPTLS {
		cfg, err := auth.ServerTLS(sec.TLSCert, sec.TLSKey, sec.TLSClientCA)
		if err != nil {
			return o, err
		}
		o.TLS = cfg
	}
	if sec.TLSPort > 0 { // TLS to the other brokers, as replication (docs/security.md, "TLS details")
		cfg, err := auth.PeerTLS(sec)
		if err != nil {
			return o, err
		}
		o.ClientTLS = cfg
		if sec.AllowPlaintext {
			// Brokers advertise their plain port: dial the cluster's tlsPort
			// instead (auth.PeerAddr), never the secret in clear.
			o.ClientTLSPort = sec.TLSPort
		}
	}
	return o, nil
}

// clusterClient is the configuration of the cluster views' admin client.
func (o SecurityOptions) clusterClient() client.Config {
	return client.Config{RequestTimeout: 5 * time.Second, DialTimeout: 2 * time.Second,
		TLS: o.ClientTLS, TLSPort: o.ClientTLSPort, User: o.ClientUser, Secret: o.ClientSecret}
}

// setupSecurity builds the guard and registers the auth metrics.
func (s *Server) setupSecurity() {
	a := s.opts.Security.Auth
	if a == nil {
		return
	}
	g := auth.NewGuard(a, s.opts.Security.SignatureWindow, s.opts.Security.SessionTTL, s.log)
	g.Secure = s.opts.Security.TLS != nil
	// A signed body is read whole before its signature is checked: no more
	// than a message and the API's JSON (bodyBudget reserves it from the
	// put budget first).
	g.MaxBody = maxAPIBody
	if b := s.opts.Broker; b != nil {
		g.MaxBody += int64(b.Server.MaxMessageSize())
	}
	if tok := s.opts.Token; tok != "" {
		g.PassBearer = func(t string) bool { return subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 }
		g.PassRoute = s.adminRoute // with anonymous=none, the token still serves administrative actions
	}
	s.guard = g
	s.reg.MustRegister(authCollector{a})
	if s.opts.DataAuth == nil {
		s.opts.DataAuth = s.dataAuth // the gateway's publish and subscribe (gateway.go)
	}
}

// dataAuth decides a data-plane request with the Authorizer, for the
// request's authenticated user (or the anonymous policy).
func (s *Server) dataAuth(r *http.Request, d DataAccess) error {
	user, _ := auth.UserFrom(r.Context())
	op := auth.OpPublish
	if d.Op != "publish" {
		op = auth.OpSubscribe
	}
	if reason := s.opts.Security.Auth.Check(user, op, []byte(d.Topic), []byte(d.Group)); reason != "" {
		return StatusError(http.StatusForbidden, "forbidden: "+reason)
	}
	return nil
}

// handler is the server's whole handler: the mux, behind the guard when
// security is on, behind the bounds of request bodies.
func (s *Server) handler() http.Handler {
	next := http.Handler(s.mux)
	if s.guard != nil {
		next = s.guard.Wrap(http.HandlerFunc(s.routeRights))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.bodyBudget(w, r, next) })
}

// bodyBudget bounds request bodies before anything reads them. On a
// broker, a signed request's body (which the guard reads whole to check the
// signature, before anyone knows who sent it) is first reserved from the
// put budget (maxPendingPutBytes), with the publish handler's copy of it:
// the handler then uses that reservation (publishReservation). Every body
// must then arrive within bodyReadTimeout; WebSocket upgrades (no body) get
// no deadline, which would outlive the upgrade.
func (s *Server) bodyBudget(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r.ContentLength == 0 || r.Header.Get("Upgrade") != "" {
		next.ServeHTTP(w, r)
		return
	}
	if s.guard != nil && s.opts.Broker != nil && r.ContentLength <= s.guard.MaxBody &&
		strings.HasPrefix(r.Header.Get("Authorization"), auth.SignatureScheme+" ") {
		n := r.ContentLength
		if n < 0 { // chunked: up to the limit
			n = s.guard.MaxBody
		}
		copyLen := s.publishCopyLen(r)
		ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
		release, err := s.opts.Broker.Server.ReservePutBytes(ctx, n+copyLen)
		cancel()
		if err != nil {
			dataError(w, err)
			return
		}
		defer release()
		if copyLen > 0 {
			r = r.WithContext(context.WithValue(r.Context(), reservedKey{}, copyLen))
		}
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	next.ServeHTTP(w, r)
}

// reservedKey carries the bytes bodyBudget reserved for the publish
// handler's copy of the body.
type reservedKey struct{}

// publishCopyLen is what the publish handler will reserve for r (0: r is
// no publish, or one it will refuse before reading).
func (s *Server) publishCopyLen(r *http.Request) int64 {
	if _, pattern := s.mux.Handler(r); pattern != publishRoute {
		return 0
	}
	opts, err := parsePublishOptions(r)
	if err != nil {
		return 0
	}
	want, ok := publishWant(s.opts.Broker.Server.MaxMessageSize(), r.ContentLength, opts)
	if !ok {
		return 0
	}
	return want + opts.prefixLen()
}

// publishReservation reserves n bytes of the put budget for a publish,
// or takes what bodyBudget reserved for it.
func (s *Server) publishReservation(ctx context.Context, r *http.Request, n int64) (release func(), err error) {
	if got, _ := r.Context().Value(reservedKey{}).(int64); got >= n {
		return func() {}, nil
	}
	return s.opts.Broker.Server.ReservePutBytes(ctx, n)
}

// messageReads are the routes that read messages or their traces (the
// message lookup and the trace view, API and dashboard): one set, so the
// trace cannot drift from the lookup's rights.
var messageReads = map[string]bool{"/api/v1/messages": true, "/messages": true, "/api/v1/trace": true, "/trace": true}

// routeRights applies the rights of routes that read messages, then serves
// the mux. Administrative actions check in authorize; data-plane endpoints
// check their topic and group themselves.
func (s *Server) routeRights(w http.ResponseWriter, r *http.Request) {
	if messageReads[r.URL.Path] {
		if reason := s.messageReadRights(r); reason != "" {
			writeJSONError(w, http.StatusForbidden, "forbidden: "+reason)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// messageReadRights decides a message lookup or trace as docs/security.md
// says: by id, admin (an id may be any topic's); by topic, subscribe on the
// topic. It reads the query as the lookups do (the id first). The lookups
// themselves run with the HTTP side's own cluster client, so this is the
// check.
func (s *Server) messageReadRights(r *http.Request) string {
	q := r.URL.Query()
	user, _ := auth.UserFrom(r.Context())
	switch {
	case strings.TrimSpace(q.Get("id")) != "":
		return s.opts.Security.Auth.Check(user, auth.OpAdmin, nil, nil)
	case q.Get("topic") != "":
		return s.opts.Security.Auth.Check(user, auth.OpSubscribe, []byte(strings.TrimSpace(q.Get("topic"))), nil)
	}
	return ""
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// resetRoute is the offset reset (api.go).
const resetRoute = "POST /api/v1/groups/{group}/reset"

// adminRoutes are the routes of administrative actions (their handlers
// call authorize), by mux pattern.
var adminRoutes = map[string]bool{resetRoute: true}

// adminRoute reports whether r is an administrative action.
func (s *Server) adminRoute(r *http.Request) bool {
	_, pattern := s.mux.Handler(r)
	return adminRoutes[pattern]
}

// adminByUser reports whether r comes from an authenticated admin.
func (s *Server) adminByUser(r *http.Request) bool {
	a := s.opts.Security.Auth
	if a == nil {
		return false
	}
	user, ok := auth.UserFrom(r.Context())
	return ok && a.IsAdmin(user)
}

// authCollector exports the Authorizer's counters.
type authCollector struct{ a *auth.Authorizer }

var (
	descAuthDenied    = desc("metaq_auth_denied_total", "Requests refused by the ACLs (403), by operation.", "op")
	descAuthFailures  = desc("metaq_auth_failures_total", "Failed authentications (wrong user, secret, token or signature).")
	descAuthThrottled = desc("metaq_auth_throttled_total", "Authentication attempts slowed down or refused unchecked (per-address throttle).")
)

func (c authCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAuthDenied
	ch <- descAuthFailures
	ch <- descAuthThrottled
}

func (c authCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.Stats()
	for _, op := range auth.Ops() {
		ch <- prometheus.MustNewConstMetric(descAuthDenied, prometheus.CounterValue, float64(st.Denied[op]), op.String())
	}
	ch <- prometheus.MustNewConstMetric(descAuthFailures, prometheus.CounterValue, float64(st.Failures))
	ch <- prometheus.MustNewConstMetric(descAuthThrottled, prometheus.CounterValue, float64(st.Throttled))
}

// serverErrorLog routes net/http's own error lines (TLS handshake errors
// from anyone who connects to an HTTPS port) to the logger under one
// constant message, so the rate limiter (internal/logx) folds them; nil
// (net/http's default) without TLS, as before.
func (s *Server) serverErrorLog() *log.Logger {
	if s.opts.Security.TLS == nil {
		return nil
	}
	return log.New(httpErrorWriter{s.log}, "", 0)
}

type httpErrorWriter struct{ l *slog.Logger }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	w.l.Info("HTTP server error", "err", strings.TrimSpace(string(p)))
	return len(p), nil
}
