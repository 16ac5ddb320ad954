package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
)

// stalledBroker is a broker registered in ZooKeeper that accepts connections and reads requests
// but never answers, as a broker stopped with SIGSTOP (or a hung machine) does.
type stalledBroker struct {
	addr     string
	requests atomic.Int64 // request lines read
}

// startStalledBroker registers broker id at a stalled listener in zk (root /meta) with topics
// (name → partitions) and waits until the registration is done.
func startStalledBroker(t *testing.T, zk string, id int, topics map[string]int) *stalledBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stalledBroker{addr: l.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := bufio.NewScanner(nc)
				for sc.Scan() {
					s.requests.Add(1)
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zc, err := zkmeta.Connect(ctx, zkmeta.Config{ConnectString: zk, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	reg, err := zkmeta.NewBrokerRegistry(zc, zkmeta.MasterBroker(id, "127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	for topic, n := range topics {
		if err := reg.RegisterTopic(topic, zkmeta.DefaultTopicConfig(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Register(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zc.Close() // its ephemeral nodes go with the session
		l.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// A broker that accepts connections but does not answer (SIGSTOP) is asked once by topics
// describe and groups describe, not once per partition: each request waits --connect-timeout,
// so with one request per partition a stalled broker with many partitions made the commands take
// partitions × --connect-timeout (minutes with the default 10 s). Its partitions are all reported
// with the error, and the commands exit 4.
func TestDescribeAsksAStalledBrokerOnce(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"stall": 1}, false)
	s := startStalledBroker(t, c.zk, 7, map[string]int{"stall": 8})
	c.mustRun("produce", "-t", "stall", "-m", "x", "--partition", "0-0", "--quiet")
	c.mustRun("offsets", "reset", "-g", "g", "-t", "stall", "--to", "0", "--partition", "0-0", "--create")

	// Each describe: exit 4, the 9 partitions listed, an error on those of the stalled broker only,
	// and one request to it.
	for _, args := range [][]string{{"topics", "describe", "stall"}, {"groups", "describe", "g"}} {
		out, errs, code := c.run(append([]string{"--connect-timeout", "500ms"}, append(args, "--json")...)...)
		if code != ExitUnavailable {
			t.Fatalf("%s describe with a stalled broker: exit %d, want %d\n%s%s", args[0], code, ExitUnavailable, out, errs)
		}
		// The fields topicDetail and groupDetail share.
		var d struct {
			Partitions []struct {
				BrokerID  int    `json:"brokerId"`
				Partition int    `json:"partition"`
				Error     string `json:"error"`
			} `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Partitions) != 9 {
			t.Fatalf("%s describe: %v\n%s", args[0], err, out)
		}
		for _, p := range d.Partitions {
			if stalled := p.BrokerID == 7; stalled != (p.Error != "") {
				t.Errorf("%s describe: partition %d-%d: error %q", args[0], p.BrokerID, p.Partition, p.Error)
			}
		}
		if n := s.requests.Load(); n != 1 {
			t.Errorf("%s describe sent %d requests to the stalled broker, want 1", args[0], n)
		}
		s.requests.Store(0)
	}
}

// query key exits 3 (not found) only when every broker of the topic answered: with one that did
// not, the message may be there, so it exits 4 (unavailable), as when no broker answers. A key
// found on the brokers that answered is printed (exit 0, the others warned about on stderr).
func TestQueryKeyWithAStalledBroker(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"qk": 1}, false)
	startStalledBroker(t, c.zk, 7, map[string]int{"qk": 1})
	c.mustRun("produce", "-t", "qk", "-m", "x", "--key", "here", "--partition", "0-0", "--quiet")

	if out, errs, code := c.run("--connect-timeout", "500ms", "query", "key", "qk", "absent"); code != ExitUnavailable {
		t.Fatalf("query key absent with a stalled broker: exit %d, want %d\n%s%s", code, ExitUnavailable, out, errs)
	}
	if out, errs, code := c.run("--connect-timeout", "500ms", "query", "key", "qk", "here", "--format", "text"); code != 0 || out != "x\n" || errs == "" {
		t.Fatalf("query key here with a stalled broker: exit %d\n%s%s", code, out, errs)
	}
}
