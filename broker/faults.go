package broker

import (
	"sync/atomic"

	"github.com/metaqgo/metaq/broker/store"
)

// appendFault lets this package's tests make puts fail as a full or dying
// disk would (export_test.go sets it); nil in production, where it costs one
// atomic load per put.
type appendFault = atomic.Pointer[func(*store.Message) error]

// appendAsync is store.AppendAsync behind the test fault hook.
func (s *Server) appendAsync(m *store.Message) (store.AppendResult, *store.Flush, error) {
	if f := s.appendFault.Load(); f != nil {
		if err := (*f)(m); err != nil {
			return store.AppendResult{}, nil, err
		}
	}
	return s.store.AppendAsync(m)
}
