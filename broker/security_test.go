package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func bhash(t testing.TB, s string) string {
	h, err := auth.HashSecret(s, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// usersFile writes a users file with alice (publish orders.*, subscribe
// orders.* as billing-*), bob (publish *, no subscribe) and root (admin).
func usersFile(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "users.ini")
	data := "[alice]\nsecret = " + bhash(t, "pw-alice") + "\npublish = orders.*\nsubscribe = orders.*\ngroups = billing-*\n" +
		"\n[bob]\nsecret = " + bhash(t, "pw bob+") + "\npublish = *\n" +
		"\n[root]\nsecret = " + bhash(t, "pw-root") + "\nadmin = true\n"
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type secBroker struct {
	*brokertest.Broker
	TLSAddr string
	CA      *authtest.CA
	Users   string
	Cert    string // tlsCert and tlsKey, for renewal tests
	Key     string
	opts    brokertest.Options
}

// runSecure starts a broker with [security]: TLS on a second port (mutual
// when mutual), a users file and anonymous=none.
func runSecure(t *testing.T, mutual bool, extra string, log *slog.Logger) *secBroker {
	t.Helper()
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	dir := t.TempDir()
	users := usersFile(t, dir)
	sec := fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\nusersFile=%s\nanonymous=none\n", cert, key, users)
	if mutual {
		sec += "tlsClientCA=" + ca.CAFile + "\n"
	}
	sec += extra
	opts := brokertest.Options{
		Dir:      dir,
		Topics:   map[string]int{"orders.*": 2, "test": 1, "public": 1},
		ExtraINI: sec,
		Logger:   log,
		Server:   func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" },
	}
	b := brokertest.RunBroker(t, opts)
	return &secBroker{Broker: b, TLSAddr: b.Server.TLSAddr().String(), CA: ca, Users: users, Cert: cert, Key: key, opts: opts}
}

// restart stops b gracefully and starts it again over the same data dir
// and configuration (new ports: dial again).
func (b *secBroker) restart(t *testing.T) {
	t.Helper()
	b.Stop()
	b.Broker = brokertest.RunBroker(t, b.opts)
	b.TLSAddr = b.Server.TLSAddr().String()
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*brokertest.Client, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	t.Cleanup(func() { tc.Close() })
	c := brokertest.Wrap(t, tc)
	return c, nil
}

func want(t *testing.T, c *brokertest.Client, cmd string, code int) protocol.Reply {
	t.Helper()
	c.Send(cmd)
	r := c.Reply()
	if r.Code != code {
		t.Fatalf("%q: got %d %q, want %d", strings.TrimSpace(cmd), r.Code, r.Body, code)
	}
	return r
}

func login(t *testing.T, c *brokertest.Client, user, secret string) {
	t.Helper()
	c.SendBytes(protocol.AppendAuth(nil, user, secret, 99))
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("auth %s: %d %s", user, r.Code, r.Body)
	}
}

func TestSecurityTLSAndMutualTLS(t *testing.T) {
	b := runSecure(t, true, "", nil)
	cert, key := b.CA.Issue(t, "client")
	withCert, err := auth.ClientTLS(b.CA.CAFile, cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	withCert.ServerName = "127.0.0.1"
	c, err := dialTLS(t, b.TLSAddr, withCert)
	if err != nil {
		t.Fatalf("mutual TLS handshake: %v", err)
	}
	want(t, c, "version 1\r\n", 200)
	want(t, c, "put orders.eu 0 5 0 2\r\nhello", 403) // anonymous=none
	login(t, c, "alice", "pw-alice")
	want(t, c, "put orders.eu 0 5 0 3\r\nhello", 200)
	r := want(t, c, "get orders.eu billing-1 0 0 65536 4\r\n", 200)
	if recs := brokertest.Records(t, r.Body); len(recs) != 1 || string(recs[0].Data) != "hello" {
		t.Fatalf("records %+v", recs)
	}

	// A client without a certificate is refused by the handshake.
	noCert, _ := auth.ClientTLS(b.CA.CAFile, "", "", "127.0.0.1")
	if c, err := dialTLS(t, b.TLSAddr, noCert); err == nil {
		// TLS 1.3: the client may finish first; the refusal arrives on the first read.
		c.Send("version 1\r\n")
		if _, err := c.TryReply(30 * time.Second); err == nil {
			t.Fatal("a client without a certificate was served")
		}
	}
	// A client that does not trust the broker's CA refuses the broker.
	if _, err := dialTLS(t, b.TLSAddr, &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		t.Fatal("an unknown CA was accepted")
	}
	// The plain port still answers (allowPlaintext defaults to true).
	p := b.Dial()
	want(t, p, "version 2\r\n", 200)
}

func TestSecurityTLSOnlyAndGoClient(t *testing.T) {
	b := runSecure(t, false, "", nil)
	cfg, _ := auth.ClientTLS(b.CA.CAFile, "", "", "127.0.0.1")
	p, err := client.NewProducer(client.Config{Brokers: []string{b.TLSAddr}, TLS: cfg, User: "alice", Secret: "pw-alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &client.Message{Topic: "orders.eu", Body: []byte("over tls")}); err != nil {
		t.Fatalf("send over TLS with auth: %v", err)
	}
	if _, err := p.Send(ctx, &client.Message{Topic: "test", Body: []byte("refused")}); err == nil {
		t.Fatal("alice published to test")
	}
	// A producer with a wrong secret is refused.
	bad, err := client.NewProducer(client.Config{Brokers: []string{b.TLSAddr}, TLS: cfg, User: "alice", Secret: "nope",
		Producer: client.ProducerOptions{SendRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if _, err := bad.Send(sctx, &client.Message{Topic: "orders.eu", Body: []byte("x")}); err == nil {
		t.Fatal("wrong secret accepted")
	}
}

func TestSecurityACL(t *testing.T) {
	b := runSecure(t, false, "", nil)
	c := b.Dial()
	// Not authenticated: only auth, version, quit.
	want(t, c, "version 1\r\n", 200)
	want(t, c, "stats 2\r\n", 403)
	want(t, c, "get orders.eu billing-1 0 0 1024 3\r\n", 403)
	r := want(t, c, "auth alice wrong 4\r\n", 403)
	if !strings.Contains(string(r.Body), "authentication failed") {
		t.Fatalf("body %q", r.Body)
	}
	login(t, c, "alice", "pw-alice")
	want(t, c, "put orders.eu 1 3 0 5\r\nyes", 200)
	r = want(t, c, "put test 0 2 0 6\r\nno", 403)
	if !strings.Contains(string(r.Body), "publish") {
		t.Fatalf("403 without a reason: %q", r.Body)
	}
	want(t, c, "put public 0 2 0 7\r\nno", 403)
	want(t, c, "get test billing-1 0 0 1024 8\r\n", 403)        // topic not subscribable
	want(t, c, "get orders.eu other 0 0 1024 9\r\n", 403)       // group not allowed
	want(t, c, "offset orders.eu other 0 0 10\r\n", 403)        // nor its offsets
	want(t, c, "get orders.eu billing-1 1 0 1024 11\r\n", 200)  // allowed
	want(t, c, "get %SCHEDULE% billing-1 0 0 1024 12\r\n", 403) // system topic
	want(t, c, "query id 1 13\r\n", 403)                        // admin only

	// Nothing was stored for the refused puts.
	if n := b.Store.MaxOffset("test", 0); n != 0 {
		t.Fatalf("test has %d messages", n)
	}
	if n := b.Store.MaxOffset("public", 0); n != 0 {
		t.Fatalf("public has %d messages", n)
	}

	// bob may publish anywhere but read nothing: no get, no offset.
	c2 := b.Dial()
	login(t, c2, "bob", "pw bob+")
	want(t, c2, "put test 0 3 0 1\r\nbob", 200)
	want(t, c2, "get test g 0 0 1024 2\r\n", 403)
	want(t, c2, "offset test g 0 0 3\r\n", 403)
	want(t, c2, "retry g 1 0 4\r\n", 403)

	// root (admin) may do everything.
	c3 := b.Dial()
	login(t, c3, "root", "pw-root")
	want(t, c3, "get test g 0 0 1024 1\r\n", 200)
	want(t, c3, "stats 2\r\n", 200)

	st := b.Server.Authorizer().Stats()
	if st.Denied[auth.OpPublish] < 2 || st.Denied[auth.OpSubscribe] < 4 {
		t.Fatalf("denials %+v", st.Denied)
	}
}

// TestSecurityTLSCertificateRenewal: a certificate renewed on disk (both
// files replaced by rename) is served to new connections without a restart;
// a connection made before keeps working.
func TestSecurityTLSCertificateRenewal(t *testing.T) {
	b := runSecure(t, false, "", nil)
	cfg, err := auth.ClientTLS(b.CA.CAFile, "", "", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	servedSerial := func() (string, *brokertest.Client) {
		t.Helper()
		c, err := dialTLS(t, b.TLSAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String(), c
	}
	before, old := servedSerial()
	cert, key := b.CA.Issue(t, "broker")
	authtest.ReplaceFile(t, cert, b.Cert)
	authtest.ReplaceFile(t, key, b.Key)
	deadline := time.Now().Add(60 * time.Second)
	for {
		now, c := servedSerial()
		c.Close()
		if now != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	login(t, old, "alice", "pw-alice")
	want(t, old, "put orders.x 0 1 0 1\r\nx", 200)
}

func TestSecurityUsersFileReload(t *testing.T) {
	b := runSecure(t, false, "", nil)
	c := b.Dial()
	login(t, c, "alice", "pw-alice")
	want(t, c, "put test 0 1 0 1\r\nx", 403)
	data, _ := os.ReadFile(b.Users)
	data = bytes.Replace(data, []byte("publish = orders.*"), []byte("publish = orders.*, test"), 1)
	// Keep the size different so the stat check sees the change even within one mtime tick.
	if err := os.WriteFile(b.Users, data, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c.Send("put test 0 1 0 2\r\nx")
		if r := c.Reply(); r.Code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the users file change was not picked up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type lineCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *lineCounter) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestSecurityBruteForce: 1,000 wrong passwords from one address, pipelined
// on one connection and spread over ten, are slowed down (a handful are
// checked at all) and leave a bounded number of log lines.
func TestSecurityBruteForce(t *testing.T) {
	var lc lineCounter
	log := slog.New(slog.NewTextHandler(&lc, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := runSecure(t, false, "authFailBurst=5\nauthFailRate=1\nauthMaxDelayMs=200\n", log)
	var wg sync.WaitGroup
	for k := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.Dial()
			var req []byte
			for i := range 100 {
				req = protocol.AppendAuth(req, "alice", fmt.Sprintf("guess-%d-%d", k, i), int32(i))
			}
			c.SendBytes(req)
			for range 100 {
				if r := c.Reply(); r.Code != 403 {
					t.Errorf("wrong password: %d %s", r.Code, r.Body)
				}
			}
		}()
	}
	wg.Wait()
	st := b.Server.Authorizer().Stats()
	if st.Checks > 20 || st.Throttled < 980 {
		t.Fatalf("checked %d of 1000 wrong passwords, throttled %d", st.Checks, st.Throttled)
	}
	if n := lc.count("authentication"); n > 20 {
		t.Fatalf("%d log lines about authentication for 1000 attempts", n)
	}
	// The right password from the same address is refused while throttled,
	// and works again once the bucket refills (a bounded wait).
	c := b.Dial()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c.SendBytes(protocol.AppendAuth(nil, "alice", "pw-alice", 1))
		if r := c.Reply(); r.Code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never admitted again")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSecurityOffByDefault: without [security] the auth command is
// accepted and changes nothing.
func TestSecurityOffByDefault(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	if b.Server.Authorizer() != nil || b.Server.TLSAddr() != nil {
		t.Fatal("security on by default")
	}
	c := b.Dial()
	want(t, c, "auth x y 1\r\n", 200)
	want(t, c, "put test 0 1 0 2\r\nx", 200)
}

// TestSecurityUsersZK: with usersZK the users come from
// <zkRoot>/config/users and follow its changes.
func TestSecurityUsersZK(t *testing.T) {
	addr := zktest.Server(t)
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: addr, ConnectionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := broker.UsersNode("/meta")
	if err := zc.Put(ctx, node, []byte("[carol]\nsecret = "+bhash(t, "pw-carol")+"\npublish = test\n")); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{ZK: addr, ExtraINI: "\n[security]\nusersZK=true\nanonymous=none\n"})
	c := b.Dial()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c.SendBytes(protocol.AppendAuth(nil, "carol", "pw-carol", 1))
		if r := c.Reply(); r.Code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("carol never authenticated")
		}
		time.Sleep(100 * time.Millisecond)
	}
	want(t, c, "put test 0 1 0 2\r\nx", 200)
	if err := zc.Put(ctx, node, []byte("[carol]\nsecret = "+bhash(t, "pw-carol")+"\npublish = other\n")); err != nil {
		t.Fatal(err)
	}
	for {
		c.Send("put test 0 1 0 3\r\nx")
		if r := c.Reply(); r.Code == 403 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the users node change was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecurityTLSOnly: allowPlaintext=false leaves one listener, the TLS
// one, and that is the address the broker advertises.
func TestSecurityTLSOnly(t *testing.T) {
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	dir := t.TempDir()
	ini := brokertest.INI(brokertest.Options{Dir: dir, ExtraINI: fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\nallowPlaintext=false\n", cert, key)})
	path := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	bk, err := broker.StartWith(cfg, broker.StartOptions{Server: func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = bk.Stop(ctx)
	}()
	if bk.Server.Addr().String() != bk.Server.TLSAddr().String() || !strings.HasSuffix(bk.Server.BrokerString(), ":"+strconv.Itoa(bk.Server.Port())) {
		t.Fatalf("addr %v, TLS %v, advertised %s", bk.Server.Addr(), bk.Server.TLSAddr(), bk.Server.BrokerString())
	}
	tcfg, _ := auth.ClientTLS(ca.CAFile, "", "", "127.0.0.1")
	c, err := dialTLS(t, bk.Server.TLSAddr().String(), tcfg)
	if err != nil {
		t.Fatal(err)
	}
	want(t, c, "version 1\r\n", 200)
	p := brokertest.Dial(t, bk.Server.Addr().String()) // plain text on the TLS port
	p.Send("version 2\r\n")
	if r, err := p.TryReply(30 * time.Second); err == nil && r.Code == 200 {
		t.Fatal("plain text served on the TLS port")
	}
}

// TestSecurityTLSPortWithZooKeeper: a broker that keeps its plain port
// advertises it in ZooKeeper; a Go client with TLS and TLSPort finds the
// broker there and dials its TLS port.
func TestSecurityTLSPortWithZooKeeper(t *testing.T) {
	addr := zktest.Server(t)
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	b := brokertest.RunBroker(t, brokertest.Options{ZK: addr,
		ExtraINI: fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\n", cert, key),
		Server:   func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
	_, port, _ := net.SplitHostPort(b.Server.TLSAddr().String())
	tp, _ := strconv.Atoi(port)
	cfg, _ := auth.ClientTLS(ca.CAFile, "", "", "127.0.0.1")
	p, err := client.NewProducer(client.Config{ZKConnect: addr, TLS: cfg, TLSPort: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := p.Send(ctx, &client.Message{Topic: "test", Body: []byte("found in zk")})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("send: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecurityPeerLink: the broker's own links (replication) dial with
// auth.DialBroker: TLS with the broker's certificate against the cluster
// CA (mutual TLS), then auth as the replication user (an admin).
func TestSecurityPeerLink(t *testing.T) {
	b := runSecure(t, true, "", nil)
	cert, key := b.CA.Issue(t, "peer")
	cfg, err := auth.ClientTLS(b.CA.CAFile, cert, key, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := auth.DialBroker(ctx, b.TLSAddr, cfg, "root", "pw-root")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := brokertest.Wrap(t, nc)
	c.Send("query id 1 5\r\n") // admin only: 404, not 403
	if r := c.Reply(); r.Code == 403 {
		t.Fatalf("the replication user is not admin: %+v", r)
	}
	if _, err := auth.DialBroker(ctx, b.TLSAddr, cfg, "root", "wrong"); !errors.Is(err, protocol.ErrAuth) {
		t.Fatalf("wrong secret: %v", err)
	}
	if d, err := broker.ReplicationDialer(b.Config); err != nil || d == nil {
		t.Fatalf("ReplicationDialer: %v", err)
	}
}

// The replication link authenticates as [security] replicationUser: a master that lets
// anonymous connections do nothing (anonymous=none, `replicate` is an admin command) still
// feeds a slave that logs in as its admin user, and the slave's log is the master's.
func TestSecurityReplicationLinkAuthenticates(t *testing.T) {
	m := runSecure(t, false, "", nil)
	slave := brokertest.RunBroker(t, brokertest.Options{
		Topics: map[string]int{"orders.*": 2, "test": 1, "public": 1},
		ExtraINI: fmt.Sprintf("\n[slave]\nslaveId=0\nslaveMaxDelayInMills=500\n[replication]\nmasterAddr=%s\n"+
			"[security]\nreplicationUser=root\nreplicationSecret=pw-root\n", m.Addr),
	})
	c := m.Dial()
	defer c.Close()
	login(t, c, "bob", "pw bob+")
	for i := 0; i < 50; i++ {
		want(t, c, fmt.Sprintf("put test 0 5 0 %d\r\nhello", i), 200)
	}
	deadline := time.Now().Add(60 * time.Second)
	for slave.Store.FlushedPos() != m.Store.VisiblePos() {
		if time.Now().After(deadline) {
			t.Fatalf("the slave did not catch up over the authenticated link: slave %d, master %d",
				slave.Store.FlushedPos(), m.Store.VisiblePos())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := slave.Store.MaxOffset("test", 0); got != 50 {
		t.Fatalf("slave holds %d messages of test/0, want 50", got)
	}
}

// The handles of an ack (a data block, docs/protocol.md "pop") are not put
// data: a subscriber without publish rights acking a batch of more than
// 4 KiB whose block spans reads was answered "403 forbidden: this
// connection may not put to any topic" and its connection closed
// (putbudget.go). Whoever may use no consumer group is still refused such a
// block on its first read.
func TestSubscriberBatchAckSpanningReads(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.ini")
	data := "[carol]\nsecret = " + bhash(t, "pw-carol") + "\nsubscribe = orders.*\ngroups = billing-*\n" +
		"[dave]\nsecret = " + bhash(t, "pw-dave") + "\nsubscribe = orders.*\n"
	if err := os.WriteFile(users, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"orders.*": 1},
		ExtraINI: "\n[security]\nusersFile=" + users + "\nanonymous=none\n"})
	var hs strings.Builder
	for i := 0; hs.Len() < 8000; i++ {
		fmt.Fprintf(&hs, "orders.eu:0:%d:1 ", i)
	}
	block := hs.String()
	first := fmt.Sprintf("ack billing-1 %d 5\r\n", len(block)) + block[:1000]

	c := b.Dial()
	login(t, c, "carol", "pw-carol")
	c.Send(first)
	time.Sleep(50 * time.Millisecond) // the rest in a later read
	c.Send(block[1000:] + "version 6\r\n")
	r, err := c.TryReply(20 * time.Second)
	if err != nil || r.Code == 403 || r.Opaque != 5 {
		t.Fatalf("subscriber's batch ack of %d bytes: %d %q %v (want it applied or answered 404/503, not refused as a put)", len(block), r.Code, r.Body, err)
	}
	if r, err := c.TryReply(20 * time.Second); err != nil || r.Opaque != 6 {
		t.Fatalf("after the batch ack: %+v %v", r, err)
	}

	for _, who := range []string{"", "dave"} {
		c := b.Dial()
		if who != "" {
			login(t, c, who, "pw-"+who)
		}
		c.Send(first) // refused on this first read: the rest is not sent
		r, err := c.TryReply(20 * time.Second)
		if err != nil || r.Code != 403 || r.Opaque != 5 || !strings.Contains(string(r.Body), "may not use any consumer group") {
			t.Fatalf("%q: batch ack of %d bytes: %d %q %v, want 403 (no consumer group)", who, len(block), r.Code, r.Body, err)
		}
		c.ExpectClosed(20 * time.Second)
	}
}
