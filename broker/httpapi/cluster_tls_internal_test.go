package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// TestClusterViewUsesTLSWithPlaintextAllowed: with a tlsPort and the plain
// port kept (allowPlaintext=true, so brokers advertise their plain port),
// the cluster views' client reaches other brokers on their tlsPort over
// TLS, as replication does (auth.PeerAddr), and authenticates there as
// replicationUser: docs/security.md, "TLS details". It used to dial the
// advertised plain port and send the admin's secret in clear.
func TestClusterViewUsesTLSWithPlaintextAllowed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // runs last
	ca := authtest.NewCA(t)
	cert, key := ca.Issue(t, "broker")
	dir := t.TempDir()
	users := brokertest.RootUsersFile(t, dir, "pw-root")
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, ExtraINI: fmt.Sprintf(
		"\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\ntlsClientCA=%s\nusersFile=%s\nanonymous=none\n"+
			"replicationUser=root\nreplicationSecret=pw-root\n", cert, key, ca.CAFile, users),
		Server: func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})

	// Another broker of the cluster, as ZooKeeper advertises it: its plain
	// port (here a listener that records what it is sent), and the
	// cluster's tlsPort (here b's).
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		got  []string
		done sync.WaitGroup
	)
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			nc, err := plain.Accept()
			if err != nil {
				return
			}
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(nc).ReadString('\n')
			mu.Lock()
			got = append(got, line)
			mu.Unlock()
			nc.Close()
		}
	}()
	t.Cleanup(func() { plain.Close(); done.Wait() })

	sec := b.Config.Security
	sec.TLSPort = b.Server.TLSAddr().(*net.TCPAddr).Port
	o, err := securityFrom(sec, b.Server.Authorizer())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := newCluster(nil, o.clusterClient())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cl.brokerOffsets(ctx, plain.Addr().String())
	mu.Lock()
	defer mu.Unlock()
	for _, l := range got {
		if strings.Contains(l, "pw-root") {
			t.Fatalf("the cluster view sent replicationSecret in clear to the plain port: %q", l)
		}
	}
	if err != nil {
		t.Fatalf("stats over the tlsPort as replicationUser: %v (plain port got %q)", err, got)
	}
}
