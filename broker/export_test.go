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

// SetWritersFault makes the promotion's startWriters fail at step ("tx":
// rebuilding the transaction table, "pop": starting the delivery service)
// with f's error (nil f: none). Set it before the promotion.
func SetWritersFault(b *Broker, f func(step string) error) { b.writersFault = f }

// Writers reports which services that write are running: the delay timer,
// the transaction table out of standby, the delivery service.
func Writers(b *Broker) (delay, tx, pop bool) {
	srv := b.Server
	return srv.delayService() != nil, !srv.tx.Standby(), srv.pop.Load() != nil
}

// TopicTableLen is the number of topics interned by s (topics.go).
func TopicTableLen(s *Server) int { return len(s.topics.all()) }

// StorePartitions is the number of partitions s's store keeps state for in
// the topics named prefix…, written or not, and the partitions long-polling
// gets wait for before they exist (store/wait.go).
func StorePartitions(s *Server, prefix string) (parts, pending int) {
	return s.store.PartitionCount(prefix), s.store.PendingWaits()
}
