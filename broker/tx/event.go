package tx

import "github.com/metaqgo/metaq/broker/store"

// Events of half messages for Config.OnEvent (the broker's message trace,
// docs/trace.md). Each is one line at the place it happens; with no
// OnEvent they cost a nil check.

// EventKind says what happened to a half message.
type EventKind uint8

const (
	EvHalf    EventKind = iota + 1 // stored in %TX_HALF% (Props, Result: the half record, Topic/Partition: the real ones)
	EvPending                      // found pending when the table was rebuilt at start (Props: the half record's)
	EvCheck                        // checked back (Checks: this is the n-th; Sent: a live producer of the group was asked)
	EvEnd                          // the producer's txend was applied (Action; Checks: checks before it)
	EvCommit                       // committed: the real message appended (Result, Topic/Partition, Props: its own)
	EvExpired                      // rolled back after CheckMax checks without an outcome (Checks)
)

// Event is what Config.OnEvent receives. Props aliases the record or the
// message: valid during the call only.
type Event struct {
	Kind      EventKind
	ID        int64 // the half message's id (what txend and check use)
	Group     string
	Checks    int
	Sent      bool
	Action    Action
	Topic     string
	Partition int32
	Props     []byte
	Result    store.AppendResult
}

// emit tells OnEvent. It is called on the paths of puts, txend and the
// check scan (sometimes with m.mu held): OnEvent must not block and must
// not call the Manager.
func (m *Manager) emit(e Event) {
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(&e)
	}
}

// appendRunFirst is appendRun that also returns the first message's result.
func (m *Manager) appendRunFirst(msgs []store.Message) (store.AppendResult, *store.Flush, error) {
	res := make([]store.AppendResult, len(msgs))
	f, err := m.st.AppendBatch(msgs, res)
	if err == nil {
		err = m.writeOut(f)
	}
	return res[0], f, err
}
