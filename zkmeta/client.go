package zkmeta

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Logger receives the package's log lines (*log.Logger satisfies it).
type Logger interface {
	Printf(format string, args ...any)
}

// Errors returned by the client. ZooKeeper's own errors (zk.ErrNoNode, zk.ErrNodeExists,
// zk.ErrBadVersion, …) are returned as go-zookeeper defines them.
var (
	ErrClosed = errors.New("zkmeta: client closed")
	// ErrNotConnected is returned by Connect when no session could be established in time.
	ErrNotConnected = errors.New("zkmeta: not connected to ZooKeeper")
	// ErrRefused is returned (with ErrNotConnected) by Connect with Config.FailFast when every
	// server refused the connection.
	ErrRefused    = errors.New("zkmeta: every ZooKeeper server refused the connection")
	ErrNoNode     = zk.ErrNoNode
	ErrNodeExists = zk.ErrNodeExists
)

// Config configures a Client. Field names follow server.ini's [zookeeper] section.
type Config struct {
	// ConnectString is zk.zkConnect: "host:port[,host:port…][/chroot]".
	ConnectString string
	// Servers may be given instead of ConnectString ("host:port" each); Chroot then applies.
	Servers []string
	Chroot  string
	// Root is zk.zkRoot (default "/meta"); every metaq path lives below it (see Paths).
	Root string
	// SessionTimeout is zk.zkSessionTimeoutMs (default 30s). The server clamps it to
	// [2, 20] × its tickTime; SessionTimeout() reports the negotiated value.
	SessionTimeout time.Duration
	// ConnectionTimeout is zk.zkConnectionTimeoutMs (default 30s): how long Connect waits for the
	// first session. New does not wait.
	ConnectionTimeout time.Duration
	// StaleNodeWait bounds how long an ephemeral node we want is waited for while a previous
	// session (a broker restarted faster than its old session expired) still holds it. Default:
	// session timeout + max(5s, session timeout / 2).
	StaleNodeWait time.Duration
	// Logger gets connection changes, (re-)registrations and retries, each line starting with
	// "zkmeta:". Default: a log.Logger writing to stderr.
	Logger Logger
	// Dialer replaces net.DialTimeout (tests, proxies).
	Dialer Dialer
	// Auth is zk.zkAuth, "user:password": the session authenticates with ZooKeeper's digest
	// scheme, and every node this client creates gets a digest ACL (all rights for that user,
	// read for everyone), so a ZooKeeper client without the digest cannot change metaq's nodes
	// (docs/security.md). "" = open ACLs, as MetaQ.
	Auth string
	// FailFast makes Connect give up (ErrRefused) as soon as every server of the connect string
	// has refused the connection in a row (nothing listens on its port, or its name does not
	// resolve) instead of waiting ConnectionTimeout: for command-line tools. A client that had a
	// session keeps retrying, as without it.
	FailFast bool
}

// State is the client's view of its ZooKeeper session.
type State int32

