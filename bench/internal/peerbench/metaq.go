package peerbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metaqgo/metaq/bench/internal/proc"
	"github.com/metaqgo/metaq/benchkit"
)

// MetaqAvailable reports whether the metaq binary exists.
func (e *Env) MetaqAvailable() bool {
	if e.MetaqBin == "" {
		return false
	}
	st, err := os.Stat(e.MetaqBin)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// metaqINI is the broker configuration for one workload: standalone (no
// ZooKeeper), loopback only, no dashboard listener, a fresh dataPath; sync flush (group commit) for
// publish-durable, MetaQ's default async flush otherwise. Topics used by
// `metaq bench` are declared explicitly: "bench"; "bench-0".."bench-(N-1)"
// for topics-1000; "bench-p" with N partitions for partitions-10000.
func metaqINI(cfg Config, dir string, port int, workload string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[system]\nbrokerId=0\nhostName=127.0.0.1\nbindHost=127.0.0.1\nserverPort=%d\ndashboardHttpPort=0\nnumPartitions=1\ndataPath=%s\n",
		port, filepath.Join(dir, "data"))
	if workload == wPubDurable || workload == wBatchDur {
		b.WriteString("unflushThreshold=0\n")
	}
	b.WriteString("\n[zookeeper]\nzk.zkEnable=false\n\n[topic=bench]\nnumPartitions=1\n")
	switch workload {
	case wTopics:
		for i := range cfg.Topics {
			fmt.Fprintf(&b, "\n[topic=bench-%d]\nnumPartitions=1\n", i)
		}
	case wParts:
		fmt.Fprintf(&b, "\n[topic=bench-p]\nnumPartitions=%d\n", cfg.Partitions)
	}
	return b.String()
}

// MetaqBenchArgs is the command line peerbench gives `metaq bench`; every
// flag is always passed, and a workload ignores those it does not use.
func MetaqBenchArgs(cfg Config, workload, server string, serverPID int) []string {
	return []string{"bench", workload, "--json",
		"--server", server,
		"--server-pid", strconv.Itoa(serverPID),
		"--topic", "bench",
		"--msg-size", strconv.Itoa(cfg.MsgSize),
		"--conns", "1",
		"--window", strconv.Itoa(cfg.Window),
		"--duration", cfg.Duration.String(),
		"--pairs", strconv.Itoa(max(cfg.Pairs, 1)),
		"--count", strconv.FormatInt(cfg.Count, 10),
		"--rate", strconv.FormatFloat(cfg.Rate, 'f', -1, 64),
		"--topics", strconv.Itoa(cfg.Topics),
		"--partitions", strconv.Itoa(cfg.Partitions),
		"--batch", strconv.Itoa(cfg.Batch),
		"--batch-inflight", strconv.Itoa(cfg.BatchInflight),
	}
}

func runMetaq(ctx context.Context, cfg Config, dir, workload string) benchkit.Result {
	res := benchkit.Result{System: "metaq", Workload: workload, MsgSize: cfg.MsgSize}
	fail := func(err error) benchkit.Result { res.Error = err.Error(); return res }
	if !cfg.MetaqAvailable() {
		return fail(fmt.Errorf("metaq binary %q not found", cfg.MetaqBin))
	}
	port, err := proc.FreePort()
	if err != nil {
		return fail(err)
	}
	ini := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(ini, []byte(metaqINI(cfg, dir, port, workload)), 0o644); err != nil {
		return fail(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv, err := proc.Start(ctx, "metaq-broker", dir, addr, cfg.MetaqBin, "broker", "-c", ini)
	if err != nil {
		return fail(err)
	}
	defer srv.Stop()
	cfg.logf("metaq %s: broker on %s (pid %d)", workload, addr, srv.PID())

	args := MetaqBenchArgs(cfg, workload, addr, srv.PID())
	limit := 3*cfg.Duration + 15*time.Minute
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(cctx, cfg.MetaqBin, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	meter, merr := benchkit.StartCPUMeter(srv.PID())
	probe := startStallProbe(workload)
	runErr := cmd.Run()
	var stall *benchkit.Histogram
	if probe != nil {
		stall = probe.Stop()
	}
	var cpu time.Duration
	if merr == nil {
		cpu, _ = meter.Elapsed()
	}
	rs, perr := benchkit.ReadResults(&out)
	var got *benchkit.Result
	for i := range rs {
		if rs[i].Workload == workload {
			got = &rs[i]
		}
	}
	if got == nil {
		msg := fmt.Sprintf("`metaq %s` printed no %s result", strings.Join(args, " "), workload)
		if runErr != nil {
			msg += ": " + runErr.Error()
		}
		if perr != nil {
			msg += ": " + perr.Error()
		}
		return fail(fmt.Errorf("%s | broker log: %s", msg, srv.LogTail(5)))
	}
	r := *got
	r.System = "metaq"
	if stall != nil {
		r.SetStall(stall)
	}
	if r.MsgSize == 0 {
		r.MsgSize = cfg.MsgSize
	}
	if r.ServerCPUusPerMsg == 0 && r.Msgs > 0 && r.Error == "" && merr == nil {
		r.SetServerCPU(cpu, r.Msgs)
		r.Notes = strings.TrimPrefix(r.Notes+"; server CPU measured over the whole client run by peerbench", "; ")
	}
	if runErr != nil && r.Error == "" {
		r.Error = "metaq bench: " + runErr.Error()
	}
	return r
}
