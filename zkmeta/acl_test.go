package zkmeta_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// TestDigestACL: with Config.Auth the nodes a client creates (and their
// parents) carry a digest ACL: another client without the digest, or with
// a wrong one, can read but not change or delete them; a client with the
// digest can — from its session's first request on.
func TestDigestACL(t *testing.T) {
	addr := zktest.Server(t)
	withAuth := func(a string) opt { return func(c *zkmeta.Config) { c.Auth = a } }
	owner, _ := connect(t, addr, withAuth("metaq:s3cret"))
	// zktest's cleanup has no digest: remove metaq's nodes with the owner
	// (cleanups run last-in first-out, so before owner closes).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := owner.DeleteTree(ctx, owner.Paths().Root()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx := ctxT(t, 30*time.Second)
	p := owner.Paths().Offset("billing", "orders", zkmeta.Partition{BrokerID: 0, Partition: 0})
	if err := owner.Put(ctx, p, []byte("1-10")); err != nil {
		t.Fatal(err)
	}
	if err := owner.CreateEphemeral(ctx, owner.Paths().BrokerMaster(7), []byte("meta://h:1")); err != nil {
		t.Fatal(err)
	}

	for name, c := range map[string]*zkmeta.Client{
		"no digest":    first(connect(t, addr)),
		"wrong digest": first(connect(t, addr, withAuth("metaq:guess"))),
	} {
		data, _, err := c.Get(ctx, p)
		if err != nil || string(data) != "1-10" {
			t.Fatalf("%s: read %q %v", name, data, err)
		}
		if err := c.Set(ctx, p, []byte("0-0")); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("%s: rewrote an offset: %v", name, err)
		}
		if err := c.Delete(ctx, owner.Paths().BrokerMaster(7)); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("%s: deleted a broker's node: %v", name, err)
		}
		if err := c.Put(ctx, owner.Paths().Offset("billing", "orders", zkmeta.Partition{BrokerID: 0, Partition: 1}), []byte("x")); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("%s: created a node under metaq's: %v", name, err)
		}
	}
	// Another metaq client with the digest may write, at once.
	other, _ := connect(t, addr, withAuth("metaq:s3cret"))
	if err := other.Set(ctx, p, []byte("2-20")); err != nil {
		t.Fatal(err)
	}
	acl, _, err := other.Conn().GetACL(other.FullPath(p))
	if err != nil || len(acl) != 2 || acl[0].Scheme != "digest" || acl[1].Perms != zk.PermRead {
		t.Fatalf("ACL %+v %v", acl, err)
	}
}

func first[A, B any](a A, _ B) A { return a }