const (
	// StateDisconnected: no usable session right now (connecting, server down, or expired and
	// waiting for a new one). Operations wait (bounded by their context) and retry.
	StateDisconnected State = iota
	// StateConnected: a session is established and the server is reachable.
	StateConnected
	// StateClosed: Close was called.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateDisconnected:
		return "disconnected"
	case StateConnected:
		return "connected"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Client is a ZooKeeper connection that knows metaq's layout. It drains go-zookeeper's event
// channel, tracks the session (connected / disconnected / expired → new session), keeps registered
// ephemeral nodes alive across session expiry, retries operations across connection loss, and
// re-arms watches. Paths given to its methods are relative to the chroot of the connect string.
// A Client is safe for concurrent use.
type Client struct {
	cfg     Config
	acl     []zk.ACL // of created nodes (Config.Auth); nil = open
	paths   Paths
	chroot  string
	servers []string
	log     Logger
	conn    *zk.Conn

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	connDone  chan struct{} // closed when go-zookeeper's event channel is closed (its loop ended)
	stateKick chan struct{} // cap 1: the session state may have changed

	// go-zookeeper's connect loop reads these through dial.
	dialMu         sync.Mutex
	dialFails      int
	awaitHandshake bool
	hadSession     bool
	refusals       int
	downSince      time.Time
	lastDialLog    time.Time
	dialLogEvery   time.Duration
	maxBackoff     time.Duration
	// handshakeTimeout bounds the wait for the server's answer to a connect request.
	handshakeTimeout time.Duration
	dropZxid         bool             // leave our last zxid out of the next connect request
	sessionServer    string           // the server that answered the last handshake with a session
	distinctServers  int              // servers in the connect string
	refused          map[string]error // servers that refused in a row, before the first session
	refusedErr       error            // the last refusal once every server refused
	allRefused       chan struct{}    // closed then

	mu          sync.Mutex
	state       State
	sessionID   int64         // current session, 0 before the first
	connectedCh chan struct{} // closed while connected; replaced on disconnect
	expiredFor  int64         // session id whose expiry was already announced
	sawExpired  atomic.Bool
	onExpired   []func()
	onReconnect []func(newSession bool)
	connects    int // sessions established so far (for logging)

	hookMu    sync.Mutex
	hookQueue []func()
	hookKick  chan struct{}

	spawnMu sync.Mutex
	spawnOK bool
	wg      sync.WaitGroup

	knownPaths sync.Map // full paths known to exist (persistent parents)

	eph *keeper

	// beforeOffsetsMulti, when set (tests), runs in CommitOffsets between
	// reading the nodes' versions and the multi-op.
	beforeOffsetsMulti func()
}

// Connect opens a client and waits until its first session is established, up to
// cfg.ConnectionTimeout and ctx. On failure the client is closed and the error says why.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	wctx := ctx
	if c.cfg.ConnectionTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.cfg.ConnectionTimeout)
		defer cancel()
	}
	var refused <-chan struct{}
	if c.cfg.FailFast {
		refused = c.allRefused
	}
	if err := c.waitConnected(wctx, refused); err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrRefused) {
			c.dialMu.Lock()
			last := c.refusedErr
			c.dialMu.Unlock()
			return nil, fmt.Errorf("%w: %w: %v (%v)", ErrNotConnected, ErrRefused, c.servers, last)
		}
		return nil, fmt.Errorf("%w: %v within %s (%w)", ErrNotConnected, c.servers, c.cfg.ConnectionTimeout, err)
	}
	return c, nil
}

// New opens a client without waiting: the session is established in the background, retrying
// with backoff (and saying so in the log) while ZooKeeper is unreachable. Registrations and
// watches made meanwhile take effect once it is reachable.
func New(cfg Config) (*Client, error) {
	var servers []string
	chroot := ""
	var err error
	switch {
	case cfg.ConnectString != "":
		servers, chroot, err = ParseConnectString(cfg.ConnectString)
		if err != nil {
			return nil, err
		}
	case len(cfg.Servers) > 0:
		servers = cfg.Servers
		if chroot, err = normalizeChroot(cfg.Chroot); err != nil {
			return nil, fmt.Errorf("zkmeta: %w", err)
		}
	default:
		return nil, errors.New("zkmeta: no ZooKeeper server configured (zk.zkConnect)")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Second
	}
	if cfg.ConnectionTimeout <= 0 {
		cfg.ConnectionTimeout = 30 * time.Second
	}
	if cfg.StaleNodeWait <= 0 {
		cfg.StaleNodeWait = cfg.SessionTimeout + max(5*time.Second, cfg.SessionTimeout/2)
	}
	if cfg.Logger == nil {
		cfg.Logger = log.New(os.Stderr, "", log.LstdFlags)
	}
	c := &Client{
		cfg:              cfg,
		paths:            NewPaths(cfg.Root),
		chroot:           chroot,
		servers:          servers,
		log:              cfg.Logger,
		closing:          make(chan struct{}),
		connDone:         make(chan struct{}),
		stateKick:        make(chan struct{}, 1),
		hookKick:         make(chan struct{}, 1),
		connectedCh:      make(chan struct{}),
		dialLogEvery:     time.Second,
		maxBackoff:       min(5*time.Second, max(cfg.SessionTimeout/3, 200*time.Millisecond)),
		handshakeTimeout: max(time.Second, cfg.SessionTimeout/3),
		distinctServers:  len(slices.Compact(slices.Sorted(slices.Values(zk.FormatServers(servers))))),
		refused:          map[string]error{},
		allRefused:       make(chan struct{}),
		spawnOK:          true,
	}
	c.eph = newKeeper(c)
	// zk.WithLogDialErrors, WithHandshakeTimeout, WithDropLastZxid and Conn.SessionCredentials are
	// metaq's patch of go-zookeeper (third_party/go-zookeeper-zk/PATCHES.md).
	var authScheme string
	if cfg.Auth != "" {
		user, pass, ok := strings.Cut(cfg.Auth, ":")
		if !ok || user == "" || pass == "" {
			return nil, errors.New("zkmeta: Config.Auth (zk.zkAuth) must be user:password")
		}
		c.acl = append(zk.DigestACL(zk.PermAll, user, pass), zk.WorldACL(zk.PermRead)...)
		authScheme = "digest"
	}
	conn, events, err := zk.Connect(servers, cfg.SessionTimeout,
		zk.WithDialer(c.dial),
		zk.WithHostProvider(&hostProvider{c: c}),
		zk.WithLogger(zkLogger{c}),
		zk.WithLogInfo(false),
		zk.WithLogDialErrors(false),
		zk.WithHandshakeTimeout(c.handshakeTimeout),
		zk.WithAuth(authScheme, []byte(cfg.Auth)),
		zk.WithDropLastZxid(c.dropLastZxid),
		zk.WithEventCallback(c.onEvent),
	)
	if err != nil {
		return nil, fmt.Errorf("zkmeta: %w", err)
	}
	c.conn = conn
	go c.drain(events) // not in wg: it ends when go-zookeeper closes the channel
	c.spawn(c.sessionLoop)
	c.spawn(c.hookLoop)
	c.spawn(c.eph.loop)
	c.kickState()
	return c, nil
}

