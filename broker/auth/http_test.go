package auth

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/topics?x=1": "/topics?x=1", "": "/", "//evil.example/": "/", "https://evil.example/": "/",
		"/\\evil": "/", "/a\r\nSet-Cookie: x": "/", "topics": "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSessionsBounded(t *testing.T) {
	s := sessions{ttl: time.Hour, max: 3, m: map[string]session{}}
	var ids []string
	for range 10 {
		ids = append(ids, s.create("u"))
	}
	if len(s.m) > 3 {
		t.Fatalf("%d sessions", len(s.m))
	}
	if _, ok := s.get(ids[9]); !ok {
		t.Fatal("newest session dropped")
	}
	if _, ok := s.get("short"); ok {
		t.Fatal("a malformed id was accepted")
	}
	s.drop(ids[9])
	if _, ok := s.get(ids[9]); ok {
		t.Fatal("dropped session still valid")
	}
}

// TestGuardLoginThrottled: failed dashboard logins share the throttle of
// the auth command.
func TestGuardLoginThrottled(t *testing.T) {
	a := New(Options{Anonymous: "none", FailBurst: 2, FailRate: 0.001, MaxDelay: 0})
	a.SetUsers(testUsers(t))
	g := NewGuard(a, time.Minute, time.Hour, nil)
	h := g.Wrap(http.NotFoundHandler())
	codes := map[int]int{}
	for range 20 {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"user": {"alice"}, "secret": {"x"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		codes[w.Code]++
	}
	if st := a.Stats(); st.Checks != 2 || st.Refused != 18 || codes[http.StatusUnauthorized] != 20 {
		t.Fatalf("checks %d refused %d codes %v", st.Checks, st.Refused, codes)
	}
}
