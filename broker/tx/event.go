package tx

import (
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

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

	// Messages of the `transaction` command's local and XA transactions
	// (only those stored with protocol.SysFlagTraced: the others are not
	// tracked). ID is the provisional id the put was answered with (0 when
	// it is not known: a prepared transaction committed after a restart),
	// Key the transaction's.
	EvTxPut      // a put held in a transaction (Topic/Partition, Props, SysFlag)
	EvTxPrepared // XA PREPARE stored it in %TX_HALF% (Result: the half record)
	EvTxCommit   // committed: appended to its partition (Result; Topic/Partition, Props)
	EvTxRollback // rolled back (Reason); Topic/Partition when still known
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
	Key       string // EvTx…: the transaction id (TX:… or XID:…)
	TwoPhase  bool   // EvTxCommit: COMMIT_TWO_PHASE
	Reason    string // EvTxRollback: why
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

// traceID marks t's traced messages: ids[i] is message i's provisional
// id when it is traced, else 0 (nil when nothing is traced).
func (t *Tx) traceID(i int, id int64) {
	for len(t.ids) < i {
		t.ids = append(t.ids, 0)
	}
	t.ids = append(t.ids, id)
}

// emitTxRun tells OnEvent the traced messages of a transaction's run
// appended at commit: msgs[i] is message i, res[i] its result.
func (m *Manager) emitTxRun(t *Tx, msgs []store.Message, res []store.AppendResult, twoPhase bool) {
	if m.cfg.OnEvent == nil {
		return
	}
	for i := range msgs {
		mm := &msgs[i]
		if mm.SysFlag&protocol.SysFlagTraced == 0 || i >= len(res) {
			continue
		}
		var id int64
		if i < len(t.ids) {
			id = t.ids[i]
		}
		m.emit(Event{Kind: EvTxCommit, ID: id, Key: t.key, Topic: mm.Topic, Partition: mm.Partition, Props: mm.Properties,
			SysFlag: mm.SysFlag, Result: res[i], TwoPhase: twoPhase})
	}
}

// emitTxRollbackLocked tells OnEvent t's traced messages were rolled back
// (m.mu held or not: OnEvent does not call the Manager).
func (m *Manager) emitTxRollbackLocked(t *Tx, why string) {
	if m.cfg.OnEvent == nil {
		return
	}
	for i, id := range t.ids {
		if id == 0 {
			continue
		}
		e := Event{Kind: EvTxRollback, ID: id, Key: t.key, Reason: why, SysFlag: protocol.SysFlagTraced, Partition: -1}
		if i < len(t.msgs) {
			mm := &t.msgs[i]
			e.Topic, e.Partition, e.Props = mm.Topic, mm.Partition, mm.Properties
		}
		m.emit(e)
	}
}
