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
	SysFlag   uint16 // the message's (protocol.SysFlagTraced: its producer traces it)
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

// emitEnds tells OnEvent the outcomes one appendEnds run appended: res[0]
// is its op record, res[1:] the committed messages in the order of items.
// The check scan's rollbacks (its own scratch) are EvExpired.
func (m *Manager) emitEnds(sc *endScratch, items []endItem, res []store.AppendResult, err error) {
	if m.cfg.OnEvent == nil || err != nil {
		return
	}
	k := 1
	for i := range items {
		it := &items[i]
		if it.req.Err != nil {
			continue
		}
		if it.a == Commit {
			if k < len(res) {
				m.emit(Event{Kind: EvCommit, ID: it.h.id, Group: it.h.group, Topic: it.msg.Topic, Partition: it.msg.Partition,
					Props: it.msg.Properties, SysFlag: it.msg.SysFlag, Result: res[k]})
			}
			k++
		}
		kind := EvEnd
		if sc == &m.scanEnd {
			kind = EvExpired
		}
		m.emit(Event{Kind: kind, ID: it.h.id, Group: it.h.group, Checks: it.h.checks, Action: it.a})
	}
}