// onEvent is go-zookeeper's synchronous callback: it must never block.
func (c *Client) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		c.handshakeDone(ev.Server, true)
	case zk.StateExpired:
		c.sawExpired.Store(true)
		c.handshakeDone(ev.Server, false)
	}
	c.kickState()
}

func (c *Client) kickState() {
	select {
	case c.stateKick <- struct{}{}:
	default:
	}
}

// drain empties go-zookeeper's event channel (it drops events when nobody reads) until
// go-zookeeper closes it, which it does after its loop ended and every watcher was released.
func (c *Client) drain(events <-chan zk.Event) {
	for range events {
	}
	close(c.connDone)
}

// spawn runs f in a goroutine that Close waits for; false after Close.
func (c *Client) spawn(f func()) bool {
	c.spawnMu.Lock()
	defer c.spawnMu.Unlock()
	if !c.spawnOK {
		return false
	}
	c.wg.Go(f)
	return true
}

func (c *Client) sessionLoop() {
	for {
		select {
		case <-c.stateKick:
		case <-c.closing:
			return
		}
		c.syncState()
	}
}

// syncState compares go-zookeeper's state with ours and announces changes.
func (c *Client) syncState() {
	zs := c.conn.State()
	sid := c.conn.SessionID()
	expired := c.sawExpired.Swap(false)

	c.mu.Lock()
	if c.state == StateClosed {
		c.mu.Unlock()
		return
	}
	prev := c.sessionID
	var hooks []func()
	announceExpiry := func() {
		if prev != 0 && c.expiredFor != prev {
			c.expiredFor = prev
			c.log.Printf("zkmeta: ZooKeeper session 0x%x expired: its ephemeral nodes and watches are gone", prev)
			for _, f := range c.onExpired {
				hooks = append(hooks, f)
			}
		}
	}
	if expired {
		announceExpiry()
	}
	if zs == zk.StateHasSession && sid != 0 {
		newSession := sid != prev
		if newSession {
			announceExpiry()
			c.sessionID = sid
			c.connects++
		}
		if c.state != StateConnected || newSession {
			wasFirst := prev == 0
			if c.state != StateConnected {
				c.state = StateConnected
				close(c.connectedCh)
			}
			switch {
			case wasFirst:
				c.log.Printf("zkmeta: connected to ZooKeeper %s, session 0x%x (timeout %s)", c.conn.Server(), sid, c.sessionTimeoutLocked())
			case newSession:
				c.log.Printf("zkmeta: connected to ZooKeeper %s with new session 0x%x (timeout %s)", c.conn.Server(), sid, c.sessionTimeoutLocked())
			default:
				c.log.Printf("zkmeta: reconnected to ZooKeeper %s, session 0x%x kept", c.conn.Server(), sid)
			}
			if !wasFirst {
				for _, f := range c.onReconnect {
					f := f
					hooks = append(hooks, func() { f(newSession) })
				}
			}
			c.eph.sessionChanged(newSession)
		}
	} else if c.state == StateConnected {
		c.state = StateDisconnected
		c.connectedCh = make(chan struct{})
		c.log.Printf("zkmeta: disconnected from ZooKeeper (session 0x%x, state %s); reconnecting", prev, zs)
	}
	c.mu.Unlock()
	if len(hooks) > 0 {
		c.queueHooks(hooks)
	}
}

