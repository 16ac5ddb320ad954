package store

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// fileCache keeps at most max index files open (least recently used are
// closed and reopened on demand) and remembers which files and directories
// were written since the last checkpoint so the checkpoint can make them
// durable.
//
// Lock rules: c.mu is a leaf lock (taken after p.ixMu, never before). It is
// not held across pread/pwrite/fsync: a file closed by eviction while a
// pread/pwrite is in flight makes that call fail with os.ErrClosed (os.File
// is safe for that), and the caller retries with a reopened file.
type fileCache struct {
	mu     sync.Mutex
	max    int
	open   int
	root   ixFile // LRU sentinel: root.next is the most recently used
	dirty  []*ixFile
	dirs   map[string]struct{}
	hooks  *faultHooks
	closed bool // after closeAll nothing is (re)opened
}

// syncfsThreshold: above this many dirty files+directories a checkpoint uses
// one syncfs(2) instead of one fdatasync per file.
const syncfsThreshold = 64

func newFileCache(max int, h *faultHooks) *fileCache {
	c := &fileCache{max: max, dirs: make(map[string]struct{}), hooks: h}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

func (c *fileCache) unlinkLocked(x *ixFile) {
	x.prev.next = x.next
	x.next.prev = x.prev
	x.prev, x.next = nil, nil
}

func (c *fileCache) pushFrontLocked(x *ixFile) {
	x.prev = &c.root
	x.next = c.root.next
	c.root.next.prev = x
	c.root.next = x
}

// adopt registers a newly created file (open as f) and its directories for
// the next checkpoint sync.
func (c *fileCache) adopt(x *ixFile, f *os.File, dirs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		f.Close()
		return
	}
	x.f = f
	c.pushFrontLocked(x)
	c.open++
	for _, d := range dirs {
		c.dirs[d] = struct{}{}
	}
	c.evictLocked(x)
}

func (c *fileCache) markDirDirty(dir string) {
	c.mu.Lock()
	c.dirs[dir] = struct{}{}
	c.mu.Unlock()
}

// fileLocked returns x's open fd, opening it (and evicting) if needed.
func (c *fileCache) fileLocked(x *ixFile) (*os.File, error) {
	if c.closed {
		return nil, ErrClosed
	}
	if x.gone {
		return nil, errGone
	}
	if x.f != nil {
		if c.root.next != x {
			c.unlinkLocked(x)
			c.pushFrontLocked(x)
		}
		return x.f, nil
	}
	f, err := os.OpenFile(x.path, os.O_RDWR, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, errGone
		}
		return nil, ioError("open index", err)
	}
	x.f = f
	c.pushFrontLocked(x)
	c.open++
	c.evictLocked(x)
	return f, nil
}

// evictLocked closes least recently used files beyond the cap (never keep).
func (c *fileCache) evictLocked(keep *ixFile) {
	for c.open > c.max {
		v := c.root.prev
		if v == &c.root || v == keep {
			return
		}
		c.closeLocked(v)
	}
}

func (c *fileCache) closeLocked(x *ixFile) {
	if x.f == nil {
		return
	}
	c.unlinkLocked(x)
	x.f.Close()
	x.f = nil
	c.open--
}

// pwrite writes b at off in x and then marks x dirty for the next
// checkpoint. After the write, not before: a checkpoint's syncDirty that
// takes the dirty list while the pwrite is in flight would otherwise fsync
// the file before the bytes land and leave it marked clean, and the next
// checkpoint would claim units it never synced. Marked after the write, the
// file is either on the list a sync takes (that sync's fsync follows the
// write) or goes on the next list.
func (c *fileCache) pwrite(x *ixFile, b []byte, off int64) error {
	for {
		c.mu.Lock()
		f, err := c.fileLocked(x)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		err = c.hooks.pwrite(f, b, off)
		if errors.Is(err, os.ErrClosed) {
			continue // evicted meanwhile: nothing was written
		}
		c.markDirty(x) // even after a failed write: part of it may have landed
		if err != nil {
			return ioError("write index "+x.path, err)
		}
		return nil
	}
}

// markDirty puts x on the list the next syncDirty fsyncs.
func (c *fileCache) markDirty(x *ixFile) {
	c.mu.Lock()
	if !x.dirty {
		x.dirty = true
		c.dirty = append(c.dirty, x)
	}
	c.mu.Unlock()
}

