package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
)

// Environment variables read by the CLI.
const (
	EnvZK     = "METAQ_ZK"      // default for --zk
	EnvZKRoot = "METAQ_ZK_ROOT" // default for --zk-root

	defaultZK     = "127.0.0.1:2181"
	defaultZKRoot = "/meta"
)

// App holds what every command shares: the I/O streams, the global flags, and the
// connections opened so far (closed when the command ends): a ZooKeeper session and a
// client.Admin holding one connection per broker asked.
type App struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (os.Getenv unless a test replaces it).
	Getenv func(string) string
	// Signals subscribes to SIGINT/SIGTERM for commands that handle signals themselves
	// (metaq broker); stop unsubscribes. Default: signal.Notify.
	Signals func() (ch <-chan os.Signal, stop func())
	// Exit ends the process at once (the broker's forced exit). Default: os.Exit.
	Exit func(code int)

	// Global flags.
	ZK             string
	ZKRoot         string
	JSON           bool
	Verbose        bool
	ConnectTimeout time.Duration

	sec securityFlags // --tls*, --user, --zk-auth (security.go)

	mu  sync.Mutex
	zk  *zkmeta.Client
	adm *client.Admin
	// down: brokers (by address) that this command could not reach or that did not answer in
	// time, with the error; they are not asked again (noteUnanswered).
	down map[string]error

	// ownSignals is set by a command that counts SIGINT/SIGTERM itself (metaq broker: the
	// second one forces its exit); Main then leaves the signals to it, so that one signal is
	// not seen twice (once as Main's cancellation, once on the command's own channel).
	ownSignals atomic.Bool
}

// NewApp returns an App on the process's standard streams.
func NewApp() *App {
	return &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

func (a *App) getenv(k string) string {
	if a.Getenv != nil {
		return a.Getenv(k)
	}
	return os.Getenv(k)
}

func (a *App) signals() (<-chan os.Signal, func()) {
	a.ownSignals.Store(true) // before subscribing: no signal reaches both Main and the command
	if a.Signals != nil {
		return a.Signals()
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

func (a *App) exit(code int) {
	if a.Exit != nil {
		a.Exit(code)
		return
	}
	os.Exit(code)
}

// close releases the connections opened by the command.
func (a *App) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.adm != nil {
		_ = a.adm.Close()
		a.adm = nil
	}
	if a.zk != nil {
		a.zk.Close()
		a.zk = nil
	}
}

// logf prints a note on stderr when --verbose is set.
func (a *App) logf(format string, args ...any) {
	if a.Verbose {
		fmt.Fprintf(a.Stderr, "metaq: "+format+"\n", args...)
	}
}

// warnf prints a warning on stderr.
func (a *App) warnf(format string, args ...any) {
	fmt.Fprintf(a.Stderr, "metaq: "+format+"\n", args...)
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// zkClient connects to ZooKeeper (once per command).
func (a *App) zkClient(ctx context.Context) (*zkmeta.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.zk != nil {
		return a.zk, nil
	}
	if strings.TrimSpace(a.ZK) == "" {
		return nil, usageErr("no ZooKeeper given: use --zk host:port or set %s", EnvZK)
	}
	var logger zkmeta.Logger = discardLogger{}
	if a.Verbose {
		logger = log.New(a.Stderr, "", log.LstdFlags)
	}
	c, err := zkmeta.Connect(ctx, zkmeta.Config{
		ConnectString:     a.ZK,
		Root:              a.ZKRoot,
		SessionTimeout:    10 * time.Second,
		ConnectionTimeout: a.ConnectTimeout,
		Logger:            logger,
		Auth:              a.sec.zkAuth,
		FailFast:          true, // every server refused: exit 4 at once, not after --connect-timeout
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, a.zkUnreachable(err)
	}
	a.zk = c
	return c, nil
}

func (a *App) zkUnreachable(err error) error {
	if errors.Is(err, zkmeta.ErrRefused) {
		return unavailableErr("cannot reach ZooKeeper at %s: every server refused the connection (is it running? set --zk or %s): %v", a.ZK, EnvZK, err)
	}
	return unavailableErr("cannot reach ZooKeeper at %s within %s (set --zk or %s): %v", a.ZK, a.ConnectTimeout, EnvZK, err)
}

// clientConfig is the configuration of the client library objects a command creates: the
// global flags' ZooKeeper and timeouts, and their logs on stderr from level up (everything,
// timestamped, with --verbose).
func (a *App) clientConfig(level slog.Level) client.Config {
	if a.Verbose {
		level = slog.LevelDebug
	}
	h := slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
		if at.Key == slog.TimeKey && !a.Verbose {
			return slog.Attr{}
		}
		return at
	}})
	cfg := client.Config{
		ZKConnect:           a.ZK,
		ZKRoot:              a.ZKRoot,
		ZKSessionTimeout:    10 * time.Second,
		ZKConnectionTimeout: a.ConnectTimeout,
		Logger:              slog.New(h),
		DialTimeout:         a.ConnectTimeout,
		RequestTimeout:      a.ConnectTimeout,
	}
	a.applySecurity(&cfg)
	return cfg
}

// admin returns the command's client.Admin (created on first use, without ZooKeeper: the
// addresses come from zkClient or the command line). Safe for concurrent use.
func (a *App) admin() *client.Admin {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.adm == nil {
		cfg := a.clientConfig(slog.LevelError)
		cfg.ZKConnect = ""
		a.adm, _ = client.NewAdmin(cfg) // fails only for a bad ZKConnect, and there is none
	}
	return a.adm
}

// noteUnanswered records that the broker at addr could not be reached or did not answer within
// --connect-timeout (err a connection error or a timeout; other errors are ignored): unanswered
// returns err for it from now on.
func (a *App) noteUnanswered(addr string, err error) {
	var ce *client.ConnError
	if !errors.As(err, &ce) && !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down == nil {
		a.down = map[string]error{}
	}
	if _, ok := a.down[addr]; !ok {
		a.down[addr] = err
	}
}

// unanswered is the error noted for addr by noteUnanswered, nil when none.
func (a *App) unanswered(addr string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.down[addr]
}

// opCtx bounds one administrative request.
func (a *App) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.ConnectTimeout)
}

// zkRequest connects to ZooKeeper (zkClient) and bounds one administrative request on it (opCtx);
// the caller calls cancel when done. On error there is nothing to cancel.
func (a *App) zkRequest(ctx context.Context) (*zkmeta.Client, context.Context, context.CancelFunc, error) {
	zc, err := a.zkClient(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	octx, cancel := a.opCtx(ctx)
	return zc, octx, cancel, nil
}

// printJSON writes v as indented JSON.
func (a *App) printJSON(v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printList prints what a list command found in ZooKeeper: as JSON with --json (an empty array
// when nothing), else "<none> in ZooKeeper <zk> (root <root>)" on stderr when nothing, else
// through table.
func printList[T any](a *App, rows []T, none string, table func() error) error {
	if a.JSON {
		return a.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(a.Stderr, "%s in ZooKeeper %s (root %s)\n", none, a.ZK, a.ZKRoot)
		return nil
	}
	return table()
}

// table starts a tab-aligned table with the given header.
func (a *App) table(header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw io.Writer, cols ...any) {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(tw, strings.Join(s, "\t"))
}