func (c *Client) queueHooks(hooks []func()) {
	c.hookMu.Lock()
	c.hookQueue = append(c.hookQueue, hooks...)
	c.hookMu.Unlock()
	select {
	case c.hookKick <- struct{}{}:
	default:
	}
}

// hookLoop runs OnSessionExpired/OnReconnected callbacks one at a time, in order, off every
// go-zookeeper goroutine.
func (c *Client) hookLoop() {
	for {
		select {
		case <-c.hookKick:
		case <-c.closing:
			return
		}
		for {
			c.hookMu.Lock()
			if len(c.hookQueue) == 0 {
				c.hookMu.Unlock()
				break
			}
			f := c.hookQueue[0]
			c.hookQueue = c.hookQueue[1:]
			c.hookMu.Unlock()
			f()
		}
	}
}

// OnSessionExpired registers f to run (on the client's hook goroutine, in order with other hooks)
// when the client learns that its session expired: every ephemeral node it created is gone
// (owner nodes included) and its watches were dropped. Ephemeral nodes registered with Ephemeral
// (broker and consumer registrations) are re-created by the client itself; watches made with the
// Watch* methods re-arm themselves. f must not block for long.
func (c *Client) OnSessionExpired(f func()) {
	c.mu.Lock()
	c.onExpired = append(c.onExpired, f)
	c.mu.Unlock()
}

// OnReconnected registers f to run each time a session becomes usable again after a
// disconnection; newSession is true when the previous session expired (a new one replaced it).
// It is not called for the first session.
func (c *Client) OnReconnected(f func(newSession bool)) {
	c.mu.Lock()
	c.onReconnect = append(c.onReconnect, f)
	c.mu.Unlock()
}

// Close ends the session (ZooKeeper deletes its ephemeral nodes at once), stops every goroutine
// of the client and waits for them. Watch channels are closed. Do not call it from an
// OnSessionExpired/OnReconnected hook (it waits for the hook goroutine).
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.state = StateClosed
		c.mu.Unlock()
		c.spawnMu.Lock()
		c.spawnOK = false
		c.spawnMu.Unlock()
		close(c.closing)
		c.conn.Close()
		<-c.connDone // go-zookeeper's loop has ended; every pending request and watch is released
		c.wg.Wait()
	})
}

// State reports whether a session is usable.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Connected reports whether a session is usable right now.
func (c *Client) Connected() bool { return c.State() == StateConnected }

// SessionID is the current (or last) session id, 0 before the first session.
func (c *Client) SessionID() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// SessionTimeout is the session timeout the server granted (the configured one until the first
// session is established).
func (c *Client) SessionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionTimeoutLocked()
}

func (c *Client) sessionTimeoutLocked() time.Duration {
	if _, _, t := c.conn.SessionCredentials(); t > 0 {
		return t
	}
	return c.cfg.SessionTimeout
}

// SessionCredentials returns the current session's id, password and the server it is connected
// to. Whoever holds them can take the session over — zktest.ExpireSession uses them to expire a
// session for real. Do not log the password.
func (c *Client) SessionCredentials() (id int64, passwd []byte, server string) {
	id, passwd, _ = c.conn.SessionCredentials()
	if id == 0 {
		return 0, nil, ""
	}
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	return id, passwd, c.sessionServer
}

// Paths is the layout below the configured root.
func (c *Client) Paths() Paths { return c.paths }

// Chroot is the chroot taken from the connect string ("" for none).
func (c *Client) Chroot() string { return c.chroot }

// Servers are the ZooKeeper servers this client connects to.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Conn is the underlying go-zookeeper connection. Its paths are absolute: prefix FullPath.
func (c *Client) Conn() *zk.Conn { return c.conn }

// FullPath maps a chroot-relative path to the server's absolute path.
func (c *Client) FullPath(p string) string {
	if c.chroot == "" {
		return p
	}
	if p == "/" {
		return c.chroot
	}
	return c.chroot + p
}

// WaitConnected blocks until a session is usable, ctx is done or the client is closed.
func (c *Client) WaitConnected(ctx context.Context) error { return c.waitConnected(ctx, nil) }

