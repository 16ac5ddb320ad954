package broker

import (
	"sync/atomic"

	"github.com/metaqgo/metaq/broker/store"
)

// appendFault lets this package's tests make puts fail as a full or dying
// disk would (export_test.go sets it); nil in production, where it costs one
// atomic load per put. The hook sees the topic only: handing it the
// message would make every put's Message escape to the heap.
type appendFault = atomic.Pointer[func(topic string) error]

// appendAsync is store.AppendAsync behind the test fault hook.
func (s *Server) appendAsync(m *store.Message) (store.AppendResult, *store.Flush, error) {
	if f := s.appendFault.Load(); f != nil {
		if err := (*f)(m.Topic); err != nil {
			return store.AppendResult{}, nil, err
		}
	}
	return s.store.AppendAsync(m)
}
