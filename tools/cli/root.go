// Package cli implements the `metaq` command: the broker process, producing and consuming from
// a terminal, and the administration commands (topics, brokers, groups, offsets, stats, query).
// tools/metaq/main.go only calls Main.
//
// Adding a subcommand from another package or file: call AddCommand (e.g. from an init
// function in a file of this package, or from main before Main) with a constructor that receives
// the App (streams, global flags, ZooKeeper session, client.Admin):
//
//	func init() { cli.AddCommand(newBenchCommand) }
//	func newBenchCommand(app *cli.App) *cobra.Command { … }
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/broker"
)

var (
	extraMu       sync.Mutex
	extraCommands []func(*App) *cobra.Command
)

// AddCommand registers a subcommand constructor; every root command built afterwards
// (NewRootCommand, Main, Run) includes it. Safe to call from init functions.
func AddCommand(f func(*App) *cobra.Command) {
	extraMu.Lock()
	defer extraMu.Unlock()
	extraCommands = append(extraCommands, f)
}

// Version is the version the CLI reports (the broker's).
func Version() string { return broker.Version }

// NewRootCommand builds the `metaq` command tree on app.
func NewRootCommand(app *App) *cobra.Command {
	zkDef := app.getenv(EnvZK)
	if zkDef == "" {
		zkDef = defaultZK
	}
	rootDef := app.getenv(EnvZKRoot)
	if rootDef == "" {
		rootDef = defaultZKRoot
	}
	root := &cobra.Command{
		Use:   "metaq",
		Short: "metaq: a MetaQ-compatible message broker and its command-line tools",
		Long: `metaq is a Go message broker faithful to Taobao's MetaQ (Metamorphosis): brokers
coordinated by ZooKeeper, one sequential commit log shared by every topic, and MetaQ's
plain-text protocol. This one binary runs a broker and talks to a running cluster.

Cluster commands find brokers, topics and consumer groups in ZooKeeper (--zk, --zk-root, or
the ` + EnvZK + ` / ` + EnvZKRoot + ` environment variables).`,
		Example: `  metaq broker -c conf/server.ini
  metaq produce --topic test --message hello
  metaq consume --topic test --from earliest --count 1
  metaq topics describe test
  metaq groups describe billing`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		Version:           Version(),
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if app.ConnectTimeout <= 0 {
				return usageErr("--connect-timeout must be > 0")
			}
			// Cobra checks these only after this hook; check them here so that they are usage errors.
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return usageErr("%v\nSee '%s --help'.", err, cmd.CommandPath())
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return usageErr("%v\nSee '%s --help'.", err, cmd.CommandPath())
			}
			return app.loadSecurity() // security.go
		},
	}
	root.SetVersionTemplate("metaq {{.Version}}\n")
	root.SetIn(app.Stdin)
	root.SetOut(app.Stdout)
	root.SetErr(app.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&app.ZK, "zk", zkDef, "ZooKeeper connect string host:port[,host:port...][/chroot] (env "+EnvZK+")")
	pf.StringVar(&app.ZKRoot, "zk-root", rootDef, "root of metaq's ZooKeeper nodes, zk.zkRoot (env "+EnvZKRoot+")")
	pf.BoolVar(&app.JSON, "json", false, "print machine-readable JSON instead of tables")
	pf.BoolVarP(&app.Verbose, "verbose", "v", false, "print connection details and ZooKeeper client logs on stderr")
	pf.DurationVar(&app.ConnectTimeout, "connect-timeout", 10*time.Second, "timeout for connecting to ZooKeeper/brokers and for each request")
	addSecurityFlags(app, pf) // security.go

	root.SetUsageTemplate(root.UsageTemplate() + "\n" + exitCodesHelp + "\n")

	root.AddCommand(
		newBrokerCommand(app),
		newProduceCommand(app),
		newConsumeCommand(app),
		newTopicsCommand(app),
		newBrokersCommand(app),
		newGroupsCommand(app),
		newOffsetsCommand(app),
		newStatsCommand(app),
		newQueryCommand(app),
		newVersionCommand(app),
	)
	extraMu.Lock()
	extra := append([]func(*App) *cobra.Command(nil), extraCommands...)
	extraMu.Unlock()
	for _, f := range extra {
		root.AddCommand(f(app))
	}
	app.addCompletions(root) // --topic and --group flags complete names from ZooKeeper
	return root
}

// Run executes the command line args (without the program name) on app and returns the exit
// code; errors are printed on app.Stderr. Tests call it in-process.
func Run(ctx context.Context, app *App, args []string) int {
	root := NewRootCommand(app)
	root.SetArgs(args)
	defer app.close()
	var started bool
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, a []string) error {
		started = true
		return pre(cmd, a)
	}
	_, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	if !started && code == ExitFailure {
		// Cobra's own errors (unknown command, wrong number of arguments, missing required
		// flags) come before any command ran.
		code = ExitUsage
	}
	var s silentExit
	if !errors.As(err, &s) {
		msg := errText(err)
		if code == ExitUsage && !strings.Contains(msg, "--help") {
			msg += "\nRun 'metaq --help' for usage."
		}
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintf(app.Stderr, "metaq: %s\n", msg)
		}
	}
	return code
}

// Main runs the metaq command as a process (os.Args, standard streams; SIGINT/SIGTERM cancel
// the command's context) and returns the exit code for os.Exit.
func Main() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := NewApp()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for range sigs {
			if app.ownSignals.Load() {
				// metaq broker subscribes to the signals itself and forces its exit on the
				// second; cancelling here too made one signal count twice (a forced exit on
				// the first SIGTERM, when the cancellation won the broker's select).
				continue
			}
			// The first signal asks the command to finish (consume commits its offsets);
			// after it the default action is back, so a second Ctrl-C ends a command that
			// does not stop.
			signal.Stop(sigs)
			cancel()
			return
		}
	}()
	return Run(ctx, app, os.Args[1:])
}

func newVersionCommand(app *App) *cobra.Command {
	var brokerAddr string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary (and of a broker with --broker)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := map[string]string{"version": Version(), "go": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH}
			if brokerAddr != "" {
				bv, err := app.admin().Version(cmd.Context(), brokerAddr)
				if err != nil {
					return err
				}
				v["broker"] = strings.TrimSpace(bv)
			}
			if app.JSON {
				return app.printJSON(v)
			}
			fmt.Fprintf(app.Stdout, "metaq %s (%s %s)\n", v["version"], v["go"], v["platform"])
			if brokerAddr != "" {
				fmt.Fprintf(app.Stdout, "broker %s: %s\n", brokerAddr, v["broker"])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&brokerAddr, "broker", "", "also ask the broker at host:port for its version")
	return cmd
}
