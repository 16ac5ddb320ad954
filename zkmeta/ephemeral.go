package zkmeta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ErrRemoved is returned by the methods of an EphemeralNode after Remove.
var ErrRemoved = errors.New("zkmeta: ephemeral node removed")

// ConflictError reports an ephemeral node that another ZooKeeper session still holds after
// Config.StaleNodeWait: either another live process registered the same thing (two brokers with
// one brokerId) or an old session lives on longer than expected. errors.Is(err, zk.ErrNodeExists)
// holds. The client keeps trying in the background.
type ConflictError struct {
	Path   string        // chroot-relative path
	Holder int64         // the other session's id
	Waited time.Duration // how long we have waited so far
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("zkmeta: %s is held by another ZooKeeper session 0x%x after waiting %s "+
		"(another live process with the same identity, e.g. the same brokerId?)", e.Path, e.Holder, e.Waited.Round(time.Millisecond))
}

// Is makes errors.Is(err, zk.ErrNodeExists) true.
func (e *ConflictError) Is(target error) bool { return target == zk.ErrNodeExists }

// EphemeralNode is an ephemeral node the client keeps alive: created as soon as a session is
// usable, re-created after every session expiry (and after a reconnection that kept the session,
// if the node was deleted meanwhile), with its data kept up to date. When a previous session still holds the path (a process restarted
// faster than its old session expired) the client waits for that node to vanish instead of
// failing; see ConflictError. Methods are safe for concurrent use.
type EphemeralNode struct {
	k    *keeper
	path string
	full string
	dep  *EphemeralNode // created only while dep is registered (a broker's topics after the broker)

	isDep bool // some node depends on this one (guarded by k.mu)
	adopt bool // never created by the keeper: registered while it exists in our session (zkmeta/ha.go)

	// guarded by k.mu
	data     []byte
	written  []byte // data the node holds in session owned
	owned    int64  // session in which we created the node (0: not created)
	verify   bool   // check that the node still exists (after a reconnect with the same session)
	removed  bool
	since    time.Time // first seen held by holder
	holder   int64
	watchSID int64 // session in which a watch on the other session's node is armed
	reported bool
}

type keeper struct {
	c      *Client
	mu     sync.Mutex
	nodes  []*EphemeralNode // registration order: parents of meaning first (broker before topics)
	byPath map[string]*EphemeralNode
	dels   []*deletion // nodes to delete (Remove), in order
	kick   chan struct{}
	passCh chan struct{} // closed after each pass
}

type deletion struct {
	path, full string
	barrier    bool // others depended on the node: delete it after the rest
	done       chan struct{}
}

func newKeeper(c *Client) *keeper {
	return &keeper{c: c, byPath: map[string]*EphemeralNode{}, kick: make(chan struct{}, 1), passCh: make(chan struct{})}
}

func (k *keeper) kickNow() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// sessionChanged is called by the session loop (with c.mu held: it must not take c.mu).
func (k *keeper) sessionChanged(newSession bool) {
	if !newSession {
		k.mu.Lock()
		for _, n := range k.nodes {
			if n.owned != 0 {
				n.verify = true
			}
		}
		k.mu.Unlock()
	}
	k.kickNow()
}

// Ephemeral registers an ephemeral node at p (chroot-relative) that the client keeps alive until
// Remove or Close. It returns at once; Wait blocks until the node exists. Registering a path twice
// is an error.
func (c *Client) Ephemeral(p string, data []byte) (*EphemeralNode, error) {
	return c.ephemeral(p, data, nil)
}

func (c *Client) ephemeral(p string, data []byte, dep *EphemeralNode) (*EphemeralNode, error) {
	return c.ephemeralNode(p, data, dep, false)
}

func (c *Client) ephemeralNode(p string, data []byte, dep *EphemeralNode, adopt bool) (*EphemeralNode, error) {
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return nil, fmt.Errorf("zkmeta: bad path %q", p)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	k := c.eph
	n := &EphemeralNode{k: k, path: p, full: c.FullPath(p), data: bytes.Clone(data), dep: dep, adopt: adopt}
	if n.data == nil {
		n.data = []byte{}
	}
	k.mu.Lock()
	if _, dup := k.byPath[p]; dup {
		k.mu.Unlock()
		return nil, fmt.Errorf("zkmeta: ephemeral node %s is already registered", p)
	}
	k.byPath[p] = n
	k.nodes = append(k.nodes, n)
	if dep != nil {
		dep.isDep = true
	}
	k.mu.Unlock()
	k.kickNow()
	return n, nil
}

