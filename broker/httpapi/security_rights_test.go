package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
