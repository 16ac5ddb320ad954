package cli

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// pipelinedPuts sends windows of puts on one connection and returns the
// message ids acknowledged with 200, until the connection breaks or n puts
// were answered. stop, when closed, makes it stop after the current window.
func pipelinedPuts(addr string, n, window int, acked chan<- int64) error {
	defer close(acked)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
	w := bufio.NewWriter(nc)
	for sent := 0; sent < n; {
		k := min(window, n-sent)
		for i := 0; i < k; i++ {
			data := "acked-" + strconv.Itoa(sent+i)
			fmt.Fprintf(w, "put dur %d %d 0 %d\r\n%s", (sent+i)%4, len(data), sent+i, data)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for i := 0; i < k; i++ {
			_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			r, err := rr.Next()
			if err != nil {
				return err
			}
			if r.Code == 200 {
				f := strings.Fields(string(r.Body))
				id, _ := strconv.ParseInt(f[0], 10, 64)
				acked <- id
			}
		}
		sent += k
	}
	return nil
}

// syncReplicas=1 with real processes: a master and a slave, a producer
// pipelining puts; the master is killed with SIGKILL at a random moment
// while puts are in flight. Every put the master acknowledged is on the
// slave (query id), and the slave serves it.
func TestSyncReplicationSurvivesMasterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	mdir, sdir := t.TempDir(), t.TempDir()
	mini, maddr := writeINI(t, mdir, true, "", 0, "\n[replication]\nsyncReplicas=1\nreplicaTimeoutMs=10000\n")
	sini, saddr := writeINI(t, sdir, true, "", 0, "\n[slave]\nslaveId=0\n[replication]\nmasterAddr="+maddr+"\n")
	m := startBrokerProc(t, maddr, "-c", mini)
	startBrokerProc(t, saddr, "-c", sini)

	acked := make(chan int64, 1<<16)
	done := make(chan error, 1)
	go func() { done <- pipelinedPuts(maddr, 1<<30, 200, acked) }()
	var ids []int64
	target := 2000 + rand.IntN(3000)
	deadline := time.Now().Add(120 * time.Second)
	for len(ids) < target {
		select {
		case id, ok := <-acked:
			if !ok {
				t.Fatalf("the producer stopped after %d acks: %v\n%s", len(ids), <-done, m.stderr.String())
			}
			ids = append(ids, id)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("only %d acks in time", len(ids))
		}
	}
	m.signal(syscall.SIGKILL) // puts are in flight
	for id := range acked {
		ids = append(ids, id)
	}
	<-done
	m.wait(30 * time.Second)

	nc, err := net.DialTimeout("tcp", saddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rr := protocol.NewReplyReader(bufio.NewReader(nc), 1<<20)
	w := bufio.NewWriter(nc)
	for i, id := range ids {
		fmt.Fprintf(w, "query id %d %d\r\n", id, i)
		if i%500 == 499 || i == len(ids)-1 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			for j := i - i%500; j <= i; j++ {
				_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				r, err := rr.Next()
				if err != nil {
					t.Fatal(err)
				}
				if r.Kind != protocol.ReplyValue {
					t.Fatalf("acknowledged message %d (id %d) is not on the slave after the master was killed: %d %s",
						j, ids[j], r.Code, r.Body)
				}
			}
		}
	}
	t.Logf("%d acknowledged puts, all on the slave", len(ids))
	if _, err := os.Stat(filepath.Join(sdir, "data", "commitlog")); err != nil {
		t.Fatal(err)
	}
}
