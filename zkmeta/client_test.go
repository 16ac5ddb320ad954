package zkmeta_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func TestClientHelpers(t *testing.T) {
	zkAddr := zktest.Server(t)
	a, _ := connect(t, zkAddr)
	b, _ := connect(t, zkAddr)
	ctx := ctxT(t, 20*time.Second)

	must(t, a.EnsurePath(ctx, "/x/y/z"))
	must(t, a.EnsurePath(ctx, "/x/y/z")) // exists: fine
	must(t, a.CreatePersistent(ctx, "/x/p/q", []byte("v")))
	if err := a.CreatePersistent(ctx, "/x/p/q", []byte("w")); !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("CreatePersistent twice = %v", err)
	}
	if d, st, err := a.Get(ctx, "/x/p/q"); err != nil || string(d) != "v" || st.EphemeralOwner != 0 {
		t.Fatalf("Get = %q %+v %v", d, st, err)
	}
	if _, _, err := a.Get(ctx, "/x/none"); !errors.Is(err, zkmeta.ErrNoNode) {
		t.Fatalf("Get(missing) = %v", err)
	}
	if err := a.Set(ctx, "/x/none", nil); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("Set(missing) = %v", err)
	}

	must(t, a.CreateEphemeral(ctx, "/x/e/1", []byte("a")))
	must(t, a.CreateEphemeral(ctx, "/x/e/1", []byte("a2"))) // ours: data updated
	wantEphemeral(t, a, "/x/e/1", "a2")
	if err := b.CreateEphemeral(ctx, "/x/e/1", []byte("b")); !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("CreateEphemeral over another session's node = %v", err)
	}
	must(t, b.CreateEphemeral(ctx, "/x/e/0", nil))
	kids, err := a.Children(ctx, "/x/e")
	if err != nil || !reflect.DeepEqual(kids, []string{"0", "1"}) {
		t.Fatalf("Children = %v %v", kids, err)
	}
	if ok, err := a.Exists(ctx, "/x/e/0"); !ok || err != nil {
		t.Fatalf("Exists = %v %v", ok, err)
	}
	b.Close() // its ephemeral node goes with the session
	if ok, err := a.Exists(ctx, "/x/e/0"); ok || err != nil {
		t.Fatalf("Exists after the owner closed = %v %v", ok, err)
	}
	must(t, a.Delete(ctx, "/x/none")) // missing: fine
	must(t, a.DeleteTree(ctx, "/x"))
	if ok, _ := a.Exists(ctx, "/x"); ok {
		t.Fatal("/x survived DeleteTree")
	}
	// The cache of known parents must not hide that they were deleted.
	must(t, a.CreateEphemeral(ctx, "/x/e/1", []byte("again")))
	must(t, a.Put(ctx, "/x/y/z/w", []byte("1")))
	must(t, a.Put(ctx, "/x/y/z/w", []byte("2")))
	if d, _, _ := a.Get(ctx, "/x/y/z/w"); string(d) != "2" {
		t.Fatalf("Put = %q", d)
	}

	n, err := a.Ephemeral("/x/managed", []byte("1"))
	must(t, err)
	if _, err := a.Ephemeral("/x/managed", nil); err == nil {
		t.Fatal("registering a path twice: no error")
	}
	if _, err := a.Ephemeral("relative", nil); err == nil {
		t.Fatal("relative path accepted")
	}
	must(t, n.Wait(ctx))
	must(t, n.Set(ctx, []byte("2")))
	wantEphemeral(t, a, "/x/managed", "2")
	if string(n.Data()) != "2" || n.Path() != "/x/managed" || !n.Registered() {
		t.Fatalf("node state %q %q %v", n.Data(), n.Path(), n.Registered())
	}
	// Deleted behind our back (an operator with zkCli): back after the next session event.
	must(t, a.Delete(ctx, "/x/managed"))
	zktest.ExpireSession(t, a)
	zktest.Eventually(t, 5*time.Second, func() bool {
		_, st, err := a.Conn().Get(a.FullPath("/x/managed"))
		return err == nil && st.EphemeralOwner == a.SessionID()
	}, "managed node not re-created")
	must(t, n.Remove(ctx))
	wantAbsent(t, a, "/x/managed")
	if err := n.Wait(ctx); !errors.Is(err, zkmeta.ErrRemoved) {
		t.Fatalf("Wait after Remove = %v", err)
	}
	if a.SessionTimeout() != testSession && a.SessionTimeout() < 2*time.Second {
		t.Fatalf("SessionTimeout = %s", a.SessionTimeout())
	}
}
