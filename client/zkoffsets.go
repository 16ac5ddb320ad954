package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/metaqgo/metaq/zkmeta"
)

// NewZKOffsetStore stores group's offsets in ZooKeeper, MetaQ's way:
// /consumers/<group>/offsets/<topic>/<brokerId>-<partition> holds
// "<msgId>-<next offset>". Commits are written at once, and never move a
// partition's offset backwards (see zkOffsetStore).
func NewZKOffsetStore(zk *zkmeta.Client, group string) OffsetStore {
	return &zkOffsetStore{zk: zk, group: group, own: map[partKey]Offset{}, ver: map[partKey]int32{}}
}

// zkOffsetStore writes each commit as a compare-and-set: read the node and
// its version, write only when the stored offset is below the new one, with
// the version read (a write that lost the race reads again). A write whose
// caller gave up (its context ended: a periodic commit past RequestTimeout)
// can still reach ZooKeeper later, after newer commits — the final one of
// Close, or the first ones of the partition's next owner — and an
// unconditional write would then move the group back and redeliver what was
// consumed. Conditional, such a late write finds the node moved on (its
// version changed, and the offset read again is at or past its own) and
// writes nothing.
//
// The one move back allowed is the consumer's own: when the broker moved the
// consumer back (messages lost on the broker, the partition's end below the
// committed offset), a commit below the stored offset is written if the node
// still holds what this store last read or wrote itself (own).
type zkOffsetStore struct {
	zk    *zkmeta.Client
	group string

	mu  sync.Mutex
	own map[partKey]Offset // last offset read (Load) or written per partition
	// ver is the node version this store's own last write produced (absent:
	// unknown). A batch commit (zkoffsets_batch.go) writes on that version.
	ver map[partKey]int32

	// writeHook, when set (tests), runs each conditional write: it calls
	// send, and may delay it, from the goroutine that sends the write.
	writeHook atomic.Pointer[offsetWriteHook]
}

type offsetWriteHook func(topic string, p Partition, o Offset, send func() error) error

func (s *zkOffsetStore) Load(ctx context.Context, topic string, p Partition) (Offset, bool, error) {
	o, ok, err := s.zk.LoadOffset(ctx, s.group, topic, p)
	if err == nil && ok {
		s.remember(partKey{topic, p}, o)
	}
	return o, ok, err
}

func (s *zkOffsetStore) remember(k partKey, o Offset) {
	s.mu.Lock()
	s.own[k] = o
	delete(s.ver, k) // read, not written: the version is not known here
	s.mu.Unlock()
}

// rememberWrite records this store's own write of o and the node version it
// produced (-1: unknown).
func (s *zkOffsetStore) rememberWrite(k partKey, o Offset, version int32) {
	s.mu.Lock()
	s.own[k] = o
	if version >= 0 {
		s.ver[k] = version
	} else {
		delete(s.ver, k)
	}
	s.mu.Unlock()
}

func (s *zkOffsetStore) Commit(ctx context.Context, topic string, p Partition, o Offset) error {
	k := partKey{topic, p}
	s.mu.Lock()
	from, known := s.own[k]
	s.mu.Unlock()
	path := s.zk.Paths().Offset(s.group, topic, p)
	data := []byte(o.String())
	for {
		cur, st, err := s.zk.Get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			err = s.zk.CreatePersistent(ctx, path, data) // conditional too: fails when it exists
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
			if err == nil {
				s.rememberWrite(k, o, 0)
			}
			return err
		}
		if err != nil {
			return err
		}
		// An unreadable node is overwritten (as before: the consumer's
		// position is the better value).
		if stored, perr := zkmeta.ParseOffset(cur); perr == nil && stored.Offset >= o.Offset {
			rewind := known && stored == from && o.Offset < from.Offset
			if !rewind {
				return nil // at or past o already: a late write, or a newer owner's
			}
		}
		nv, err := s.setVersion(ctx, topic, p, o, path, data, st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue // written meanwhile: compare again
		}
		if err == nil {
			s.rememberWrite(k, o, nv)
		}
		return err
	}
}

// setVersion writes data if the node's version is still version. The write
// runs in its own goroutine so that ctx bounds the wait; abandoned, it is
// harmless (conditional).
func (s *zkOffsetStore) setVersion(ctx context.Context, topic string, p Partition, o Offset, path string, data []byte, version int32) (int32, error) {
	conn, full := s.zk.Conn(), s.zk.FullPath(path)
	nv := int32(-1) // the node's new version, when the write says so
	send := func() error {
		st, err := conn.Set(full, data, version)
		if err == nil && st != nil {
			nv = st.Version
		}
		return err
	}
	done := make(chan error, 1)
	go func() {
		if h := s.writeHook.Load(); h != nil {
			done <- (*h)(topic, p, o, send)
			return
		}
		done <- send()
	}()
	select {
	case err := <-done:
		return nv, err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (s *zkOffsetStore) Flush(context.Context) error { return nil }
func (s *zkOffsetStore) Close() error                { return nil }
