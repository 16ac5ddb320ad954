package httpapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/protocol"
)

func TestSecurityHTTP(t *testing.T) {
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	dir := t.TempDir()
	hash := func(s string) string {
		h, err := auth.HashSecret(s, bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	token, tokenEntry := auth.NewToken()
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte("[alice]\nsecret = "+hash("pw-alice")+"\nsigningKey = "+auth.SigningKey("alice", "pw-alice")+
		"\ntokens = "+tokenEntry+"\npublish = orders.*\nsubscribe = orders.*\n\n[root]\nsecret = "+hash("pw-root")+"\nadmin = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"orders.*": 1, "test": 1},
		ExtraINI: fmt.Sprintf("\n[security]\nhttpTls=true\ntlsCert=%s\ntlsKey=%s\nusersFile=%s\nanonymous=none\nsignatureWindowSec=60\n", cert, key, users)})
	sec, err := httpapi.BrokerSecurity(b.Broker)
	if err != nil {
		t.Fatal(err)
	}
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.Security = sec })
	if !strings.HasPrefix(hs.URL(), "https://") {
		t.Fatalf("URL %s", hs.URL())
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CAFile)
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: 30 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(req *http.Request, want int) *http.Response {
		t.Helper()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL, resp.StatusCode, body, want)
		}
		return resp
	}
	get := func(path string) *http.Request {
		req, _ := http.NewRequest("GET", hs.URL()+path, nil)
		return req
	}

	// Plain HTTP on the HTTPS port is refused.
	if resp, err := http.Get("http://" + hs.Addr().String() + "/metrics"); err == nil {
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served")
		}
		resp.Body.Close()
	}
	// Anonymous: 401, a browser goes to the login page.
	do(get("/metrics"), 401)
	req := get("/topics")
	req.Header.Set("Accept", "text/html")
	if loc := do(req, 303).Header.Get("Location"); !strings.HasPrefix(loc, "/login?next=") {
		t.Fatalf("redirect to %q", loc)
	}
	do(get("/healthz"), 200)

	// Bearer tokens.
	req = get("/metrics")
	req.Header.Set("Authorization", "Bearer "+token)
	do(req, 200)
	req = get("/metrics")
	req.Header.Set("Authorization", "Bearer mqt_wrong")
	do(req, 401)

	// Signed requests: fresh is served, the same signature again is a
	// replay, an old timestamp is expired, a wrong key fails.
	signed := func(ts time.Time, key string) *http.Request {
		req := get("/metrics?a=1&b=2")
		if err := auth.SignRequest(req, "alice", key, nil, ts); err != nil {
			t.Fatal(err)
		}
		return req
	}
	sk := auth.SigningKey("alice", "pw-alice")
	now := time.Now()
	req = signed(now, sk)
	h := req.Header.Get("Authorization")
	do(req, 200)
	req = get("/metrics?a=1&b=2")
	req.Header.Set("Authorization", h)
	do(req, 401) // replay
	do(signed(now.Add(-5*time.Minute), sk), 401)
	do(signed(now.Add(time.Second), auth.SigningKey("alice", "guess")), 401)
	req = get("/metrics")
	req.Header.Set("Authorization", auth.SignatureScheme+" Credential=alice")
	do(req, 401)

	// Rights: alice may not look messages up by id (any topic) nor reset offsets.
	req = get("/api/v1/messages?id=1")
	req.Header.Set("Authorization", "Bearer "+token)
	do(req, 403)
	req, _ = http.NewRequest("POST", hs.URL()+"/api/v1/groups/g/reset", strings.NewReader(`{"topic":"orders.x","to":"earliest"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	if resp := do2(t, hc, req); resp == 200 || (resp != 401 && resp != 403) {
		t.Fatalf("alice reset offsets: %d", resp)
	}

	// Dashboard login: wrong secret 401, right one a session cookie
	// (HttpOnly, SameSite=Strict, Secure on HTTPS).
	login := func(user, secret string, want int) *http.Response {
		req, _ := http.NewRequest("POST", hs.URL()+"/login", strings.NewReader(url.Values{"user": {user}, "secret": {secret}, "next": {"/topics"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return do(req, want)
	}
	login("root", "nope", 401)
	resp := login("root", "pw-root", 303)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == auth.SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v", session)
	}
	if resp.Header.Get("Location") != "/topics" {
		t.Fatalf("after login: %q", resp.Header.Get("Location"))
	}
	req = get("/metrics")
	req.AddCookie(session)
	do(req, 200)
	req, _ = http.NewRequest("POST", hs.URL()+"/api/v1/groups/g/reset", strings.NewReader(`{"topic":"orders.x","to":"earliest"}`))
	req.AddCookie(session)
	if code := do2(t, hc, req); code == 401 || code == 403 {
		t.Fatalf("admin reset refused: %d", code)
	}

	// The gateway's publish follows the ACL: a signed publish to orders.*
	// is stored, one to test is 403 and stores nothing.
	publish := func(topic string, want int) {
		t.Helper()
		body := []byte("via http")
		req, _ := http.NewRequest("POST", hs.URL()+"/api/v1/topics/"+topic+"/messages", strings.NewReader(string(body)))
		if err := auth.SignRequest(req, "alice", sk, body, time.Now()); err != nil {
			t.Fatal(err)
		}
		do(req, want)
	}
	publish("orders.http", 200)
	publish("test", 403)
	if b.Store.MaxOffset("orders.http", 0) != 1 || b.Store.MaxOffset("test", 0) != 0 {
		t.Fatal("the HTTP publish did not follow the ACL")
	}

	// A TCP denial is counted in /metrics.
	c := b.Dial()
	c.Send("put test 0 1 0 1\r\nx")
	if r := c.Reply(); r.Code != protocol.StatusForbidden {
		t.Fatalf("anonymous put: %+v", r)
	}
	req = get("/metrics")
	req.AddCookie(session)
	r2, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if !strings.Contains(string(text), `metaq_auth_denied_total{op="publish"} 2`) || !strings.Contains(string(text), "metaq_auth_failures_total") {
		t.Fatalf("auth metrics missing:\n%s", grepLines(string(text), "metaq_auth"))
	}
}

func do2(t *testing.T, hc *http.Client, req *http.Request) int {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// countHandler counts the records of net/http's error log.
type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "HTTP server error" {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TLS handshake errors (anyone who connects to the HTTPS port with garbage)
// go to the logger under one constant message, and the HTTP side puts a
// rate limiter (internal/logx) in front of its logger, also when it is given
// a plain one (ForBroker gets the CLI's): one line per interval, not one per
// connection.
func TestTLSErrorLogRateLimited(t *testing.T) {
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	cfg, err := auth.ServerTLS(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	hs, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0", Logger: slog.New(countHandler{&n}),
		Security: httpapi.SecurityOptions{TLS: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	const conns = 50
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", hs.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(make([]byte, 512))
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if got := n.Load(); got > 5 {
		t.Fatalf("%d 'HTTP server error' lines for %d bad handshakes: not rate-limited", got, conns)
	}
}
