package auth

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaqgo/metaq/conf"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, n string
		ok   bool
	}{
		{"orders.*", "orders.eu", true}, {"orders.*", "orders.", true}, {"orders.*", "orders", false},
		{"*", "", true}, {"*", "x", true}, {"a*b*c", "aXXbYYc", true}, {"a*b*c", "aXXbYY", false},
		{"x", "x", true}, {"x", "xy", false}, {"*.log", "a.b.log", true}, {"**", "abc", true},
	} {
		if got := conf.MatchPattern(c.p, []byte(c.n)); got != c.ok {
			t.Errorf("match(%q, %q) = %v", c.p, c.n, got)
		}
	}
}

func hash(t testing.TB, s string) string {
	h, err := HashSecret(s, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func testUsers(t testing.TB) *Users {
	t.Helper()
	data := "[alice]\nsecret = " + hash(t, "pw-alice") + "\nsigningKey = " + SigningKey("alice", "pw-alice") +
		"\npublish = orders.*\nsubscribe = orders.*, %TRACE%\ngroups = billing-*\ndenyPublish = orders.secret\n" +
		"\n[root]\nsecret = " + hash(t, "pw-root") + "\nadmin = true\n" +
		"\n[guest]\nsubscribe = public\ngroups = *\n"
	u, err := ParseUsers([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestParseUsersErrors(t *testing.T) {
	for _, bad := range []string{
		"[alice]\nsecret = plaintext\n",
		"[alice]\npublsh = x\n",
		"[alice]\npublish = a b/c\n",
		"[al ice]\n",
		"x = 1\n",
		"[a]\ntokens = abc\n",
		"[a]\nadmin = maybe\n",
	} {
		if _, err := ParseUsers([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	a := New(Options{Anonymous: "guest"})
	a.SetUsers(testUsers(t))
	b := func(s string) []byte { return []byte(s) }
	for _, c := range []struct {
		user, topic, group string
		op                 Op
		ok                 bool
	}{
		{"alice", "orders.eu", "", OpPublish, true},
		{"alice", "orders.secret", "", OpPublish, false},
		{"alice", "invoices", "", OpPublish, false},
		{"alice", "orders.eu", "billing-1", OpSubscribe, true},
		{"alice", "orders.eu", "other", OpSubscribe, false},
		{"alice", "invoices", "billing-1", OpSubscribe, false},
		{"alice", "%RETRY%billing-1", "billing-1", OpSubscribe, true},
		{"alice", "%RETRY%other", "other", OpSubscribe, false},
		{"alice", "%SCHEDULE%", "billing-1", OpSubscribe, false},
		{"alice", "%TRACE%", "", OpPublish, true},
		{"alice", "", "", OpAdmin, false},
		{"root", "%SCHEDULE%", "x", OpSubscribe, true},
		{"root", "", "", OpAdmin, true},
		{"", "public", "g", OpSubscribe, true}, // anonymous = guest
		{"", "orders.eu", "", OpPublish, false},
		{"", "%TRACE%", "", OpPublish, false}, // guest publishes nothing
		{"gone", "orders.eu", "", OpPublish, false},
	} {
		r := a.Check(c.user, c.op, b(c.topic), b(c.group))
		if (r == "") != c.ok {
			t.Errorf("%+v: reason %q", c, r)
		}
	}
	if a.Stats().Denied[OpPublish] == 0 {
		t.Error("denials not counted")
	}
	none := New(Options{Anonymous: "none"})
	if none.Check("", OpConnect, nil, nil) == "" {
		t.Error("anonymous none allowed")
	}
	all := New(Options{})
	if all.Check("", OpAdmin, nil, nil) != "" {
		t.Error("anonymous all denied")
	}
}

func TestCheckAllowedPathAllocatesNothing(t *testing.T) {
	a := New(Options{Anonymous: "none"})
	a.SetUsers(testUsers(t))
	topic, group := []byte("orders.eu"), []byte("billing-7")
	if n := testing.AllocsPerRun(1000, func() {
		if a.Check("alice", OpSubscribe, topic, group) != "" {
			t.Fatal("denied")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per allowed check", n)
	}
}

func TestAuthenticate(t *testing.T) {
	a := New(Options{Anonymous: "none"})
	a.SetUsers(testUsers(t))
	if r := a.Authenticate("h1", "alice", []byte("pw-alice"), nil); r != "" {
		t.Fatal(r)
	}
	if r := a.Authenticate("h1", "alice", []byte("pw-alice"), nil); r != "" { // cached path
		t.Fatal(r)
	}
	if r := a.Authenticate("h1", "alice", []byte("wrong"), nil); r == "" {
		t.Fatal("wrong secret accepted")
	}
	if r := a.Authenticate("h1", "guest", []byte(""), nil); r == "" {
		t.Fatal("user without secret logged in")
	}
	if r := a.Authenticate("h1", "nobody", []byte("x"), nil); r == "" {
		t.Fatal("unknown user logged in")
	}
}

// TestThrottle: 1,000 wrong secrets from one address: a handful are
// checked, the rest are slowed down or refused unchecked, and the log
// holds a bounded number of lines.
func TestThrottle(t *testing.T) {
	var logBuf bytes.Buffer
	a := New(Options{Anonymous: "none", FailRate: 1, FailBurst: 5, MaxDelay: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	a.SetUsers(testUsers(t))
	clock := time.Unix(1000, 0)
	a.limiter.now = func() time.Time { return clock }
	for range 1000 {
		_ = a.Authenticate("10.0.0.1", "alice", []byte("wrong"), nil)
	}
	st := a.Stats()
	if st.Checks > 10 || st.Refused < 990 {
		t.Fatalf("checks %d, refused %d", st.Checks, st.Refused)
	}
	// Another address is not affected.
	if r := a.Authenticate("10.0.0.2", "alice", []byte("pw-alice"), nil); r != "" {
		t.Fatal(r)
	}
	// Time passes: the address gets a checked attempt again.
	clock = clock.Add(10 * time.Second)
	if r := a.Authenticate("10.0.0.1", "alice", []byte("pw-alice"), nil); r != "" {
		t.Fatal(r)
	}
	_ = logBuf // lines are rate-limited by the broker's logx handler (tested in broker)
}

func TestLimiterBounded(t *testing.T) {
	l := NewFailLimiter(1, 1, 0)
	l.max = 100
	for i := range 1000 {
		l.Admit(strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune(i)))
	}
	if l.Len() > 100 {
		t.Fatalf("%d addresses tracked", l.Len())
	}
}

func TestSignature(t *testing.T) {
	a := New(Options{Anonymous: "none"})
	a.SetUsers(testUsers(t))
	v := NewVerifier(a, time.Minute, 3)
	now := time.Unix(1_700_000_000, 0)
	v.now = func() time.Time { return now }
	body := []byte(`{"data":"x"}`)
	req := httptest.NewRequest("POST", "/api/v1/topics/orders.eu/messages?b=2&a=1", bytes.NewReader(body))
	if err := SignRequest(req, "alice", SigningKey("alice", "pw-alice"), body, now); err != nil {
		t.Fatal(err)
	}
	h, err := ParseSigHeader(req.Header.Get("Authorization"))
	if err != nil {
		t.Fatal(err)
	}
	verify := func(h SigHeader, body []byte) error {
		_, err := v.Verify(h, req.Method, req.URL.EscapedPath(), req.URL.RawQuery, body)
		return err
	}
	if err := verify(h, body); err != nil {
		t.Fatal(err)
	}
	if err := verify(h, body); err != errReplayed {
		t.Fatalf("replay: %v", err)
	}
	if err := verify(h, []byte("tampered")); err != errBadSig {
		t.Fatalf("tampered body: %v", err)
	}
	// Expired: signed two minutes ago, window one minute.
	old := httptest.NewRequest("POST", req.URL.String(), nil)
	_ = SignRequest(old, "alice", SigningKey("alice", "pw-alice"), body, now.Add(-2*time.Minute))
	ho, _ := ParseSigHeader(old.Header.Get("Authorization"))
	if err := verify(ho, body); err != errExpired {
		t.Fatalf("expired: %v", err)
	}
	// Wrong key.
	bad := httptest.NewRequest("POST", req.URL.String(), nil)
	_ = SignRequest(bad, "alice", SigningKey("alice", "guess"), body, now)
	hb, _ := ParseSigHeader(bad.Header.Get("Authorization"))
	if err := verify(hb, body); err != errBadSig {
		t.Fatalf("wrong key: %v", err)
	}
	// The replay cache is bounded: when full of live signatures, new ones are refused.
	for i := 1; i <= 3; i++ {
		r := httptest.NewRequest("GET", "/x?i="+strings.Repeat("1", i), nil)
		_ = SignRequest(r, "alice", SigningKey("alice", "pw-alice"), nil, now)
		hh, _ := ParseSigHeader(r.Header.Get("Authorization"))
		_, err := v.Verify(hh, "GET", "/x", r.URL.RawQuery, nil)
		if i < 3 && err != nil || i == 3 && err != errReplayFull {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	now = now.Add(3 * time.Minute) // everything expired: room again
	r := httptest.NewRequest("GET", "/x", nil)
	_ = SignRequest(r, "alice", SigningKey("alice", "pw-alice"), nil, now)
	hh, _ := ParseSigHeader(r.Header.Get("Authorization"))
	if _, err := v.Verify(hh, "GET", "/x", "", nil); err != nil {
		t.Fatal(err)
	}
}

func TestParseSigHeader(t *testing.T) {
	good := SignatureScheme + " Credential=alice, Timestamp=1700000000, Signature=" + strings.Repeat("ab", 32)
	if _, err := ParseSigHeader(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"", SignatureScheme, "Bearer x",
		SignatureScheme + " Credential=alice, Timestamp=1700000000",
		SignatureScheme + " Credential=alice, Credential=bob, Timestamp=1, Signature=" + strings.Repeat("ab", 32),
		SignatureScheme + " Credential=alice, Timestamp=-1, Signature=" + strings.Repeat("ab", 32),
		SignatureScheme + " Credential=alice, Timestamp=+1, Signature=" + strings.Repeat("ab", 32),
		SignatureScheme + " Credential=alice, Timestamp=1, Signature=" + strings.Repeat("zz", 32),
		SignatureScheme + " Credential=al ice, Timestamp=1, Signature=" + strings.Repeat("ab", 32),
		SignatureScheme + " Credential=alice, Timestamp=1, Signature=" + strings.Repeat("ab", 32) + ", X=1",
		good + strings.Repeat(" ", 600),
	} {
		if _, err := ParseSigHeader(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// FuzzSigHeader: the parser never panics, accepts only well-formed
// headers, and what it accepts renders back to an equivalent header.
func FuzzSigHeader(f *testing.F) {
	f.Add(SignatureScheme + " Credential=alice, Timestamp=1700000000, Signature=" + strings.Repeat("ab", 32))
	f.Add(SignatureScheme + " Credential=a,Timestamp=0,Signature=" + strings.Repeat("0", 64))
	f.Add("Bearer abc")
	f.Add(SignatureScheme + " ,,,")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseSigHeader(h)
		if err != nil {
			return
		}
		if !validUserName(s.User) || s.Timestamp < 0 || len(h) > maxSigHeader {
			t.Fatalf("accepted %q as %+v", h, s)
		}
	})
}

// FuzzUsers: a users file never panics the parser; what parses has valid
// names and patterns only.
func FuzzUsers(f *testing.F) {
	f.Add([]byte("[alice]\npublish = orders.*\nadmin = true\n"))
	f.Add([]byte("[a]\ntokens = sha256:" + strings.Repeat("00", 32) + "\n"))
	f.Add([]byte("[\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ParseUsers(data)
		if err != nil {
			return
		}
		for _, n := range u.Names() {
			if !validUserName(n) {
				t.Fatalf("user %q", n)
			}
		}
	})
}

// BenchmarkCheckAllowed is the ACL check every put and get pays: a user
// whose publish pattern has a star, and a deny list checked first.
func BenchmarkCheckAllowed(b *testing.B) {
	a := New(Options{Anonymous: "none"})
	a.SetUsers(testUsers(b))
	topic := []byte("orders.eu-west-1")
	b.ReportAllocs()
	for b.Loop() {
		if a.Check("alice", OpPublish, topic, nil) != "" {
			b.Fatal("denied")
		}
	}
}
