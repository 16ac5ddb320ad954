package store

import (
	"errors"
	"os"
	"runtime"
	"time"
)

// Flush is one group-commit round, shared by every append registered on it.
// Rounds are allocated per round, not per message.
//
// Group commit: an appender registers on l.pending under the append lock (the
// first one of a round allocates it and wakes the flusher). The flusher
// swaps the pending round out and records the write position under the
// lock, then fdatasyncs every segment holding unflushed bytes WITHOUT the
// lock (appends keep registering on the next round meanwhile), publishes the
// flushed position — which, in sync mode, is also the limit readers and the
// dispatcher may see — and closes the round's done channel. The more
// concurrent appenders, the more messages share one fdatasync.
//
// Closed-loop appenders (each waits for its round before appending again)
// re-register one by one after a round completes; a flusher that swapped
// the next round at once would sync only the first few of them and split the
// group in two (and a target of "as many as last time" keeps it split: with
// 64 appenders rounds settled at ~45 members). So when a round completes the
// flusher expects back its members plus those that registered while it
// synced (l.roundGoal: the number of concurrent appenders in a closed loop),
// and before swapping the next round waits until it has that many (the
// member that completes it signals l.roundFull) or for at most the last
// fsync's duration (20µs..500µs): a bounded delay that keeps rounds as large
// as the number of concurrent appenders. (Measured on the dev VM with 64
// closed-loop appenders: ~63 members per round instead of ~32 without
// waiting and ~51 with a quarter of the fsync as the bound, ~+30% msg/s
// over the latter; with 512 gathering everyone takes longer than the bound
// and rounds are cut at it.) While it waits, the flusher writes out what the
// members staged so far (once at least earlyWriteMin bytes are), so only the
// last member's records are written between the wait and the fdatasync.
type Flush struct {
	done chan struct{}
	err  error // set before done is closed
	n    int   // members; guarded by l.mu until the round is swapped out
	// gate is the replication gate installed when the round was opened.
	// A round opened on a sync-replicated master is held even if the gate
	// is removed (demotion) before its fsync ends: removing the gate must
	// never turn an unconfirmed round into a 200.
	gate *ReplicationGate
}

// Done is closed once the round is durable (or failed).
func (f *Flush) Done() <-chan struct{} { return f.done }

// Err is the round's error (nil = durable); valid after Done is closed.
func (f *Flush) Err() error { return f.err }

// Wait waits for the round and returns its error.
func (f *Flush) Wait() error {
	<-f.done
	return f.err
}

// flushLoop is the flusher goroutine. Sync mode: one round per wake-up.
// Async mode: wakes after UnflushThreshold messages, on a roll, and every
// UnflushInterval.
func (l *commitLog) flushLoop() {
	defer l.wg.Done()
	var tick <-chan time.Time
	if !l.sync {
		t := time.NewTicker(l.cfg.UnflushInterval)
		defer t.Stop()
		tick = t.C
	}
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	for {
		select {
		case <-l.flushKick:
		case <-tick:
		case <-l.stop:
			return
		}
		if l.sync {
			l.gatherRound(delay)
		}
		_ = l.flushOnce()
	}
}

// gatherRound waits (bounded) for the pending round to grow to the number
// of appenders expected back (see Flush).
func (l *commitLog) gatherRound(delay *time.Timer) {
	l.mu.Lock()
	f := l.pending
	goal := l.roundGoal
	if f == nil || goal <= 1 || f.n >= goal {
		l.mu.Unlock()
		return
	}
	l.roundTarget = goal
	l.mu.Unlock()
	select { // drop a stale signal
	case <-l.roundFull:
	default:
	}
	select { // and a stale growth signal
	case <-l.roundGrew:
	default:
	}
	d := min(max(time.Duration(l.lastFsync.Load()), 20*time.Microsecond), 500*time.Microsecond)
	delay.Reset(d)
	// While it waits, the flusher writes out what the members appended so
	// far (stage.go): otherwise the whole round's pwrite runs after the
	// wait, between the last member and the fdatasync. An append kicks
	// roundGrew once at least earlyWriteMin bytes are staged, so small puts
	// are not written out one by one.
gather:
	for {
		if l.written.Load()-l.stage.written.Load() >= earlyWriteMin {
			_, _ = l.writeStaged(l.written.Load()) // a failure is sticky: flushOnce sees it
		}
		select {
		case <-l.roundFull:
			break gather
		case <-l.roundGrew:
		case <-delay.C:
			break gather
		case <-l.stop:
			break gather
		}
	}
	delay.Stop()
	l.mu.Lock()
	l.roundTarget = 0
	l.mu.Unlock()
}