// pread fills b from off in x (reading past the written units yields zeros:
// the file is IndexFileSize long).
func (c *fileCache) pread(x *ixFile, b []byte, off int64) error {
	for {
		c.mu.Lock()
		f, err := c.fileLocked(x)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		_, err = f.ReadAt(b, off)
		if errors.Is(err, os.ErrClosed) {
			continue
		}
		if err != nil {
			return ioError("read index "+x.path, err)
		}
		return nil
	}
}

// cachedPages counts the pages of [off, off+n) of x in the page cache
// (cachestat(2) on the cached descriptor, under mu so it is not closed
// meanwhile; no allocation).
func (c *fileCache) cachedPages(x *ixFile, off, n int64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := c.fileLocked(x)
	if err != nil {
		return 0, err
	}
	var cs unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &cs, 0)
	return cs.Cache, err
}

// zeroFrom empties [off, size) of x: truncate down to off then back to size,
// which frees the blocks (a hole reads as zeros).
func (c *fileCache) zeroFrom(x *ixFile, off, size int64) error {
	if err := os.Truncate(x.path, off); err != nil {
		return ioError("truncate index", err)
	}
	if err := os.Truncate(x.path, size); err != nil {
		return ioError("truncate index", err)
	}
	c.markDirty(x)
	return nil
}

// remove closes and deletes x.
func (c *fileCache) remove(x *ixFile) {
	c.mu.Lock()
	c.closeLocked(x)
	x.gone = true
	c.mu.Unlock()
	os.Remove(x.path)
}

// syncDirty makes every file and directory written since the last call
// durable: one fdatasync per file (reopening evicted ones) and one fsync per
// directory, or a single syncfs when there are many. On failure the files
// stay dirty for the next attempt. A file is marked dirty only once its
// write has returned (pwrite), so a write still in flight when the list is
// taken puts its file on the next list; a caller that must cover a write
// (the checkpoint, for the units below the dispatched position it read
// before calling) only needs that write to have returned first.
func (c *fileCache) syncDirty(anyDir string) error {
	c.mu.Lock()
	dirty := c.dirty
	c.dirty = nil
	for _, x := range dirty {
		x.dirty = false
	}
	dirs := c.dirs
	c.dirs = make(map[string]struct{})
	c.mu.Unlock()
	if len(dirty) == 0 && len(dirs) == 0 {
		return nil
	}
	var err error
	if len(dirty)+len(dirs) > syncfsThreshold {
		err = syncfs(anyDir)
	} else {
		for _, x := range dirty {
			if e := c.syncFile(x); e != nil && e != errGone {
				err = e
				break
			}
		}
		if err == nil {
			for d := range dirs {
				if e := syncDir(d); e != nil && !os.IsNotExist(e) {
					err = ioError("fsync dir "+d, e)
					break
				}
			}
		}
	}
	if err != nil {
		c.mu.Lock()
		for _, x := range dirty {
			if !x.dirty && !x.gone {
				x.dirty = true
				c.dirty = append(c.dirty, x)
			}
		}
		for d := range dirs {
			c.dirs[d] = struct{}{}
		}
		c.mu.Unlock()
	}
	return err
}

func (c *fileCache) syncFile(x *ixFile) error {
	for {
		c.mu.Lock()
		f, err := c.fileLocked(x)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		// os.File.Sync (fsync) is safe against a concurrent Close by eviction
		// (it fails with os.ErrClosed instead of syncing a reused fd number).
		err = f.Sync()
		if err == nil {
			return nil
		}
		if errors.Is(err, os.ErrClosed) {
			continue
		}
		return ioError("fsync "+x.path, err)
	}
}

// closeAll closes every open file.
func (c *fileCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for c.root.next != &c.root {
		c.closeLocked(c.root.next)
	}
}

func (c *fileCache) dirtyCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dirty) + len(c.dirs)
}

func (c *fileCache) openCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// syncfs flushes the whole filesystem holding dir.
func syncfs(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return ioError("open "+dir, err)
	}
	defer d.Close()
	return ioError("syncfs", unix.Syncfs(int(d.Fd())))
}
