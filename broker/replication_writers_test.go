package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/ha"
)

// A promotion whose services that write fail to start (docs/replication.md,
// "What a promoted slave starts") is undone: what was started is stopped
// again, the node stays a slave that refuses puts, and a later promotion
// starts everything. Each failing step is injected in turn: rebuilding the
// transaction table (the delay timer was already started) and starting the
// delivery service (the delay timer and the transaction table were).
func TestPromotionUndoesWritersOnFailure(t *testing.T) {
	for _, step := range []string{"tx", "pop"} {
		t.Run(step, func(t *testing.T) {
			// A slave of a master that does not exist: the follower keeps
			// retrying; nothing writes to its log.
			b := brokertest.RunBroker(t, brokertest.Options{Sync: true,
				ExtraINI: "\n[slave]\nslaveId=0\n[replication]\nmasterAddr=127.0.0.1:1\n"})
			if d, tx, p := broker.Writers(b.Broker); d || tx || p {
				t.Fatalf("a slave runs services that write: delay %v, tx %v, pop %v", d, tx, p)
			}
			injected := errors.New("injected " + step + " failure")
			broker.SetWritersFault(b.Broker, func(s string) error {
				if s == step {
					return injected
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := b.HA.Promote(ctx, 2); !errors.Is(err, injected) {
				t.Fatalf("Promote with a failing %s step: %v, want the injected error", step, err)
			}
			if d, tx, p := broker.Writers(b.Broker); d || tx || p {
				t.Fatalf("after the failed promotion: delay %v, tx %v, pop %v still running", d, tx, p)
			}
			if r := b.HA.Role(); r != ha.RoleSlave {
				t.Fatalf("role after the failed promotion: %v", r)
			}
			c := b.Dial()
			defer c.Close()
			c.Send("put test 0 1 0 1\r\nx")
			if r := c.Reply(); r.Code != 403 {
				t.Fatalf("put after the failed promotion: %d %s, want 403", r.Code, r.Body)
			}

			broker.SetWritersFault(b.Broker, nil)
			if err := b.HA.Promote(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if d, tx, p := broker.Writers(b.Broker); !d || !tx || !p {
				t.Fatalf("after the promotion: delay %v, tx %v, pop %v", d, tx, p)
			}
			c.Send("put test 0 1 0 2\r\ny")
			if r := c.Reply(); r.Code != 200 {
				t.Fatalf("put after the promotion: %d %s", r.Code, r.Body)
			}
		})
	}
}
