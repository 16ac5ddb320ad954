package broker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// lockedBuf is a log sink the tests read while the broker writes it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// overlayBroker starts a ZooKeeper-mode broker serving "test" from its
// server.ini, then accepts "added" by a reload of server.ini and "flow" by
// the online configuration, and waits until both are registered, without
// using either (a used topic keeps its interned settings).
func overlayBroker(t *testing.T, zkAddr string, log *slog.Logger) (*conf.Config, *broker.Broker) {
	t.Helper()
	o := brokertest.Options{ZK: zkAddr, BrokerID: 1, Topics: map[string]int{"test": 1}, Dir: t.TempDir()}
	path := filepath.Join(o.Dir, "server.ini")
	if err := os.WriteFile(path, []byte(brokertest.INI(o)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.StartWith(cfg, broker.StartOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(brokertest.INI(o)+"\n[topic=added]\nnumPartitions=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadTopics(); err != nil {
		t.Fatal(err)
	}
	zc, write := onlineTopics(t, zkAddr)
	write("flow", `{"numPartitions":2}`)
	exists := func(p string) bool { ok, _ := zc.Exists(context.Background(), p); return ok }
	zktest.Eventually(t, 20*time.Second, func() bool {
		return exists(zc.Paths().TopicPubNode("flow", 1, -1)) && exists(zc.Paths().TopicPubNode("added", 1, -1))
	}, "flow and added registered")
	return cfg, b
}

// Stop unregisters from ZooKeeper, then keeps serving for zk.zkSyncTimeMs
// and the drain (docs/configuration.md, "Reloading"). The topic
// configuration in force dropped back to the server.ini loaded at start as
// Stop began, so in that window a topic accepted only by a reload or only
// online, and not used yet, was refused (500). It stays in force until the
// broker stopped serving.
func TestTopicOverlaysServeUntilStopped(t *testing.T) {
	zkAddr := zktest.Server(t)
	var logs lockedBuf
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, b := overlayBroker(t, zkAddr, log)
	c := brokertest.Dial(t, b.Server.Addr().String())
	defer c.Close()

	cfg.ZK.SyncTime = time.Hour // hold Stop in the window; the test ends it by cancelling
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(ctx) }()
	zktest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "unregistered from ZooKeeper; waiting before closing")
	}, "the broker unregistered and waiting zk.zkSyncTimeMs")
	codeAdded, codeFlow := putCode(c, "added", 2), putCode(c, "flow", 1)
	cancel()
	if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("stop: %v", err)
	}
	if codeAdded != 200 || codeFlow != 200 {
		t.Fatalf("while stopping, put to added (reloaded) answered %d and to flow (online) %d, want 200 for both", codeAdded, codeFlow)
	}
}

// restartInPlace does what `metaq broker` does when replication asks for a
// restart (docs/replication.md, "Why truncation restarts the broker"): stop
// the broker, start it again in the same process with the same Config,
// resuming it (tools/cli/cmd_broker.go).
func restartInPlace(t *testing.T, cfg *conf.Config, b *broker.Broker, log *slog.Logger) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b2, err := broker.StartWith(cfg, broker.StartOptions{Logger: log, Resume: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b2.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return b2
}

// The restart in place replication asks for started again from the
// server.ini loaded at process start: a topic a reload had added was
// refused (500) until the next SIGHUP, and one accepted only online until
// the watch had read ZooKeeper again. The configuration in force
// (server.ini as last reloaded, the online configuration) carries over, and
// both keep changing afterwards.
func TestTopicOverlaysSurviveRestartInPlace(t *testing.T) {
	zkAddr := zktest.Server(t)
	log := slog.New(slog.NewTextHandler(testLogSink{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, b := overlayBroker(t, zkAddr, log)
	b = restartInPlace(t, cfg, b, log)
	c := brokertest.Dial(t, b.Server.Addr().String())
	defer c.Close()
	if code := putCode(c, "added", 2); code != 200 {
		t.Fatalf("after the restart, put to added partition 2 (a reloaded section, 3 partitions) answered %d, want 200", code)
	}
	if code := putCode(c, "flow", 1); code != 200 {
		t.Fatalf("after the restart, put to flow partition 1 (online, 2 partitions) answered %d, want 200", code)
	}
	// The online configuration is still followed, and a reload still applies.
	_, write := onlineTopics(t, zkAddr)
	write("flow", `{"numPartitions":1}`)
	zktest.Eventually(t, 20*time.Second, func() bool { return putCode(c, "flow", 1) == 500 && putCode(c, "flow", 0) == 200 },
		"flow back to 1 partition after the restart")
	ini, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Path, []byte(strings.Replace(string(ini), "[topic=added]\nnumPartitions=3", "[topic=added]\nnumPartitions=1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadTopics(); err != nil {
		t.Fatal(err)
	}
	if code := putCode(c, "added", 2); code != 500 {
		t.Fatalf("after a reload to 1 partition, put to added partition 2 answered %d, want 500", code)
	}
}

// testLogSink writes a broker's log to the test's.
type testLogSink struct{ t *testing.T }

func (w testLogSink) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
