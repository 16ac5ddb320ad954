package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
)

// TestBrokerProcessStoreDamage is issue 11.2 and 11.3 through the real
// process (the store-level tests with the same surgery are in broker/store,
// damage_test.go): a torn active segment after kill -9 with its preallocated
// successor present must not stop the broker from starting; index units
// overwritten after a clean stop must not send a consumer backwards or skip
// messages.
func TestBrokerProcessStoreDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped in -short mode")
	}
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, false, "", 0, "") // async flush, 1 MiB segments, 4,096 units per index file
	data := filepath.Join(dir, "data")
	bodies := map[int64]string{}
	put := func(n int) {
		t.Helper()
		prod := directProducer(t, addr)
		defer prod.Close()
		for range n {
			body := fmt.Sprintf("m-%d-%s", len(bodies), strings.Repeat("x", 150+rand.IntN(100)))
			r, err := prod.SendToPartition(context.Background(), &client.Message{Topic: "dur", Body: []byte(body)},
				client.Partition{BrokerID: -1, Partition: 0})
			if err != nil {
				t.Fatal(err)
			}
			bodies[r.Offset] = body
		}
	}
	fetch := func(offset int64) *client.FetchResult {
		t.Helper()
		adm, err := client.NewAdmin(client.Config{DialTimeout: 5 * time.Second, Logger: quietLog}) // one per call: brokers restart
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		res, err := adm.FetchWith(context.Background(), addr, client.FetchRequest{Topic: "dur", Group: "g", Partition: 0, Offset: offset, MaxBytes: 4096})
		if err != nil {
			t.Fatalf("get at %d: %v", offset, err)
		}
		return res
	}
	mustFetch := func(offset int64) {
		t.Helper()
		res := fetch(offset)
		if res.Moved || len(res.Messages) == 0 || res.Messages[0].Offset != offset || string(res.Messages[0].Body) != bodies[offset] {
			t.Fatalf("get at %d: moved=%v next=%d %d messages", offset, res.Moved, res.NextOffset, len(res.Messages))
		}
	}

	// 11.2: kill -9 with the next segment preallocated, then tear the last record.
	p := startBrokerProc(t, addr, "-c", ini)
	put(3000)
	next := filepath.Join(data, "commitlog", fmt.Sprintf("%020d", 1<<20))
	waitFor(t, 20*time.Second, func() bool { _, err := os.Stat(next); return err == nil }, "next segment preallocated")
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	seg0 := filepath.Join(data, "commitlog", fmt.Sprintf("%020d", 0))
	b, err := os.ReadFile(seg0)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	if err := os.Truncate(seg0, int64(end-60)); err != nil { // the middle of the last record
		t.Fatal(err)
	}
	p = startBrokerProc(t, addr, "-c", ini) // used to exit 1: "commit log has a gap"
	if out := p.stderr.String(); !strings.Contains(out, "torn tail") || !strings.Contains(out, "truncated the commit log") {
		t.Fatalf("torn tail not logged:\n%s", out)
	}
	delete(bodies, 2999) // the torn record
	for _, q := range []int64{0, 1500, 2998} {
		mustFetch(q)
	}
	put(3000) // continues at 2999
	if _, ok := bodies[5998]; !ok {
		t.Fatalf("offsets after the cut: %d messages", len(bodies))
	}

	// 11.3: clean stop, overwrite 10 index units, start, read across them.
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	ix := filepath.Join(data, "index", "dur", "0", fmt.Sprintf("%020d", 0))
	f, err := os.OpenFile(ix, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 160)
	for i := range junk {
		junk[i] = byte(rand.IntN(256))
	}
	junk[0] |= 0x80 // the first points below the log: used to answer 301 with 0
	if _, err := f.WriteAt(junk, 1000*16); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p = startBrokerProc(t, addr, "-c", ini)
	for q := int64(995); q < 1015; q++ {
		mustFetch(q)
	}
	if out := p.stderr.String(); !strings.Contains(out, "rebuilt them from the commit log") {
		t.Fatalf("index repair not logged:\n%s", out)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
