package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// secureFixture is a broker with [security] (anonymous=none) and its HTTP
// side on plain HTTP: alice may publish and subscribe orders.*, root is
// admin; the cluster client of the HTTP side authenticates as root
// (replicationUser), as in a real cluster.
type secureFixture struct {
	b                     *brokertest.Broker
	hs                    *httpapi.Server
	aliceTok, rootTok     string
	hash                  func(string) string
	aliceEntry, rootEntry string
}

func startSecureFixture(t *testing.T, withDelivery bool) *secureFixture {
	t.Helper()
	dir := t.TempDir()
	r := &secureFixture{}
	r.hash = func(s string) string {
		h, err := auth.HashSecret(s, bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	r.aliceTok, r.aliceEntry = auth.NewToken()
	r.rootTok, r.rootEntry = auth.NewToken()
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte(r.usersINI("orders.*")), 0o600); err != nil {
		t.Fatal(err)
	}
	r.b = brokertest.RunBroker(t, brokertest.Options{Dir: dir, Sync: true, Topics: map[string]int{"orders.*": 1, "secret": 1},
		ExtraINI: fmt.Sprintf("\n[security]\nusersFile=%s\nanonymous=none\nreplicationUser=root\nreplicationSecret=pw-root\n", users)})
	sec, err := httpapi.BrokerSecurity(r.b.Broker)
	if err != nil {
		t.Fatal(err)
	}
	b := r.b
	r.hs = runHTTP(t, b, func(o *httpapi.Options) {
		o.Security = sec
		if withDelivery {
			o.Delivery = b.Pop()
		}
	})
	return r
}

func (r *secureFixture) usersINI(aliceTopics string) string {
	alice := "[alice]\nsecret = " + r.hash("pw-alice") + "\ntokens = " + r.aliceEntry + "\ngroups = *\n"
	if aliceTopics != "" {
		alice += "publish = " + aliceTopics + "\nsubscribe = " + aliceTopics + "\n"
	}
	return alice + "\n[root]\nsecret = " + r.hash("pw-root") + "\ntokens = " + r.rootEntry + "\nadmin = true\n"
}

func (r *secureFixture) get(t *testing.T, tok, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", r.hs.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *secureFixture) publish(t *testing.T, tok, topic, query, body string) httpapi.PublishReply {
	t.Helper()
	req, _ := http.NewRequest("POST", r.hs.URL()+"/api/v1/topics/"+topic+"/messages?"+query, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("publish %s: %d %s", topic, resp.StatusCode, b)
	}
	var pr httpapi.PublishReply
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

// The trace view reads %TRACE% and `query id` with the HTTP side's own
// (admin) client, so it needs the lookup's rights: alice, who may not look
// up the messages of topic secret (403 on /api/v1/messages), may not read
// their trace (topic, keys, store time, offsets) by id or by topic and key
// either.
func TestTraceNeedsLookupRights(t *testing.T) {
	r := startSecureFixture(t, false)
	pr := r.publish(t, r.rootTok, "secret", "keys=k1&tag=payroll", "salary")

	if st, body := r.get(t, r.aliceTok, "/api/v1/messages?topic=secret&key=k1"); st != 403 {
		t.Fatalf("baseline: alice's message lookup on secret: %d %s, want 403", st, body)
	}
	if st, body := r.get(t, r.aliceTok, "/api/v1/messages?id="+pr.MsgID); st != 403 {
		t.Fatalf("baseline: alice's lookup by id: %d %s, want 403", st, body)
	}
	for _, path := range []string{"/api/v1/trace?id=" + pr.MsgID, "/api/v1/trace?topic=secret&key=k1",
		"/trace?id=" + pr.MsgID, "/trace?topic=secret&key=k1"} {
		if st, body := r.get(t, r.aliceTok, path); st != 403 {
			if len(body) > 300 {
				body = body[:300]
			}
			t.Errorf("alice GET %s: %d, want 403; body: %s", path, st, body)
		}
	}
	// Who may look up may trace: root by id, alice by key on her topics.
	r.publish(t, r.rootTok, "orders.a", "keys=k2", "order")
	for _, c := range []struct{ tok, path string }{
		{r.rootTok, "/api/v1/trace?id=" + pr.MsgID},
		{r.rootTok, "/trace?topic=secret&key=k1"},
		{r.aliceTok, "/api/v1/trace?topic=orders.a&key=k2"},
	} {
		if st, body := r.get(t, c.tok, c.path); st != 200 {
			t.Errorf("GET %s: %d %s, want 200", c.path, st, body)
		}
	}
}

// dialWSAs opens a WebSocket on topic orders.a as the token's user and
// reads the subscribed frame.
func (r *secureFixture) dialWSAs(t *testing.T, ctx context.Context, tok, group, query string) *websocket.Conn {
	t.Helper()
	u := "ws://" + r.hs.Addr().String() + "/api/v1/groups/" + group + "/topics/orders.a/ws?" + query
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	if f := readWSFrame(t, ctx, c); f.Type != "subscribed" {
		t.Fatalf("first frame %+v", f)
	}
	return c
}

func readWSFrame(t *testing.T, ctx context.Context, c *websocket.Conn) httpapi.WSFrame {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var f httpapi.WSFrame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

// wantRefused reads the 403 error frame of a withdrawn right, then the
// close with 1008, and no message in between.
func wantRefused(t *testing.T, ctx context.Context, c *websocket.Conn, who string) {
	t.Helper()
	if f := readWSFrame(t, ctx, c); f.Type != "error" || f.Code != 403 {
		t.Fatalf("%s: %+v, want the error frame 403 of the withdrawn right", who, f)
	}
	_, b, err := c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
		t.Fatalf("%s: after the 403, %s %v (close status %d), want the close 1008", who, b, err, got)
	}
}

// Changed rights apply at once (docs/security.md), also to open sockets:
// after alice's rights on orders.* are withdrawn, her socket's ack is not
// carried out and her other socket delivers nothing more; both get a 403
// error frame and close with 1008, and what they held goes to the group's
// other members.
func TestWSWithdrawnRightsCloseTheSocket(t *testing.T) {
	r := startSecureFixture(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acker := r.dialWSAs(t, ctx, r.aliceTok, "g1", "max=4&invisibleMs=1000")
	receiver := r.dialWSAs(t, ctx, r.aliceTok, "g2", "max=4&invisibleMs=600000")
	r.publish(t, r.rootTok, "orders.a", "", "m1")
	m1 := readWSFrame(t, ctx, acker)
	if m1.Type != "message" || m1.Body != "m1" {
		t.Fatalf("g1: %+v", m1)
	}
	if f := readWSFrame(t, ctx, receiver); f.Type != "message" || f.Body != "m1" {
		t.Fatalf("g2: %+v", f)
	}

	us, err := auth.ParseUsers([]byte(r.usersINI("")))
	if err != nil {
		t.Fatal(err)
	}
	r.b.Server.Authorizer().SetUsers(us)
	if st, _ := r.get(t, r.aliceTok, "/api/v1/messages?topic=orders.a&key=x"); st != 403 {
		t.Fatalf("revocation not in force: %d", st)
	}

	// The ack is refused, not carried out: g1 gets m1 again.
	b, _ := json.Marshal(map[string]any{"op": "ack", "handle": m1.Handle, "id": 1})
	if err := acker.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, ctx, acker, "g1's ack after the revocation")
	// The receiver's long poll returns m2 after the revocation: refused,
	// and m2 released to the group.
	r.publish(t, r.rootTok, "orders.a", "", "m2")
	wantRefused(t, ctx, receiver, "g2's receive after the revocation")

	root1 := r.dialWSAs(t, ctx, r.rootTok, "g1", "max=4")
	for got := map[string]int{}; got["m1"] < 2; { // m2, and m1 again once alice's lock of 1 s ends
		f := readWSFrame(t, ctx, root1)
		if f.Type != "message" || got[f.Body] != 0 {
			t.Fatalf("g1 after alice's refused ack: %+v (had %v), want m2 and m1 again", f, got)
		}
		got[f.Body] = f.Attempt
	}
	root2 := r.dialWSAs(t, ctx, r.rootTok, "g2", "max=4")
	if f := readWSFrame(t, ctx, root2); f.Type != "message" || f.Body != "m2" {
		t.Fatalf("g2 after alice's refused receive: %+v, want m2 (released; m1 is still locked to alice's closed socket)", f)
	}
}

// docs/security.md: with anonymous=none, "dashboardToken still works as a
// bearer token for administrative actions", and only for them: every other
// route still needs a user.
func TestDashboardTokenWithAnonymousNone(t *testing.T) {
	r := startSecureFixture(t, false) // runHTTP sets Token "s3cret"
	reset := func(tok string) (int, string) {
		req, _ := http.NewRequest("POST", r.hs.URL()+"/api/v1/groups/g/reset", strings.NewReader(`{"topic":"orders.x","to":"earliest"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	// Without ZooKeeper the reset itself answers 503 once authorized.
	if st, body := reset("s3cret"); st != http.StatusServiceUnavailable {
		t.Fatalf("reset with the dashboardToken: %d %s, want 503 (authorized, no ZooKeeper)", st, body)
	}
	if st, body := reset("wrong"); st != http.StatusUnauthorized {
		t.Fatalf("reset with a wrong token: %d %s, want 401", st, body)
	}
	if st, body := reset(r.aliceTok); st != http.StatusUnauthorized {
		t.Fatalf("reset by alice (no admin): %d %s, want 401", st, body)
	}
	for _, path := range []string{"/api/v1/topics", "/metrics", "/api/v1/messages?topic=secret&key=k", "/api/v1/trace?id=1"} {
		if st, body := r.get(t, "s3cret", path); st != http.StatusUnauthorized {
			t.Errorf("GET %s with the dashboardToken: %d %s, want 401 (a user is needed)", path, st, body)
		}
	}
}
