package store

// crash stops the store the way kill -9 would, as far as the disk is
// concerned: no final flush, no checkpoint, the abort marker stays, the
// preallocated segment stays. The page cache keeps what was written (as
// after a process crash). Goroutines are stopped and files closed so the
// test can reopen the directory in the same process.
func (s *Store) crash() {
	s.mu.Lock()
	s.closed = true
	s.isClosed.Store(true)
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	f := s.pending
	s.pending = nil
	s.mu.Unlock()
	if f != nil {
		f.err = ErrClosed
		close(f.done)
	}
	s.closeAllWaiters()
	s.pre.mu.Lock()
	if g := s.pre.ready; g != nil {
		g.release() // leave the file, as a crash would
		s.pre.ready = nil
	}
	s.pre.mu.Unlock()
	s.closeFiles()
	s.unlockDir()
}

// activeSegment returns the active segment's path and the write offset in it.
func (s *Store) activeSegment() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active.path, s.wpos - s.active.base
}
