package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/conf"
)

func newBrokerCommand(app *App) *cobra.Command {
	var (
		confPath    string
		localZK     bool
		localZKDir  string
		logLevel    string
		logFormat   string
		stopTimeout time.Duration
		cpuProfile  string
	)
	cmd := &cobra.Command{
		Use:   "broker -c <server.ini>",
		Short: "Run a broker (MetaQ's metaServer)",
		Long: `Run a broker configured by a MetaQ server.ini (see docs/configuration.md): it opens the store
in dataPath, listens on serverPort and registers itself and its topics in ZooKeeper.

SIGTERM or SIGINT (Ctrl-C) stops it gracefully, in MetaQ's order: unregister from ZooKeeper,
wait zk.zkSyncTimeMs, answer in-flight requests, flush and close the store (the abort marker is
removed, so the next start skips crash recovery). A second signal forces an immediate exit
(code 1; the next start runs crash recovery). A signal during start-up stops the broker as soon
as it is started; a second one forces the exit without waiting for the start to finish.

--local-zk (MetaQ's -l) also runs a standalone ZooKeeper as a child process, from Debian's
zookeeper package (scripts/zk.sh start installs it), on the port of zk.zkConnect, with its data
in --local-zk-dir. It is stopped after the broker, and dies with the broker.

Exit codes: 0 stopped gracefully, 1 failed to start / stop error / forced exit, 2 bad flags or
invalid server.ini.`,
		Example: `  metaq broker -c conf/server.ini
  metaq broker -c conf/server.ini --local-zk
  metaq broker -f conf/server.ini --log-level debug --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if confPath == "" {
				return usageErr("no configuration: metaq broker -c <server.ini> (sample: conf/server.ini)")
			}
			logger, err := newLogger(app.Stderr, logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg, err := conf.Load(confPath)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("invalid configuration %s:\n%v", confPath, err)}
			}
			if stopTimeout <= 0 {
				return usageErr("--stop-timeout must be > 0")
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return runBroker(cmd.Context(), app, cfg, logger, localZK, localZKDir, stopTimeout)
		},
	}
	cmd.AddCommand(newBrokerReloadCommand(app))  // cmd_admin.go
	cmd.AddCommand(newBrokerPromoteCommand(app)) // cmd_promote.go
	f := cmd.Flags()
	f.StringVarP(&confPath, "config", "c", "", "the broker's server.ini (required)")
	f.StringVarP(&confPath, "file", "f", "", "same as -c (MetaQ's flag)")
	f.BoolVarP(&localZK, "local-zk", "l", false, "also run a local ZooKeeper child process on zk.zkConnect's port (MetaQ's -l)")
	f.StringVar(&localZKDir, "local-zk-dir", "", "data and logs of --local-zk (default <dataPath>-zk)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "log format on stderr: text or json")
	f.DurationVar(&stopTimeout, "stop-timeout", 30*time.Second, "longest graceful stop before connections are cut")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (written at graceful stop)")
	return cmd
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("bad --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("bad --log-format %q: want text or json", format)
}

func runBroker(ctx context.Context, app *App, cfg *conf.Config, log *slog.Logger, localZK bool, localZKDir string, stopTimeout time.Duration) error {
	// Subscribe before starting anything, so that no signal is lost in between
	// (and a SIGHUP during start-up does not end the process).
	sigs, stopSigs := app.signals()
	defer stopSigs()
	hups, stopHups := subscribeSIGHUP() // cmd_admin.go
	defer stopHups()

	var lz *localZooKeeper
	if localZK {
		if !cfg.ZK.Enable {
			return usageErr("--local-zk: zk.zkEnable=false in %s, nothing would use the ZooKeeper", cfg.Path)
		}
		dir := localZKDir
		if dir == "" {
			dir = strings.TrimRight(cfg.System.DataPath, string(os.PathSeparator)) + "-zk"
		}
		var err error
		lz, err = startLocalZooKeeper(ctx, cfg.ZK.Connect, dir, log)
		if err != nil {
			return err
		}
		defer lz.Stop()
	}

	var prev *broker.Broker // the broker a restart in place resumes
restart:
	endStarting := watchStartSignals(app, sigs, log, lz)
	// A restart in place keeps the topic configuration in force (server.ini
	// as last reloaded, the online configuration; docs/configuration.md).
	b, err := broker.StartWith(cfg, broker.StartOptions{Logger: log, Resume: prev})
	early := endStarting() // a signal received during start-up, or nil
	if err != nil {
		log.Error("broker failed to start", "err", err)
		return silentExit{code: ExitFailure}
	}
	if early != nil {
		log.Info("stopping: "+sigName(early)+" received during start-up", "timeout", stopTimeout)
	}
	stopHTTP := startBrokerHTTP(b, log)
	stopReload := reloadOnSIGHUP(b, hups, log) // cmd_admin.go

	var zkDied <-chan struct{}
	if lz != nil {
		zkDied = lz.Done()
	}
	again := false
	for waiting := early == nil; waiting; {
		select {
		case s := <-sigs:
			log.Info("received "+sigName(s)+"; stopping (send it again to force exit)", "timeout", stopTimeout)
			waiting = false
		case <-ctx.Done():
			log.Info("stopping (send the signal again to force exit)", "timeout", stopTimeout)
			waiting = false
		case <-zkDied:
			log.Error("the local ZooKeeper exited; the broker keeps serving and retries the registration", "log", lz.LogFile())
			zkDied = nil
		case <-b.NeedsRestart():
			// Replication wrote a store reset marker (docs/replication.md):
			// stop and start again in place, same configuration.
			log.Warn("restarting the broker in place to reopen its store", "why", b.RestartReason())
			waiting, again = false, true
		}
	}

	stopHTTP()
	stopReload() // a SIGHUP while stopping waits in hups (applied after a restart in place)
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		stopped <- b.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		if again {
			prev = b
			goto restart
		}
		if err != nil {
			log.Error("broker stopped with errors", "err", err)
			return silentExit{code: ExitFailure}
		}
		return nil
	case s := <-sigs:
		log.Error("received " + sigName(s) + " again: forcing exit without a clean shutdown (the next start runs crash recovery)")
		if lz != nil {
			lz.Kill()
		}
		app.exit(ExitFailure)
		return silentExit{code: ExitFailure}
	}
}

// watchStartSignals handles SIGTERM/SIGINT while broker.Start runs (crash
// recovery can take long): the first is kept (end returns it: the broker
// stops as soon as it is started), a second forces the exit at once, as
// while serving. end stops watching; it is called before anything else
// reads sigs.
func watchStartSignals(app *App, sigs <-chan os.Signal, log *slog.Logger, lz *localZooKeeper) (end func() os.Signal) {
	started, done := make(chan struct{}), make(chan struct{})
	var first os.Signal
	go func() {
		defer close(done)
		select {
		case first = <-sigs:
		case <-started:
			return
		}
		log.Info("received " + sigName(first) + " during start-up; stopping once started (send it again to force exit)")
		select {
		case s := <-sigs:
			log.Error("received " + sigName(s) + " again: forcing exit during start-up (the next start runs crash recovery)")
			if lz != nil {
				lz.Kill()
			}
			app.exit(ExitFailure)
		case <-started:
		}
	}()
	return func() os.Signal {
		close(started)
		<-done
		return first
	}
}

func sigName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}

// startCPUProfile profiles the process until the returned stop is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
