package broker

import "github.com/metaqgo/metaq/broker/store"

// SetAppendFault makes every put of s fail with f's error (nil f: none).
func SetAppendFault(s *Server, f func(*store.Message) error) {
	if f == nil {
		s.appendFault.Store(nil)
		return
	}
	s.appendFault.Store(&f)
}