// Path is the node's chroot-relative path.
func (n *EphemeralNode) Path() string { return n.path }

// Data is the data the node should hold.
func (n *EphemeralNode) Data() []byte {
	n.k.mu.Lock()
	defer n.k.mu.Unlock()
	return bytes.Clone(n.data)
}

// Registered reports whether the node exists with its current data in the current session.
func (n *EphemeralNode) Registered() bool {
	sid := n.k.c.SessionID()
	n.k.mu.Lock()
	defer n.k.mu.Unlock()
	return n.registeredLocked(sid)
}

func (n *EphemeralNode) registeredLocked(sid int64) bool {
	return !n.removed && sid != 0 && n.owned == sid && bytes.Equal(n.written, n.data)
}

// Wait blocks until the node exists with its current data in the current session. It fails
// with a *ConflictError once another session has held the path for longer than
// Config.StaleNodeWait, with ctx's error, ErrRemoved or ErrClosed.
func (n *EphemeralNode) Wait(ctx context.Context) error {
	k := n.k
	bound := k.c.cfg.StaleNodeWait
	// A conflict is reported only after two keeper passes ended since Wait began (the first may
	// have started before the other session's node went away): it is current.
	passes := 0
	for {
		sid := k.c.SessionID()
		k.mu.Lock()
		switch {
		case n.removed:
			k.mu.Unlock()
			return ErrRemoved
		case n.registeredLocked(sid):
			k.mu.Unlock()
			return nil
		}
		pass := k.passCh
		wait := time.Hour
		if !n.since.IsZero() {
			waited := time.Since(n.since)
			if waited >= bound && passes >= 2 {
				err := &ConflictError{Path: n.path, Holder: n.holder, Waited: waited}
				k.mu.Unlock()
				return err
			}
			wait = max(bound-waited, 0)
		}
		k.mu.Unlock()
		t := time.NewTimer(wait)
		timeout := t.C
		if wait == 0 {
			k.kickNow() // look again before reporting the conflict
			timeout = nil
		}
		select {
		case <-pass:
			passes++
		case <-timeout:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-k.c.closing:
			t.Stop()
			return ErrClosed
		}
		t.Stop()
	}
}

// Set changes the node's data; the client writes it (now, or when the node is next created).
// It waits like Wait for the new data to be in place.
func (n *EphemeralNode) Set(ctx context.Context, data []byte) error {
	if err := n.setAsync(data); err != nil {
		return err
	}
	return n.Wait(ctx)
}

func (n *EphemeralNode) setAsync(data []byte) error {
	n.k.mu.Lock()
	if n.removed {
		n.k.mu.Unlock()
		return ErrRemoved
	}
	n.data = bytes.Clone(data)
	if n.data == nil {
		n.data = []byte{}
	}
	n.k.mu.Unlock()
	n.k.kickNow()
	return nil
}

// Remove stops keeping the node and deletes it if this session holds it, waiting until that is
// done. When ctx ends first (ZooKeeper unreachable) the deletion still happens once ZooKeeper is
// back, unless the node vanishes with its session first.
func (n *EphemeralNode) Remove(ctx context.Context) error {
	d := n.removeAsync()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.k.c.closing:
		return nil // closing the session deletes the node
	}
}

func (n *EphemeralNode) removeAsync() *deletion {
	k := n.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if n.removed {
		for _, d := range k.dels {
			if d.full == n.full {
				return d
			}
		}
		d := &deletion{path: n.path, full: n.full, done: make(chan struct{})}
		close(d.done)
		return d
	}
	n.removed = true
	delete(k.byPath, n.path)
	for i, m := range k.nodes {
		if m == n {
			k.nodes = append(k.nodes[:i:i], k.nodes[i+1:]...)
			break
		}
	}
	d := &deletion{path: n.path, full: n.full, barrier: n.isDep, done: make(chan struct{})}
	k.dels = append(k.dels, d)
	k.kickNow()
	return d
}

// deleteIfOurs deletes full when it is an ephemeral node of the current session and, unless
// data is nil, holds data; a missing node or anybody else's is left alone.
func (c *Client) deleteIfOurs(full string, data []byte) error {
	conn := c.conn
	for {
		d, st, err := conn.Get(full)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.EphemeralOwner != conn.SessionID() || (data != nil && !bytes.Equal(d, data)) {
			return nil
		}
		err = conn.Delete(full, st.Version)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return err
		}
	}
}

