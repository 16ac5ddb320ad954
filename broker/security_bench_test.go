package broker_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/auth/authtest"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// benchSecurePut is benchPipelinedPut as an authenticated user whose
// publish right is a pattern (every put passes the ACL check), over plain
// TCP or TLS.
func benchSecurePut(b *testing.B, useTLS bool) {
	ca := authtest.NewCA(b)
	cert, key := ca.Issue(b, "broker")
	dir := b.TempDir()
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte("[bench]\nsecret = "+bhash(b, "pw")+"\npublish = other.*, te*\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	br := brokertest.RunBroker(b, brokertest.Options{Dir: dir, SegSize: 256 << 20,
		ExtraINI: fmt.Sprintf("\n[security]\ntlsPort=1\ntlsCert=%s\ntlsKey=%s\nusersFile=%s\nanonymous=none\n", cert, key, users),
		Server:   func(o *broker.Options) { o.TLSAddr = "127.0.0.1:0" }})
	addr := br.Addr
	if useTLS {
		addr = br.Server.TLSAddr().String()
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if useTLS {
		cfg, _ := auth.ClientTLS(ca.CAFile, "", "", "127.0.0.1")
		tc := tls.Client(nc, cfg)
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		nc = tc
	}
	if err := protocol.Login(nc, "bench", "pw"); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 100)
	frame := protocol.AppendPut(nil, "test", 0, 0, protocol.ChecksumNone, "", 1, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	pipeline(b, nc, frame, b.N, 1000, 64<<10)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkPipelinedPutAuth(b *testing.B)    { benchSecurePut(b, false) }
func BenchmarkPipelinedPutTLSAuth(b *testing.B) { benchSecurePut(b, true) }
