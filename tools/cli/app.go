package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

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
// connections opened so far (closed when the command ends).
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

	mu      sync.Mutex
	zk      *zkmeta.Client
	brokers map[string]*brokerConn
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
	for k, c := range a.brokers {
		c.Close()
		delete(a.brokers, k)
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
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, unavailableErr("cannot reach ZooKeeper at %s within %s (set --zk or %s): %v", a.ZK, a.ConnectTimeout, EnvZK, err)
	}
	a.zk = c
	return c, nil
}

// broker returns a (shared) connection to the broker at addr.
func (a *App) broker(ctx context.Context, addr string) (*brokerConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.brokers[addr]; ok {
		c.mu.Lock()
		broken := c.err != nil
		c.mu.Unlock()
		if !broken {
			return c, nil
		}
		delete(a.brokers, addr)
	}
	c, err := dialBroker(ctx, addr, a.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	if a.brokers == nil {
		a.brokers = map[string]*brokerConn{}
	}
	a.brokers[addr] = c
	return c, nil
}

// opCtx bounds one administrative request.
func (a *App) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.ConnectTimeout)
}

// printJSON writes v as indented JSON.
func (a *App) printJSON(v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
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