func (k *keeper) loop() {
	var retry *time.Timer
	var retryC <-chan time.Time
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-k.kick:
		case <-retryC:
			retryC = nil
		case <-k.c.closing:
			if retry != nil {
				retry.Stop()
			}
			k.endPass()
			return
		}
		again := k.pass()
		if again {
			if retry == nil {
				retry = time.NewTimer(backoff)
			} else {
				retry.Stop()
				retry.Reset(backoff)
			}
			retryC = retry.C
			backoff = min(backoff*2, 2*time.Second)
		} else {
			backoff = 100 * time.Millisecond
		}
	}
}

func (k *keeper) endPass() {
	k.mu.Lock()
	close(k.passCh)
	k.passCh = make(chan struct{})
	k.mu.Unlock()
}

// keeperWorkers bounds the ZooKeeper requests a pass has in flight (go-zookeeper pipelines
// them on its one connection): a broker with many topics registers them in a few round trips.
const keeperWorkers = 16

// each runs f(0..n-1) on up to keeperWorkers goroutines and waits for them.
func each(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, keeperWorkers)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// pass brings every registered node to its desired state; it reports whether something must be
// retried. Deletions come first, the nodes others depended on (a broker's node) after the rest;
// then creations, the nodes others depend on first. Within each step requests run in parallel.
func (k *keeper) pass() (again bool) {
	defer k.endPass()
	if !k.c.Connected() {
		return false // the session loop kicks us when a session is back
	}
	sid := k.c.SessionID()
	k.mu.Lock()
	var dels, lastDels []*deletion
	for _, d := range k.dels {
		if d.barrier {
			lastDels = append(lastDels, d)
		} else {
			dels = append(dels, d)
		}
	}
	k.mu.Unlock()
	var mu sync.Mutex // guards again and created
	for _, batch := range [][]*deletion{dels, lastDels} {
		each(len(batch), func(i int) {
			if !k.delete(batch[i]) {
				mu.Lock()
				again = true
				mu.Unlock()
			}
		})
		if again {
			return true // keep the order: the rest once these are done
		}
	}

	k.mu.Lock()
	var roots, deps []*EphemeralNode
	for _, n := range k.nodes {
		if n.dep == nil {
			roots = append(roots, n)
		} else {
			deps = append(deps, n)
		}
	}
	k.mu.Unlock()
	var created []string
	for _, batch := range [][]*EphemeralNode{roots, deps} {
		each(len(batch), func(i int) {
			if k.c.isClosed() {
				return
			}
			retry, made := k.ensure(batch[i], sid)
			mu.Lock()
			again = again || retry
			if made {
				created = append(created, batch[i].path)
			}
			mu.Unlock()
		})
	}
	if len(created) > 0 {
		sort.Strings(created)
		list := created
		if len(list) > 4 {
			list = append(list[:4:4], fmt.Sprintf("… %d more", len(created)-4))
		}
		k.c.log.Printf("zkmeta: registered %d ephemeral node(s) in session 0x%x: %s", len(created), sid, strings.Join(list, ", "))
	}
	return again
}

// delete carries out one deletion; false: retry later.
func (k *keeper) delete(d *deletion) bool {
	k.mu.Lock()
	_, superseded := k.byPath[d.path] // registered again since: the new node takes the path over
	k.mu.Unlock()
	if !superseded {
		if err := k.c.deleteIfOurs(d.full, nil); err != nil {
			if isConnErr(err) {
				return false
			}
			k.c.log.Printf("zkmeta: cannot delete %s: %v; leaving it to vanish with the session", d.path, err)
		}
	}
	k.mu.Lock()
	for i, e := range k.dels {
		if e == d {
			k.dels = append(k.dels[:i:i], k.dels[i+1:]...)
			break
		}
	}
	k.mu.Unlock()
	close(d.done)
	return true
}

