package zkmeta

import (
	"context"
	"errors"
	"path"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// reader is what the typed read functions use, so that one function serves one-shot reads
// (plainReader) and re-arming watches (watchReader). Paths are absolute (chroot applied).
type reader interface {
	// children returns the sorted children of full; nil, nil when full does not exist.
	children(full string) ([]string, error)
	// get returns full's data; ok is false when it does not exist.
	get(full string) (data []byte, ok bool, err error)
}

type plainReader struct{ conn *zk.Conn }

func (r plainReader) children(full string) ([]string, error) {
	kids, _, err := r.conn.Children(full)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(kids)
	return kids, nil
}

func (r plainReader) get(full string) ([]byte, bool, error) {
	d, _, err := r.conn.Get(full)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return d, true, nil
}

// read runs a typed read function once, retrying across connection loss.
func read[T any](ctx context.Context, c *Client, f func(reader) (T, error)) (T, error) {
	var v T
	err := c.do(ctx, func() error {
		var err error
		v, err = f(plainReader{c.conn})
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// watchReader reads like plainReader but leaves a ZooKeeper watch on everything it read, at most
// one per node and kind (watches fire once: a fired one is re-armed by the next read). When the
// node is missing it watches for its creation.
type watchReader struct {
	c     *Client
	mu    sync.Mutex
	armed map[wkey]bool
	fired chan struct{} // cap 1
}

type wkey struct {
	path string
	kind byte // 'c' children, 'd' data, 'e' existence
}

func newWatchReader(c *Client) *watchReader {
	return &watchReader{c: c, armed: map[wkey]bool{}, fired: make(chan struct{}, 1)}
}

func (w *watchReader) isArmed(k wkey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.armed[k]
}

// track marks k armed and waits, in a goroutine, for the watch to fire (a change, or
// EventNotWatching when the session expires or the client closes: go-zookeeper always closes the
// channel in the end).
func (w *watchReader) track(k wkey, ch <-chan zk.Event) {
	w.mu.Lock()
	w.armed[k] = true
	w.mu.Unlock()
	w.c.spawn(func() {
		<-ch
		w.mu.Lock()
		delete(w.armed, k)
		w.mu.Unlock()
		select {
		case w.fired <- struct{}{}:
		default:
		}
	})
}

// watchExistence arms a creation watch on a missing node; it reports whether the node exists
// after all (then the caller reads it again).
func (w *watchReader) watchExistence(full string) (bool, error) {
	k := wkey{full, 'e'}
	if w.isArmed(k) {
		return false, nil
	}
	ok, _, ch, err := w.c.conn.ExistsW(full)
	if err != nil {
		return false, err
	}
	w.track(k, ch)
	return ok, nil
}

func (w *watchReader) children(full string) ([]string, error) {
	kids, _, err := watchedRead(w, wkey{full, 'c'}, w.c.conn.Children, w.c.conn.ChildrenW)
	sort.Strings(kids)
	return kids, err
}

func (w *watchReader) get(full string) ([]byte, bool, error) {
	return watchedRead(w, wkey{full, 'd'}, w.c.conn.Get, w.c.conn.GetW)
}

// watchedRead reads k.path with readW, arming a watch of k's kind, or with read when that watch
// is still armed. When the node is missing it arms a creation watch instead and reports ok false
// (reading again, up to three times, when the node appeared meanwhile).
func watchedRead[T any](w *watchReader, k wkey,
	read func(string) (T, *zk.Stat, error),
	readW func(string) (T, *zk.Stat, <-chan zk.Event, error)) (v T, ok bool, err error) {
	var zero T
	for range 3 {
		if w.isArmed(k) {
			v, _, err = read(k.path)
		} else {
			var ch <-chan zk.Event
			v, _, ch, err = readW(k.path)
			if err == nil {
				w.track(k, ch)
			}
		}
		if err == nil {
			return v, true, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return zero, false, err
		}
		exists, err := w.watchExistence(k.path)
		if err != nil || !exists {
			return zero, false, err
		}
	}
	return zero, false, nil
}

// watch runs f now and again after every change of what it read, and sends each result that
// differs from the previous one on the returned channel. The channel holds only the latest
// result (a slow reader skips intermediate states, never the last one) and is closed when ctx is
// done or the client closes. While ZooKeeper is unreachable nothing is sent; after a reconnection
// or a session expiry everything is read again and the watches are re-armed.
func watch[T any](ctx context.Context, c *Client, what string, f func(reader) (T, error)) <-chan T {
	out := make(chan T, 1)
	w := newWatchReader(c)
	started := c.spawn(func() {
		defer close(out)
		var last T
		sent := false
		backoff := 50 * time.Millisecond
		for {
			if err := c.WaitConnected(ctx); err != nil {
				return
			}
			v, err := f(w)
			if err != nil {
				if c.isClosed() || ctx.Err() != nil {
					return
				}
				if !isConnErr(err) {
					c.log.Printf("zkmeta: watch %s: %v; retrying in %s", what, err, backoff)
				}
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				case <-c.closing:
					t.Stop()
					return
				}
				backoff = min(backoff*2, 2*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			if !sent || !reflect.DeepEqual(last, v) {
				select { // replace an unread older value
				case <-out:
				default:
				}
				out <- v
				last, sent = v, true
			}
			select {
			case <-w.fired:
			case <-ctx.Done():
				return
			case <-c.closing:
				return
			}
		}
	})
	if !started {
		close(out)
	}
	return out
}

// WatchChildren sends the sorted children of p now and after every change (nil while p does not
// exist), re-arming the ZooKeeper watch each time; see the Watch* methods for the channel's rules.
func (c *Client) WatchChildren(ctx context.Context, p string) <-chan []string {
	full := c.FullPath(p)
	return watch(ctx, c, p, func(r reader) ([]string, error) { return r.children(full) })
}

// WatchData sends p's data now and after every change (nil while p does not exist).
func (c *Client) WatchData(ctx context.Context, p string) <-chan []byte {
	full := c.FullPath(p)
	return watch(ctx, c, p, func(r reader) ([]byte, error) {
		d, ok, err := r.get(full)
		if !ok || err != nil {
			return nil, err
		}
		if d == nil {
			d = []byte{}
		}
		return d, nil
	})
}

func join(dir, name string) string { return path.Join(dir, name) }
