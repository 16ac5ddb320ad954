package ha

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// gate is the sync double write (store.ReplicationGate): the flusher hands
// it every group-commit round once the round is durable locally, and the
// gate completes the round once syncReplicas in-sync slaves have reported a
// durable position at or past the round's end. Many puts share a round, so
// they share one network round trip and one fsync on each slave too.
//
// A round not confirmed within replicaTimeoutMs fails (503 with the reason;
// the records stay in the log and reach the slaves later: the client got no
// false 200, and a retry is a duplicate at worst, as after any timeout). So
// do all rounds while the master is fenced. While fewer than syncReplicas
// slaves have been in sync for replicaTimeoutMs, puts are refused before
// they are appended (PutRefusal). A slave that catches up is back in the
// count at the next check: nothing to do by hand.
//
// One goroutine (run) does all the work; Hold and kick only queue and wake.
type gate struct {
	n    *Node
	wake chan struct{}

	mu   sync.Mutex // leaf: held
	held []heldRound

	lastInSync time.Time              // run only: last check with enough slaves in sync
	oos        atomic.Pointer[string] // why puts are refused now ("" none)
	quorum     atomic.Int64           // position confirmed by enough slaves
}

type heldRound struct {
	end      int64
	release  func(error)
	deadline time.Time
}

func newGate(n *Node) *gate {
	return &gate{n: n, wake: make(chan struct{}, 1), lastInSync: time.Now()}
}

// Hold implements store.ReplicationGate.
func (g *gate) Hold(end int64, release func(error)) {
	if r := g.n.fenced.Load(); r != nil {
		release(fmt.Errorf("%w: %s", ErrFenced, *r))
		return
	}
	if end <= g.quorum.Load() {
		release(nil)
		g.n.commitWait.Wake() // the high watermark reached end (commit.go)
		return
	}
	g.mu.Lock()
	g.held = append(g.held, heldRound{end: end, release: release, deadline: time.Now().Add(g.n.cfg.ReplicaTimeout)})
	g.mu.Unlock()
	g.kick()
}

func (g *gate) kick() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// outOfSync is why puts are refused now ("" when they are not).
func (g *gate) outOfSync() string {
	if p := g.oos.Load(); p != nil {
		return *p
	}
	return ""
}

// failAll fails every held round with err.
func (g *gate) failAll(err error) {
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, h := range held {
		h.release(err)
	}
}

func (g *gate) run() {
	var tick <-chan time.Time
	if g.n.cfg.SyncReplicas > 0 {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-g.wake:
		case <-tick:
		case <-g.n.done:
			g.failAll(fmt.Errorf("%w: the broker is shutting down", ErrReplicaTimeout))
			return
		}
		g.check(time.Now())
	}
}

// check releases what enough slaves confirmed and fails what timed out.
func (g *gate) check(now time.Time) {
	n := g.n
	need := n.cfg.SyncReplicas
	if n.Role() != RoleMaster {
		g.oos.Store(nil)
		g.failAll(fmt.Errorf("%w: this broker is no longer the master", ErrNotMaster))
		return
	}
	if need <= 0 {
		g.oos.Store(nil)
		return
	}
	if r := n.fenced.Load(); r != nil {
		g.failAll(fmt.Errorf("%w: %s", ErrFenced, *r))
		return
	}
	vis := n.st.VisiblePos()
	n.mu.Lock()
	var ackBuf [8]int64 // on the stack for up to 8 slaves (check runs every 20 ms and per ack)
	acks := ackBuf[:0]
	for _, r := range n.replicas {
		if n.replicaInSync(r, vis, now) {
			acks = append(acks, r.acked.Load())
		}
	}
	n.mu.Unlock()
	slices.Sort(acks) // ascending: the need-th highest is need from the end
	quorum := int64(-1)
	if len(acks) >= need {
		quorum = acks[len(acks)-need]
		g.lastInSync = now
		g.oos.Store(nil)
	} else if now.Sub(g.lastInSync) >= n.cfg.ReplicaTimeout {
		why := "not enough in-sync replicas: " + strconv.Itoa(len(acks)) + " of the " + strconv.Itoa(need) +
			" required (syncReplicas) for " + now.Sub(g.lastInSync).Round(time.Millisecond).String()
		if g.oos.Swap(&why) == nil {
			n.log.Warn("puts are refused until enough slaves are in sync", "inSync", len(acks), "syncReplicas", need)
		}
	}
	if quorum > g.quorum.Load() {
		g.quorum.Store(quorum)
		n.commitWait.Wake() // the high watermark may have moved (commit.go)
	}
	g.mu.Lock()
	i := 0
	for i < len(g.held) && g.held[i].end <= quorum {
		i++
	}
	done := append([]heldRound(nil), g.held[:i]...)
	var late []heldRound
	j := i
	oos := g.oos.Load() != nil
	for j < len(g.held) && (oos || !now.Before(g.held[j].deadline)) {
		j++
	}
	late = append(late, g.held[i:j]...)
	g.held = append(g.held[:0], g.held[j:]...)
	g.mu.Unlock()
	for _, h := range done {
		h.release(nil)
	}
	if len(late) > 0 {
		err := fmt.Errorf("%w: %d of %d required slaves in sync; not confirmed within replicaTimeoutMs=%d",
			ErrReplicaTimeout, len(acks), need, n.cfg.ReplicaTimeout.Milliseconds())
		for _, h := range late {
			h.release(err)
		}
	}
}
