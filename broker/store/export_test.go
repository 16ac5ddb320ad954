package store

// crash stops the store the way kill -9 would, as far as the disk is
// concerned: no final flush, no checkpoint, the abort marker stays, the
// preallocated segment stays. The page cache keeps what was written (as
// after a process crash). Goroutines are stopped and files closed so the
// test can reopen the directory in the same process.
func (s *Store) crash() {
	s.clog.mu.Lock()
	s.clog.closed = true
	s.isClosed.Store(true)
	s.clog.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.clog.mu.Lock()
	f := s.clog.pending
	s.clog.pending = nil
	s.clog.mu.Unlock()
	if f != nil {
		f.err = ErrClosed
		close(f.done)
	}
	s.closeAllWaiters()
	s.clog.pre.mu.Lock()
	if g := s.clog.pre.ready; g != nil {
		g.release() // leave the file, as a crash would
		s.clog.pre.ready = nil
	}
	s.clog.pre.mu.Unlock()
	s.closeFiles()
	s.wm.close()
	s.unlockDir()
}

// activeSegment returns the active segment's path and the write offset in it.
func (s *Store) activeSegment() (string, int64) {
	s.clog.mu.Lock()
	defer s.clog.mu.Unlock()
	return s.clog.active.path, s.clog.wpos - s.clog.active.base
}
