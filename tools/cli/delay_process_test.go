package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/client"
)

// TestKill9PendingDelayed: 10,000 delayed messages acknowledged under sync
// flush (deliverAt and delay levels), the broker process killed with
// SIGKILL while they are pending or half-way through delivery: after the
// restart every one of them is delivered (some may be delivered twice,
// none may be missing).
func TestKill9PendingDelayed(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, true, "", 0, "messageDelayLevel=1s 2s 3s 4s 5s\n")
	p := startBrokerProc(t, addr, "-c", ini)
	prod := directProducer(t, addr)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				m := &client.Message{Topic: "dur", Body: []byte(fmt.Sprintf("d-%d", i))}
				if i%2 == 0 {
					m.DeliverAt = start.Add(3*time.Second + time.Duration(i%4000)*time.Millisecond)
				} else {
					m.DelayLevel = 1 + i%5
				}
				r, err := prod.SendToPartition(context.Background(), m, client.Partition{BrokerID: -1, Partition: i % 4})
				if err != nil {
					errs <- err
					return
				}
				if r.Offset != -1 {
					errs <- fmt.Errorf("delayed put answered offset %d, want -1", r.Offset)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	prod.Close()
	t.Logf("%d delayed puts acknowledged in %v", n, time.Since(start))
	time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)

	p = startBrokerProc(t, addr, "-c", ini)
	adm, err := client.NewAdmin(client.Config{DialTimeout: 5 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	got := map[string]int{}
	var offs [4]int64
	total := 0
	waitFor(t, 3*time.Minute, func() bool {
		for part := range 4 {
			res, err := adm.FetchWith(ctx, addr, client.FetchRequest{Topic: "dur", Group: "check", Partition: part,
				Offset: offs[part], MaxBytes: 1 << 20, MaxWait: 200 * time.Millisecond})
			if err != nil {
				t.Logf("fetch: %v", err)
				continue
			}
			for _, m := range res.Messages {
				got[string(m.Body)]++
				total++
			}
			offs[part] = res.NextOffset
		}
		return len(got) == n
	}, "every delayed message delivered after kill -9")
	t.Logf("%d delayed messages delivered after kill -9 (%d deliveries: %d twice)", len(got), total, total-len(got))
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
