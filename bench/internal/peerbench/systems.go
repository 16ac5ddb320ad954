package peerbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
)

// Env says where the binaries are and where data directories go.
type Env struct {
	BinDir   string // bench/bin: nats-server, nsqd
	RedisBin string // redis-server; "" = look it up on PATH
	MetaqBin string // ../bin/metaq; "" or missing = metaq is skipped
	TmpDir   string // parent of the per-run data directories ("" = os.TempDir())
}

func (e *Env) bin(name string) string { return filepath.Join(e.BinDir, name) }

func (e *Env) redisServer() (string, error) {
	if e.RedisBin != "" {
		return e.RedisBin, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found (apt-get install -y redis-server): %w", err)
	}
	return p, nil
}

func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "redis-server"
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "v=") {
			return "redis " + strings.TrimPrefix(f, "v=")
		}
	}
	return strings.TrimSpace(string(out))
}

// System is one broker configuration: a column of the comparison table.
type System struct {
	Name      string
	Workloads []string // the workloads this configuration is measured on
	// start runs the server for one workload in dir; it returns a
	// description of the configuration for the result's notes.
	start   func(ctx context.Context, env *Env, dir, workload string) (*proc.Server, string, error)
	connect func(ctx context.Context, srv *proc.Server, window int) (Driver, error)
	client  string // client library, for the notes
	// caveats are appended to the notes of a workload's result.
	caveats map[string]string
}

const (
	wPubAsync   = benchkit.WorkloadPublishAsync
	wPubDurable = benchkit.WorkloadPublishDurable
	wLatency    = benchkit.WorkloadLatency
	wConsume    = benchkit.WorkloadConsumeBacklog
	wE2E        = benchkit.WorkloadE2E
	wTopics     = benchkit.WorkloadTopics1000
	wParts      = benchkit.WorkloadPartitions10000
	wBatch      = benchkit.WorkloadPublishBatch
	wBatchDur   = benchkit.WorkloadPublishBatchDurable
)

// Systems are the configurations of shared/PEERS.md, plus metaq. Durable
// configurations run publish-durable (and the latency workloads); their
// async-publish number is the same workload, so it is not repeated.
var Systems = []System{
	{Name: "metaq", Workloads: []string{wPubAsync, wPubDurable, wLatency, wConsume, wE2E, wTopics, wParts, wBatch, wBatchDur}},
	{Name: "jetstream", Workloads: []string{wPubAsync, wLatency, wConsume, wE2E, wTopics},
		start: func(ctx context.Context, env *Env, dir, _ string) (*proc.Server, string, error) {
			return startNATS(ctx, env, dir, false)
		}, connect: connectJetStream, client: "nats.go jetstream"},
	{Name: "jetstream-sync", Workloads: []string{wPubDurable, wLatency, wE2E},
		start: func(ctx context.Context, env *Env, dir, _ string) (*proc.Server, string, error) {
			return startNATS(ctx, env, dir, true)
		}, connect: connectJetStream, client: "nats.go jetstream"},
	{Name: "nsq", Workloads: []string{wPubAsync, wLatency, wConsume, wE2E, wTopics, wBatch},
		start: func(ctx context.Context, env *Env, dir, _ string) (*proc.Server, string, error) {
			return startNSQ(ctx, env, dir, -1, 0)
		}, connect: connectNSQ, client: "go-nsq", caveats: map[string]string{
			wPubAsync: "no channel, so nsqd keeps the first 10,000 messages of the topic in memory and the rest go to its disk queue",
			wTopics:   "no channels: each of the 1,000 topics stays within its 10,000 in-memory messages, while the 1-topic phase spills to the disk queue, so the ratio compares memory with disk",
		}},
	{Name: "nsq-disk", Workloads: []string{wPubAsync, wPubDurable, wTopics},
		start: func(ctx context.Context, env *Env, dir, wl string) (*proc.Server, string, error) {
			if wl == wPubDurable {
				return startNSQ(ctx, env, dir, 0, 1)
			}
			return startNSQ(ctx, env, dir, 0, 0)
		}, connect: connectNSQ, client: "go-nsq"},
	{Name: "redis", Workloads: []string{wPubAsync, wLatency, wConsume, wE2E, wTopics, wBatch},
		start: func(ctx context.Context, env *Env, dir, _ string) (*proc.Server, string, error) {
			return startRedis(ctx, env, dir, false)
		}, connect: connectRedis, client: "rueidis"},
	{Name: "redis-aof", Workloads: []string{wPubDurable, wLatency, wE2E, wTopics, wBatchDur},
		start: func(ctx context.Context, env *Env, dir, _ string) (*proc.Server, string, error) {
			return startRedis(ctx, env, dir, true)
		}, connect: connectRedis, client: "rueidis"},
}

// Lookup returns the system named name.
func Lookup(name string) (System, bool) {
	for _, s := range Systems {
		if s.Name == name {
			return s, true
		}
	}
	return System{}, false
}

// Runs reports whether s is measured on workload.
func (s System) Runs(workload string) bool {
	for _, w := range s.Workloads {
		if w == workload {
			return true
		}
	}
	return false
}

func mkDataDir(env *Env, sys, wl string) (string, error) {
	return os.MkdirTemp(env.TmpDir, "peerbench-"+sys+"-"+wl+"-")
}