// waitConnected is WaitConnected that also gives up with ErrRefused when refused is closed.
func (c *Client) waitConnected(ctx context.Context, refused <-chan struct{}) error {
	for {
		c.mu.Lock()
		st, ch := c.state, c.connectedCh
		c.mu.Unlock()
		switch st {
		case StateConnected:
			return nil
		case StateClosed:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-refused:
			return ErrRefused
		case <-c.closing:
			return ErrClosed
		}
	}
}

// isConnErr: the operation failed because the connection or session went away; it may be retried
// once a session is usable again.
func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// call runs fn, giving up waiting (not fn itself) when ctx is done. go-zookeeper calls are not
// cancellable; each ends by itself within the receive timeout or at Close.
func (c *Client) call(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	done := make(chan error, 1)
	if !c.spawn(func() { done <- fn() }) {
		return ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// do runs fn once a session is usable and retries it, with backoff, while it fails because the
// connection or session went away. fn must be idempotent (or handle its own retry effects).
func (c *Client) do(ctx context.Context, fn func() error) error {
	backoff := 20 * time.Millisecond
	for {
		if err := c.WaitConnected(ctx); err != nil {
			return err
		}
		err := c.call(ctx, fn)
		if err == nil || !isConnErr(err) {
			if errors.Is(err, zk.ErrClosing) || (err != nil && c.isClosed()) {
				return ErrClosed
			}
			return err
		}
		if c.isClosed() {
			return ErrClosed
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.closing:
			t.Stop()
			return ErrClosed
		}
		backoff = min(backoff*2, time.Second)
	}
}

var openACL = zk.WorldACL(zk.PermAll)

// nodeACL is the ACL of the nodes this client creates (Config.Auth).
func (c *Client) nodeACL() []zk.ACL {
	if c.acl != nil {
		return c.acl
	}
	return openACL
}

// ensureFull creates the persistent node full and its missing ancestors (empty data).
func (c *Client) ensureFull(full string) error {
	if full == "/" || full == "" {
		return nil
	}
	if _, ok := c.knownPaths.Load(full); ok {
		return nil
	}
	_, err := c.conn.Create(full, []byte{}, 0, c.nodeACL())
	if errors.Is(err, zk.ErrNoNode) {
		if err := c.ensureFull(path.Dir(full)); err != nil {
			return err
		}
		_, err = c.conn.Create(full, []byte{}, 0, c.nodeACL())
	}
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		c.knownPaths.Store(full, struct{}{})
		return nil
	}
	return err
}

// forgetPath drops full and its descendants from the known-paths cache ("" drops everything).
func (c *Client) forgetPath(full string) {
	c.knownPaths.Range(func(k, _ any) bool {
		if s := k.(string); full == "" || s == full || strings.HasPrefix(s, full+"/") {
			c.knownPaths.Delete(k)
		}
		return true
	})
}

// createFull creates full (creating missing persistent parents).
func (c *Client) createFull(full string, data []byte, flags int32) error {
	if data == nil {
		data = []byte{}
	}
	_, err := c.conn.Create(full, data, flags, c.nodeACL())
	if errors.Is(err, zk.ErrNoNode) {
		// A parent is missing: never created, or deleted (a wiped server, a cleanup) although
		// the cache says otherwise. Forget the cache and create the chain.
		c.forgetPath("")
		if err := c.ensureFull(path.Dir(full)); err != nil {
			return err
		}
		_, err = c.conn.Create(full, data, flags, c.nodeACL())
	}
	return err
}

// EnsurePath creates the persistent node p and its missing parents (empty data); existing
// nodes are fine.
func (c *Client) EnsurePath(ctx context.Context, p string) error {
	full := c.FullPath(p)
	return c.do(ctx, func() error { return c.ensureFull(full) })
}

// CreatePersistent creates the persistent node p with data, creating missing parents. It returns
// zk.ErrNodeExists when p exists.
func (c *Client) CreatePersistent(ctx context.Context, p string, data []byte) error {
	full := c.FullPath(p)
	first := true
	return c.do(ctx, func() error {
		err := c.createFull(full, data, 0)
		if errors.Is(err, zk.ErrNodeExists) && !first {
			// A retry after a lost reply: the first attempt may have created it.
			if d, _, gerr := c.conn.Get(full); gerr == nil && string(d) == string(data) {
				return nil
			}
		}
		first = false
		return err
	})
}

// CreateEphemeral creates the ephemeral node p with data (missing parents are created
// persistent). When p already exists and belongs to this session its data is updated and nil
// returned; when another session holds it, zk.ErrNodeExists. The node is not re-created after a
// session expiry — use Ephemeral for that.
func (c *Client) CreateEphemeral(ctx context.Context, p string, data []byte) error {
	full := c.FullPath(p)
	return c.do(ctx, func() error {
		err := c.createFull(full, data, zk.FlagEphemeral)
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		d, st, gerr := c.conn.Get(full)
		if gerr != nil {
			if errors.Is(gerr, zk.ErrNoNode) {
				return zk.ErrConnectionClosed // vanished meanwhile: retry
			}
			return gerr
		}
		if st.EphemeralOwner != c.conn.SessionID() {
			return zk.ErrNodeExists
		}
		if string(d) != string(data) {
			_, err = c.conn.Set(full, data, st.Version)
			return err
		}
		return nil
	})
}

// Get returns p's data and stat (zk.ErrNoNode when it does not exist).
func (c *Client) Get(ctx context.Context, p string) ([]byte, *zk.Stat, error) {
	full := c.FullPath(p)
	var data []byte
	var st *zk.Stat
	err := c.do(ctx, func() error {
		d, s, err := c.conn.Get(full)
		if err == nil {
			data, st = d, s
		}
		return err
	})
	if err != nil { // results are only read when fn completed (an abandoned call may still run)
		return nil, nil, err
	}
	return data, st, nil
}

// Set replaces p's data whatever its version (zk.ErrNoNode when it does not exist).
func (c *Client) Set(ctx context.Context, p string, data []byte) error {
	full := c.FullPath(p)
	return c.do(ctx, func() error {
		_, err := c.conn.Set(full, data, -1)
		return err
	})
}

// SetVersion sets the data of p if its version is still version (zk.ErrBadVersion when someone
// wrote it since): a read-modify-write that loses no concurrent edit. A retry after a lost reply
// that finds p holding data counts as applied.
func (c *Client) SetVersion(ctx context.Context, p string, data []byte, version int32) error {
	full := c.FullPath(p)
	first := true
	return c.do(ctx, func() error {
		_, err := c.conn.Set(full, data, version)
		if errors.Is(err, zk.ErrBadVersion) && !first {
			if d, _, gerr := c.conn.Get(full); gerr == nil && string(d) == string(data) {
				return nil
			}
		}
		first = false
		return err
	})
}

// Put writes the persistent node p: sets its data, or creates it (and its parents) when missing.
func (c *Client) Put(ctx context.Context, p string, data []byte) error {
	full := c.FullPath(p)
	if data == nil {
		data = []byte{}
	}
	return c.do(ctx, func() error {
		for {
			_, err := c.conn.Set(full, data, -1)
			if !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			err = c.createFull(full, data, 0)
			if !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
	})
}

// Exists reports whether p exists.
func (c *Client) Exists(ctx context.Context, p string) (bool, error) {
	full := c.FullPath(p)
	var ok bool
	err := c.do(ctx, func() error {
		e, _, err := c.conn.Exists(full)
		ok = e
		return err
	})
	if err != nil {
		return false, err
	}
	return ok, nil
}

// Children returns p's children, sorted (zk.ErrNoNode when p does not exist).
func (c *Client) Children(ctx context.Context, p string) ([]string, error) {
	full := c.FullPath(p)
	var kids []string
	err := c.do(ctx, func() error {
		k, _, err := c.conn.Children(full)
		kids = k
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(kids)
	return kids, nil
}

// Delete deletes p whatever its version; a missing node is not an error.
func (c *Client) Delete(ctx context.Context, p string) error {
	full := c.FullPath(p)
	return c.do(ctx, func() error {
		err := c.conn.Delete(full, -1)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	})
}

// DeleteTree deletes p and everything below it; a missing node is not an error.
func (c *Client) DeleteTree(ctx context.Context, p string) error {
	full := c.FullPath(p)
	c.forgetPath(full)
	return c.do(ctx, func() error { return deleteTree(c.conn, full) })
}

func deleteTree(conn *zk.Conn, full string) error {
	for {
		kids, _, err := conn.Children(full)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := deleteTree(conn, path.Join(full, k)); err != nil {
				return err
			}
		}
		err = conn.Delete(full, -1)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return nil
		case errors.Is(err, zk.ErrNotEmpty):
			continue // a child appeared meanwhile
		default:
			return err
		}
	}
}
