package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// Stopping after N messages (`metaq consume --group --count N`): the handler accepts N
// messages, then blocks until Close cancels its ctx and returns ctx.Err(). The messages it
// gave up on that way are not consumed: Close commits exactly N, in ordered and concurrent
// mode, and the group resumes at message N.
func TestHandlerGivingUpOnCloseIsNotCommitted(t *testing.T) {
	for _, concurrency := range []int{0, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", concurrency), func(t *testing.T) {
			cl := newCluster(t, map[string]int{"stop": 1}, 1)
			sendN(t, cl.producer(), "stop", "m", 10)
			const accept = 3
			var accepted, waiting atomic.Int64
			group := "g-stop"
			c := cl.consumer(group, "stop", "*", func(ctx context.Context, m *Message) error {
				if m.Offset < accept {
					accepted.Add(1)
					return nil
				}
				waiting.Add(1)
				<-ctx.Done()
				return ctx.Err()
			}, func(cfg *Config) {
				cfg.Consumer.Concurrency = concurrency
				cfg.Consumer.CommitInterval = time.Hour // only Close commits
			})
			zktest.Eventually(t, 10*time.Second, func() bool { return accepted.Load() == accept && waiting.Load() > 0 },
				"%d accepted (got %d), one waiting", accept, accepted.Load())
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			o := cl.committed(group, "stop")[Partition{BrokerID: 1, Partition: 0}]
			if o.Offset != accept {
				t.Fatalf("committed %+v after accepting offsets 0..%d", o, accept-1)
			}

			again := newCollector()
			cl.consumer(group, "stop", "*", again.handler)
			again.waitDistinct(t, 10-accept, 10*time.Second)
			if first := again.snapshot()[0]; first.Offset != accept {
				t.Fatalf("the group resumed at offset %d, want %d", first.Offset, accept)
			}
		})
	}
}
