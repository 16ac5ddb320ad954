package broker

// SetAppendFault makes the puts of s fail with f's error for their topic
// (nil f: none).
func SetAppendFault(s *Server, f func(topic string) error) {
	if f == nil {
		s.appendFault.Store(nil)
		return
	}
	s.appendFault.Store(&f)
}