// earlyWriteMin is how many staged bytes make a gathering flusher write
// them out before the round is complete (gatherRound).
const earlyWriteMin = 64 << 10

// flushOnce makes everything appended so far durable and completes the
// pending round. Serialised by l.flushMu (held across fdatasync; never the
// append lock).
func (l *commitLog) flushOnce() error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()

	l.mu.Lock()
	f := l.pending
	l.pending = nil
	end := l.wpos
	last := l.lastRecord
	werr := l.writeErr
	l.unflushed = 0
	l.mu.Unlock()

	start := l.flushed.Load()
	var synced time.Duration
	err := werr
	shipping := false
	if err == nil {
		shipping, err = l.writeStaged(end) // what is still staged (stage.go)
	}
	if shipping && err == nil && (f != nil && f.gate != nil || l.gate.Load() != nil) {
		// A master's replication stream was woken to ship the round, and
		// the round will wait for its slaves' acks: let the stream run now.
		// Woken here, it sits in this P's run queue, behind this goroutine,
		// which is about to block in fdatasync; on a busy machine its send
		// was done ~110-170 µs (p50) after the write-out, waiting for the P
		// to be retaken or stolen, on the path a gated round waits on (the
		// slave's receipt, fdatasync and ack take longer than this fsync).
		// Yielding first: ~70 µs, and the slave's fdatasync starts ~70 µs
		// sooner; this fsync starts 40-55 µs later (docs/replication.md,
		// "Cost").
		runtime.Gosched()
	}
	if err == nil && end > start {
		t0 := time.Now()
		err = l.syncRange(start, end)
		d := int64(time.Since(t0))
		l.lastFsync.Store(d)
		synced = time.Duration(d)
		l.ctr.fsyncs.Add(1)
		l.ctr.fsyncNanos.Add(d)
		if err != nil {
			l.mu.Lock()
			if l.writeErr == nil {
				l.writeErr = err
				l.log.Error("commit log fsync failed; appends are refused until the store is reopened", "err", err)
			}
			l.mu.Unlock()
		} else {
			l.flushedRec.Store(last)
			l.flushed.Store(end)
			if l.sync {
				l.onVisible()
			}
		}
	}
	if f != nil {
		// Expected back for the next round: this round's members (about to
		// be woken) and those that registered while it synced.
		l.mu.Lock()
		l.roundGoal = f.n
		if l.pending != nil {
			l.roundGoal += l.pending.n
		}
		l.mu.Unlock()
		l.ctr.rounds.Add(1)
		g := f.gate
		if g == nil {
			g = l.gate.Load() // installed after the round opened (promotion)
		}
		if g != nil && err == nil {
			// Sync replication: the round completes once enough slaves
			// have it durable too (raw.go, broker/ha).
			(*g).Hold(end, f.complete)
		} else {
			f.complete(err)
		}
	}
	l.observeFlush(synced, f)
	return err
}

// fdatasync flushes f, a segment, through the ring where the log has one
// (async mode, fsyncring.go) and the ring can, else with fdatasync(2).
func (l *commitLog) fdatasync(f *os.File) error {
	if l.ring == nil {
		return l.hooks.fdatasync(f)
	}
	if err := l.hooks.before(f); err != nil {
		return err
	}
	err := l.ring.fdatasync(int(f.Fd()))
	if !errors.Is(err, errRingBroken) {
		return err
	}
	if !errors.Is(err, errRingClosed) {
		l.ringOnce.Do(func() {
			l.log.Warn("io_uring fsync failed; the async flusher uses fdatasync(2) from now on", "err", err)
		})
	}
	return l.hooks.fdatasyncCall(f)
}

// syncRange fdatasyncs every segment overlapping [start, end).
func (l *commitLog) syncRange(start, end int64) error {
	for pos := start; pos < end; {
		g := l.acquireSegment(pos)
		if g == nil {
			return ioError("flush", errMissingSegment)
		}
		err := l.fdatasync(g.f)
		pos = g.end()
		g.release()
		if err != nil {
			return ioError("fdatasync "+g.path, err)
		}
	}
	return nil
}

// Flush forces an fsync of the commit log and writes a checkpoint.
func (s *Store) Flush() error {
	if s.isClosed.Load() {
		return ErrClosed
	}
	if err := s.clog.flushOnce(); err != nil {
		return err
	}
	return s.checkpoint()
}
