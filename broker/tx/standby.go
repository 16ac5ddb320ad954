package tx

// A slave's transaction table (docs/replication.md, "What a promoted slave
// starts"). A slave's commit log is its master's, byte for byte, so its
// table must neither write (check-back records, rollbacks after
// transactionCheckMax, the completion of a commit run cut by a crash) nor
// check back: it is opened with Config.Standby. When the slave is promoted,
// the broker calls Recover before the node takes its first put: the table
// is rebuilt from the records replicated since it was opened, exactly as
// Open builds it, and the check-back loop starts. A master demoted without
// a restart goes back to standby (SetStandby).

// Recover rebuilds the prepared XA transactions and the pending half
// messages from the commit log, as Open does (completing a commit run a
// crash of the old master cut short), replaces those the table holds with
// them, and leaves standby: half messages are checked back from now on.
// Call it while the broker takes no transaction command (a promotion does,
// before the node accepts puts); open transactions of sessions are kept.
func (m *Manager) Recover() error {
	fresh := &Manager{
		cfg:    m.cfg,
		st:     m.st,
		log:    m.log,
		xa:     make(map[string]*Tx),
		halves: make(map[int64]*half),
		groups: make(map[string]*group),
	}
	if err := fresh.recover(); err != nil {
		return err
	}
	m.mu.Lock()
	for k, t := range m.xa {
		if t.state == stPrepared {
			delete(m.xa, k)
		}
	}
	for k, t := range fresh.xa {
		if _, open := m.xa[k]; !open {
			m.xa[k] = t
		}
	}
	m.halves, m.dueHead, m.dueTail = fresh.halves, fresh.dueHead, fresh.dueTail
	m.pending.Store(fresh.pending.Load())
	m.kept = 0 // the halves rebuilt from the log keep no bodies
	m.mu.Unlock()
	m.standby.Store(false)
	return nil
}

// SetStandby stops (true) or resumes (false) the check-back loop and the
// writes of the table: a master demoted without a restart is a slave again.
func (m *Manager) SetStandby(on bool) { m.standby.Store(on) }

// Standby reports whether the table is a slave's (SetStandby, Config.Standby).
func (m *Manager) Standby() bool { return m.standby.Load() }
