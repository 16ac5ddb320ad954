package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The HTTP side's authentication (docs/security.md): a request is
// identified by, in this order, a signed Authorization header
// (MQ1-HMAC-SHA256, sign.go), a bearer token (Authorization: Bearer, a
// user's `tokens`), or the dashboard's session cookie (POST /login with a
// user and secret). Without any it is anonymous. Guard puts the user in the
// request's context; the handlers ask the Authorizer with it.

type ctxKey struct{}

// WithUser returns ctx carrying an authenticated user.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, ctxKey{}, user)
}

// UserFrom returns the authenticated user of a request context; ok is
// false for an anonymous request.
func UserFrom(ctx context.Context) (user string, ok bool) {
	user, ok = ctx.Value(ctxKey{}).(string)
	return user, ok
}

type passKey struct{}

// PassedBearer reports whether a request was let through by Guard.PassBearer
// (it carried the dashboardToken, and no user).
func PassedBearer(ctx context.Context) bool {
	ok, _ := ctx.Value(passKey{}).(bool)
	return ok
}

// SessionCookie is the dashboard's session cookie.
const SessionCookie = "metaq_session"

// Guard authenticates HTTP requests.
type Guard struct {
	A *Authorizer
	V *Verifier
	// Secure marks the session cookie Secure (the HTTP side serves TLS).
	Secure bool
	// MaxBody bounds the body read to check a signature (413 beyond; a
	// larger Content-Length is refused before anything is read).
	MaxBody int64
	// PassBearer reports whether a bearer token that is no user's token
	// is still let through, without a user (the dashboardToken, which the
	// administrative handlers check themselves). Such a request is marked
	// (PassedBearer) and served as an anonymous one, except that when
	// anonymous requests are refused it still reaches the routes PassRoute
	// accepts.
	PassBearer func(token string) bool
	// PassRoute reports whether a PassBearer request may be served when
	// anonymous requests are refused (the administrative routes); nil:
	// none.
	PassRoute func(r *http.Request) bool
	Log       *slog.Logger

	sessions sessions
}

// NewGuard returns a Guard; ttl is the session lifetime.
func NewGuard(a *Authorizer, window, ttl time.Duration, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.Default()
	}
	if ttl <= 0 {
		ttl = 12 * time.Hour
	}
	return &Guard{A: a, V: NewVerifier(a, window, 0), MaxBody: 8 << 20, Log: log,
		sessions: sessions{ttl: ttl, max: 10000, m: map[string]session{}}}
}

// httpError answers with a JSON error.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="metaq", `+SignatureScheme)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// Identify returns the request's user (ok = authenticated) or answers it
// (done = true) when its credentials are wrong. r may be replaced (a
// signed request's body is read and put back).
func (g *Guard) Identify(w http.ResponseWriter, r *http.Request) (req *http.Request, user string, ok, done bool) {
	host := Host(r.RemoteAddr)
	h := r.Header.Get("Authorization")
	switch {
	case strings.HasPrefix(h, SignatureScheme+" "):
		sh, err := ParseSigHeader(h)
		if err != nil {
			g.fail(w, host, http.StatusUnauthorized, err.Error())
			return r, "", false, true
		}
		if r.ContentLength > g.MaxBody { // refused before anything is read
			httpError(w, http.StatusRequestEntityTooLarge, "body too large")
			return r, "", false, true
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.MaxBody))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				httpError(w, http.StatusRequestEntityTooLarge, "body too large")
			} else {
				httpError(w, http.StatusBadRequest, "reading the body: "+err.Error())
			}
			return r, "", false, true
		}
		u, err := g.V.Verify(sh, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, body)
		if err != nil {
			g.fail(w, host, http.StatusUnauthorized, err.Error())
			return r, "", false, true
		}
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		return r2, u, true, false
	case strings.HasPrefix(h, "Bearer "):
		tok := strings.TrimPrefix(h, "Bearer ")
		if u := g.A.Token(tok); u != "" {
			return r, u, true, false
		}
		if g.PassBearer != nil && g.PassBearer(tok) {
			return r.WithContext(context.WithValue(r.Context(), passKey{}, true)), "", false, false
		}
		g.fail(w, host, http.StatusUnauthorized, "unknown bearer token")
		return r, "", false, true
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if u, found := g.sessions.get(c.Value); found {
			return r, u, true, false
		}
	}
	return r, "", false, false
}

