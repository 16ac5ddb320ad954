package broker_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/conf"
)

// TestStartWithFailureLeavesNothingRunning: a start that fails late (here
// on a [security] users file that does not exist, after the store, the
// trace writer, the delay service and the replication node are open) undoes everything it
// opened: no goroutine is left behind and the data directory opens again.
func TestStartWithFailureLeavesNothingRunning(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	ini := brokertest.INI(brokertest.Options{Dir: dir, ExtraINI: "\n[security]\nusersFile=" + missing + "\n"})
	path := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := broker.StartWith(cfg, broker.StartOptions{}); err == nil {
		t.Fatalf("started with a missing users file: %v", b.Server.Addr())
	} else {
		t.Log(err)
	}
}