// ensure makes n exist with its data in session sid. retry: try again later; created: it was
// (re)created now.
func (k *keeper) ensure(n *EphemeralNode, sid int64) (retry, created bool) {
	c, conn := k.c, k.c.conn
	k.mu.Lock()
	if n.removed || (n.owned == sid && !n.verify && bytes.Equal(n.written, n.data)) {
		k.mu.Unlock()
		return false, false
	}
	if n.dep != nil && !n.dep.registeredLocked(sid) {
		k.mu.Unlock()
		return false, false // created in the pass that registers dep (dep comes first)
	}
	data := bytes.Clone(n.data)
	verify := n.verify && n.owned == sid
	owned := n.owned == sid
	k.mu.Unlock()

	if verify {
		ok, st, err := conn.Exists(n.full)
		if err != nil {
			return true, false
		}
		k.mu.Lock()
		n.verify = false
		if !ok || st.EphemeralOwner != sid {
			n.owned = 0
			owned = false
			c.log.Printf("zkmeta: ephemeral node %s vanished although session 0x%x was kept; re-creating it", n.path, sid)
		}
		k.mu.Unlock()
	}
	if owned { // only the data differs
		_, err := conn.Set(n.full, data, -1)
		if errors.Is(err, zk.ErrNoNode) {
			k.mu.Lock()
			n.owned = 0
			k.mu.Unlock()
			return true, false
		}
		if err != nil {
			return true, false
		}
		k.setWritten(n, sid, data)
		return false, false
	}

	if n.adopt {
		// Somebody else (the election) creates this node in our session; we only take it over.
		cur, st, err := conn.Get(n.full)
		if err != nil || st.EphemeralOwner != sid {
			return true, false // not (yet) ours: look again later
		}
		if !bytes.Equal(cur, data) {
			if _, err := conn.Set(n.full, data, st.Version); err != nil {
				return true, false
			}
		}
		k.setWritten(n, sid, data)
		return false, true
	}
	err := c.createFull(n.full, data, zk.FlagEphemeral)
	if err == nil {
		k.setWritten(n, sid, data)
		return false, true
	}
	if isConnErr(err) {
		return true, false
	}
	if !errors.Is(err, zk.ErrNodeExists) {
		c.log.Printf("zkmeta: cannot create ephemeral node %s: %v; retrying", n.path, err)
		return true, false
	}

	// The node exists: ours (a create whose reply was lost), a leftover persistent node, or held
	// by another session.
	cur, st, err := conn.Get(n.full)
	if err != nil {
		return true, false // vanished meanwhile (retry at once) or connection trouble
	}
	switch st.EphemeralOwner {
	case sid:
		if !bytes.Equal(cur, data) {
			if _, err := conn.Set(n.full, data, st.Version); err != nil {
				return true, false
			}
		}
		k.setWritten(n, sid, data)
		return false, true
	case 0:
		c.log.Printf("zkmeta: a persistent node sits at %s where an ephemeral one belongs; replacing it", n.path)
		_ = conn.Delete(n.full, st.Version) // deleted or not, the retry creates the node or looks again
		return true, false
	}
	holder := st.EphemeralOwner
	bound := c.cfg.StaleNodeWait
	k.mu.Lock()
	if n.since.IsZero() || n.holder != holder {
		n.since, n.holder, n.reported = time.Now(), holder, false
		c.log.Printf("zkmeta: %s is still held by ZooKeeper session 0x%x (%q; a previous run whose session has not expired yet?); waiting up to %s for it to vanish",
			n.path, holder, cur, bound)
	} else if !n.reported && time.Since(n.since) >= bound {
		n.reported = true
		c.log.Printf("zkmeta: %s is still held by session 0x%x after %s: is another process registered with the same identity? still waiting",
			n.path, holder, time.Since(n.since).Round(time.Millisecond))
	}
	arm := n.watchSID != sid
	if arm {
		n.watchSID = sid
	}
	k.mu.Unlock()
	if !arm {
		return false, false
	}
	exists, _, ch, err := conn.ExistsW(n.full)
	if err != nil {
		k.mu.Lock()
		n.watchSID = 0
		k.mu.Unlock()
		return true, false
	}
	c.spawn(func() {
		<-ch // fires on deletion/change, or with EventNotWatching when the session or client ends
		k.mu.Lock()
		if n.watchSID == sid {
			n.watchSID = 0
		}
		k.mu.Unlock()
		k.kickNow()
	})
	return !exists, false
}

func (k *keeper) setWritten(n *EphemeralNode, sid int64, data []byte) {
	k.mu.Lock()
	if !n.since.IsZero() {
		k.c.log.Printf("zkmeta: %s: the other session's node vanished after %s; registered", n.path, time.Since(n.since).Round(time.Millisecond))
	}
	n.owned, n.written, n.verify = sid, data, false
	n.since, n.holder, n.reported = time.Time{}, 0, false
	k.mu.Unlock()
	// A Remove that ran meanwhile queued a deletion: the next pass deletes the node.
}