func (g *Guard) fail(w http.ResponseWriter, host string, status int, msg string) {
	if !g.A.CountFailure(host) {
		g.A.log.Warn("HTTP authentication refused: too many failed attempts from this address", "remote", host)
		httpError(w, http.StatusTooManyRequests, reasonThrottled)
		return
	}
	g.A.log.Warn("HTTP authentication failed", "remote", host, "err", msg)
	httpError(w, status, msg)
}

// Wrap authenticates every request before next: /login and /logout are
// served here; an anonymous request when anonymous=none is sent to the
// login page (a browser) or answered 401, unless it passed with the
// dashboardToken (PassBearer) to a route PassRoute accepts.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/login":
			g.login(w, r)
			return
		case "/logout":
			g.logout(w, r)
			return
		case "/healthz":
			next.ServeHTTP(w, r)
			return
		}
		r, user, ok, done := g.Identify(w, r)
		if done {
			return
		}
		if !ok {
			if reason := g.A.Check("", OpConnect, nil, nil); reason != "" &&
				!(PassedBearer(r.Context()) && g.PassRoute != nil && g.PassRoute(r)) {
				if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
					http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
				httpError(w, http.StatusUnauthorized, reason)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if reason := g.A.Check(user, OpConnect, nil, nil); reason != "" {
			httpError(w, http.StatusUnauthorized, reason)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), user)))
	})
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>metaq — log in</title><link rel="icon" href="data:,">
<style>body{font-family:sans-serif;max-width:22em;margin:4em auto}input{display:block;width:100%;margin:.3em 0 1em}</style></head>
<body><h1>metaq</h1>{{if .Error}}<p role="alert" style="color:#b00">{{.Error}}</p>{{end}}
<form method="post" action="/login"><input type="hidden" name="next" value="{{.Next}}">
<label>User<input name="user" autocomplete="username" required></label>
<label>Secret<input name="secret" type="password" autocomplete="current-password" required></label>
<button type="submit">Log in</button></form></body></html>
`))

// safeNext keeps a redirect target on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	return next
}

func (g *Guard) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, map[string]string{"Next": safeNext(r.URL.Query().Get("next"))})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
		if err := r.ParseForm(); err != nil {
			httpError(w, http.StatusBadRequest, "bad login form")
			return
		}
		user, secret, next := r.PostForm.Get("user"), r.PostForm.Get("secret"), safeNext(r.PostForm.Get("next"))
		if reason := g.A.Authenticate(Host(r.RemoteAddr), user, []byte(secret), r.Context().Done()); reason != "" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, map[string]string{"Next": next, "Error": reason})
			return
		}
		id := g.sessions.create(user)
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: g.Secure,
			SameSite: http.SameSiteStrictMode, MaxAge: int(g.sessions.ttl / time.Second)})
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		httpError(w, http.StatusMethodNotAllowed, "GET or POST")
	}
}

func (g *Guard) logout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		httpError(w, http.StatusMethodNotAllowed, "POST")
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		g.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: g.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// sessions are the dashboard's login sessions: random 256-bit ids, in
// memory (a restart logs everybody out), bounded (the oldest go first).
type sessions struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[string]session
}

type session struct {
	user    string
	expires time.Time
}

func (s *sessions) create(user string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max {
		var oldest string
		var ot time.Time
		for k, v := range s.m {
			if v.expires.Before(now) {
				delete(s.m, k)
			} else if oldest == "" || v.expires.Before(ot) {
				oldest, ot = k, v.expires
			}
		}
		if len(s.m) >= s.max {
			delete(s.m, oldest)
		}
	}
	s.m[id] = session{user: user, expires: now.Add(s.ttl)}
	return id
}

func (s *sessions) get(id string) (string, bool) {
	if len(id) != 64 {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok || time.Now().After(v.expires) {
		delete(s.m, id)
		return "", false
	}
	return v.user, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}
