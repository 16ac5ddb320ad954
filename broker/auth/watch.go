package auth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// ReadUsersFile reads and parses a users file.
func ReadUsersFile(path string) (*Users, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxUsersFile+1))
	if err != nil {
		return nil, nil, err
	}
	u, err := ParseUsers(data)
	if err != nil {
		return nil, nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return u, data, nil
}

// WatchFile loads path into a now and then follows it: every interval
// (default 1s) the file is stat'ed, and once its inode, size or modification
// time has changed and then stayed the same for a whole interval, it is re-read.
// Waiting for the file to settle keeps a half-written file (an editor or
// `cat >` truncates, then writes) from being loaded as an empty user set;
// a settled file that does not parse keeps the previous users (and is
// logged). It returns once the first load is done; the watch runs until ctx
// ends, and done is closed then.
func (a *Authorizer) WatchFile(ctx context.Context, path string, interval time.Duration) (done <-chan struct{}, err error) {
	u, data, err := ReadUsersFile(path)
	if err != nil {
		return nil, err
	}
	a.SetUsers(u)
	if interval <= 0 {
		interval = time.Second
	}
	st, _ := os.Stat(path)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		t := time.NewTicker(interval)
		defer t.Stop()
		loaded, seen := st, st // the stat last loaded; the stat last observed
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, err := os.Stat(path)
			if err != nil {
				a.log.Error("users file unreadable; keeping the previous users", "path", path, "err", err)
				continue
			}
			if sameStat(cur, loaded) {
				seen = cur
				continue
			}
			if !sameStat(cur, seen) {
				seen = cur // still changing: wait until it settles
				continue
			}
			loaded = cur
			u, nd, err := ReadUsersFile(path)
			if err != nil {
				a.log.Error("users file does not parse; keeping the previous users", "path", path, "err", err)
				continue
			}
			if bytes.Equal(nd, data) {
				continue
			}
			data = nd
			a.SetUsers(u)
			a.log.Info("users file reloaded", "path", path, "users", len(u.byName))
		}
	}()
	return ch, nil
}

// sameStat reports whether two stats of the users file show the same file
// (inode: a file replaced by rename is a new one), size and modification
// time (a nil stat matches nothing). The modification time alone is not
// enough: it has the kernel's coarse clock granularity, so two same-size
// writes a few milliseconds apart can share it.
func sameStat(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// WatchData follows a stream of users-file contents (ZooKeeper's
// <zkRoot>/config/users, from zkmeta's WatchData: nil = the node does not
// exist, then nobody can authenticate). It returns when ch closes.
func (a *Authorizer) WatchData(ch <-chan []byte, what string) {
	for data := range ch {
		u, err := ParseUsers(data)
		if err != nil {
			a.log.Error("users node does not parse; keeping the previous users", "node", what, "err", err)
			continue
		}
		a.SetUsers(u)
		a.log.Info("users reloaded from ZooKeeper", "node", what, "users", len(u.byName))
	}
}
