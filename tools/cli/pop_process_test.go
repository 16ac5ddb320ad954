package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
)

// popAll pops until a pop comes back empty; it returns body → handle.
func popOnce(t *testing.T, c *brokertest.Client, group string, max int, invMs, waitMs int64) (map[string]string, error) {
	c.Send(fmt.Sprintf("pop dur %s %d %d %d 1\r\n", group, max, invMs, waitMs))
	r, err := c.TryReply(time.Duration(waitMs)*time.Millisecond + 30*time.Second)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if r.Kind != protocol.ReplyValue {
		if r.Code == 404 {
			return out, nil
		}
		return nil, fmt.Errorf("pop: %d %s", r.Code, r.Body)
	}
	err = protocol.PopValue(r.Body, func(attempt int, rec []byte) error {
		m, _, err := protocol.DecodeRecord(rec, 0)
		if err != nil {
			return err
		}
		out[string(m.Data)] = fmt.Sprintf("dur:%d:%d:%d", m.Partition, m.QueueOffset, attempt)
		return nil
	})
	return out, err
}

// TestKill9PopInFlight: under sync flush, members pop and acknowledge
// (batched acks) while others hold messages without acknowledging; the
// broker process is killed with SIGKILL in the middle. After the restart
// every message whose ack was answered 200 is never delivered again, and
// every other message (in flight, never delivered, or whose ack had no
// answer yet) is delivered — except that an unanswered ack may also have
// taken effect (docs/push.md, "State and recovery").
func TestKill9PopInFlight(t *testing.T) {
	n := 4000
	if testing.Short() {
		n = 1000
	}
	dir := t.TempDir()
	ini, addr := writeINI(t, dir, true, "", 0, "")
	p := startBrokerProc(t, addr, "-c", ini)
	prod := directProducer(t, addr)
	for i := 0; i < n; i++ {
		if _, err := prod.SendToPartition(context.Background(), &client.Message{Topic: "dur", Body: []byte(fmt.Sprintf("p-%d", i))},
			client.Partition{BrokerID: -1, Partition: i % 4}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()

	var mu sync.Mutex
	acked := map[string]bool{}   // ack answered 200
	unsure := map[string]bool{}  // ack sent, no answer
	holding := map[string]bool{} // delivered, never acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := brokertest.Dial(t, addr)
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := popOnce(t, c, "g", 8, 600000, 100)
				if err != nil {
					return // the broker died
				}
				var hs []string
				var bodies []string
				mu.Lock()
				for body, h := range got {
					if w == 0 && len(holding) < 200 {
						holding[body] = true
						continue
					}
					unsure[body] = true
					hs = append(hs, h)
					bodies = append(bodies, body)
				}
				mu.Unlock()
				if len(hs) == 0 {
					continue
				}
				time.Sleep(2 * time.Millisecond) // "handling": the kill lands while messages are in flight
				data := strings.Join(hs, "\n")
				c.Send(fmt.Sprintf("ack g %d 2\r\n%s", len(data), data))
				r, err := c.TryReply(30 * time.Second)
				if err != nil {
					return
				}
				if r.Code != 200 {
					t.Errorf("ack: %d %s", r.Code, r.Body)
					return
				}
				mu.Lock()
				for _, b := range bodies {
					delete(unsure, b)
					acked[b] = true
				}
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n/8 && len(holding) >= 200
	}, "an eighth acknowledged")
	time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("at the kill: %d acknowledged, %d acks unanswered, %d held", len(acked), len(unsure), len(holding))
	mu.Unlock()

	startBrokerProc(t, addr, "-c", ini)
	c := brokertest.Dial(t, addr)
	defer c.Close()
	again := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got, err := popOnce(t, c, "g", 1024, 600000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for body := range got {
			if again[body] {
				t.Fatalf("%s delivered twice after the restart", body)
			}
			again[body] = true
		}
		if len(got) == 0 && len(again)+len(acked)+len(unsure) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d delivered, %d acknowledged before, %d unsure, of %d", len(again), len(acked), len(unsure), n)
		}
	}
	for body := range again {
		if acked[body] {
			t.Fatalf("%s was acknowledged (200) before the kill and was delivered again", body)
		}
	}
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("p-%d", i)
		if !acked[body] && !unsure[body] && !again[body] {
			t.Fatalf("%s never acknowledged and not delivered after the restart", body)
		}
	}
	for body := range holding {
		if !again[body] {
			t.Fatalf("held (unacknowledged) %s not delivered again", body)
		}
	}
	t.Logf("after the restart: %d delivered again (%d of the unanswered acks took effect)", len(again), len(unsure)-countIn(unsure, again))
}

func countIn(a, b map[string]bool) int {
	n := 0
	for k := range a {
		if b[k] {
			n++
		}
	}
	return n
}
