package ha

// The election (docs/replication.md, "Failover"; ZooKeeper nodes in docs/zookeeper.md,
// "Replication and failover").
//
// Every node of a broker group with autoFailover=true runs one elector. It
//
//   - publishes its replica state (role, the epoch its log holds, durable position, in-sync
//     flag, the master it sees) in /brokers/ids/<id>/replicas/<name>, at most every
//     publishEvery and at once on a change that matters to an election;
//   - watches the group (master node, epoch node, promote node, replicas/);
//   - when a master node exists: is it ours → Promote; somebody else's → Demote to it;
//   - when there is none: waits until every live replica has seen it vanish (their positions
//     are then final, at most electionWait), ranks the eligible replicas (same epoch history,
//     highest durable position, then a pending planned switch's target, then the configured
//     master, then the lowest slave id) and, if it ranks first, claims the master node and the
//     next epoch in one ZooKeeper multi-op (zkmeta.Client.ClaimMaster), then Promotes;
//   - fences its Controller the moment its ZooKeeper connection drops while it is master, and
//     whenever it learns that another node is master.
//
// Lock rules: the elector's state is owned by its one goroutine (run); nothing here takes a
// lock across ZooKeeper or Controller calls.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
)

// Election timing. Variables so that the package's tests can shorten them.
var (
	publishEvery  = 250 * time.Millisecond // replica state refresh bound
	pollEvery     = 25 * time.Millisecond  // ZooKeeper connection / promote progress check
	electionWait  = 3 * time.Second        // longest wait for every replica to see the master gone
	retryEvery    = time.Second            // re-decide when nothing happened (a candidate that did not claim)
	roleTimeout   = 15 * time.Second       // one Promote / Demote call
	promoteTimout = 30 * time.Second       // planned switch: the target must catch up within this
)

// StartElection runs the election of cfg's broker group until stop is called (docs/internal/ha-seam.md).
// stop fences a master first (the broker is shutting down: once its registration goes a slave
// may be elected at once, and this node must not acknowledge a put meanwhile that the slave
// might not have); its session, closed later, takes the master node with it.
func StartElection(cfg ElectionConfig) (stop func(), err error) {
	if cfg.ZK == nil || cfg.Controller == nil {
		return nil, errors.New("ha: election needs a ZooKeeper client and a controller")
	}
	if cfg.Addr == "" {
		return nil, errors.New("ha: election needs the node's address")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &elector{cfg: cfg, zk: cfg.ZK, ctl: cfg.Controller, name: zkmeta.ReplicaName(cfg.SlaveID),
		log: cfg.Logger.With("brokerId", cfg.BrokerID, "replica", zkmeta.ReplicaName(cfg.SlaveID))}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.started, e.histEpoch = time.Now(), -1
	rep, err := e.zk.PublishReplica(cfg.BrokerID, e.state())
	if err != nil {
		e.cancel()
		return nil, err
	}
	e.rep = rep
	e.done = make(chan struct{})
	fenceDone := make(chan struct{})
	go func() {
		defer close(fenceDone)
		e.fenceLoop()
	}()
	go func() {
		defer close(e.done)
		e.run()
		<-fenceDone
	}()
	return func() {
		if e.masterNow.Load() {
			e.ctl.Fence("shutting down")
		}
		e.cancel()
		<-e.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rep.Remove(ctx)
	}, nil
}

type elector struct {
	cfg    ElectionConfig
	zk     *zkmeta.Client
	ctl    Controller
	name   string
	log    *slog.Logger
	rep    *zkmeta.EphemeralNode
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// owned by run
	group        zkmeta.HAGroup
	haveGroup    bool
	masterEpoch  int64  // epoch we were promoted with (0: not master)
	followAddr   string // master we demoted to ("" none)
	followEpoch  int64
	fenced       bool
	seenMaster   string // master address as last seen (published as MasterSeen)
	lastInSync   bool   // in-sync flag while a master existed (frozen once it vanished)
	published    zkmeta.ReplicaState
	publishedAt  time.Time
	lostAt       time.Time // the master node vanished (election start)
	staleHolder  bool      // the master node is held by our own previous session: logged once
	switching    string    // planned switch in progress towards this replica
	switchStart  time.Time
	switchTarget int64 // position the target must reach
	noCandidate  time.Time
	lastElect    time.Time
	rechecked    bool        // step is deciding on a fresh read (no second look)
	masterNow    atomic.Bool // mirrors isMaster() for fenceLoop
	cut          atomic.Bool // fenceLoop fenced us because the connection dropped
	histEpoch    int64       // published epoch (historyEpoch); -1 until first read
	pendingEpoch int64       // epoch demoted to, published once in sync
	started      time.Time
	sawMaster    bool // a master existed since this node started
	graceLogged  bool
}

// startGrace: how long a node that just started (and saw no master) leaves the others to come
// up before it claims: one session timeout (a killed node's old session is gone by then) + 2 s.
func (e *elector) startGrace() time.Duration { return e.zk.SessionTimeout() + 2*time.Second }

func (e *elector) run() {
	groups := e.zk.WatchHAGroup(e.ctx, e.cfg.BrokerID)
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	retry := time.NewTimer(retryEvery)
	defer retry.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case g, ok := <-groups:
			if !ok {
				return // the client closed
			}
			e.group, e.haveGroup = g, true
			e.step()
		case <-poll.C:
			e.checkConnection()
			e.progressSwitch()
			if !e.lostAt.IsZero() && e.group.Master == "" && time.Since(e.lastElect) >= 4*pollEvery {
				e.elect() // an election in progress: look again soon (replicas publish as they notice)
			}
			e.publish(false)
		case <-retry.C:
			if e.haveGroup {
				// Read again: a claim's outcome or a replica's state may not come as a group change.
				if g, err := e.readGroup(); err == nil {
					e.group = g
				}
				e.step()
			}
			retry.Reset(retryEvery)
		}
	}
}

func (e *elector) readGroup() (zkmeta.HAGroup, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	return e.zk.HAGroup(ctx, e.cfg.BrokerID)
}

// isMaster: we were promoted and have not learnt otherwise.
func (e *elector) isMaster() bool { return e.masterEpoch > 0 }

// fence stops the Controller acknowledging puts (idempotent).
func (e *elector) fence(reason string) {
	if !e.fenced {
		e.log.Warn("ha election: fencing this master: puts are answered 503 until the election decides", "reason", reason)
	}
	e.fenced = true
	e.ctl.Fence(reason)
}

// checkConnection fences a master the moment its ZooKeeper connection drops: its session may
// expire at any moment and another node be elected; it must not acknowledge anything the next
// master might not have.
//
// It runs on its own goroutine (fenceLoop), never blocked by the ZooKeeper calls of the
// election's goroutine; checkConnection, on that goroutine, takes over once the connection is
// back.
func (e *elector) fenceLoop() {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		if e.masterNow.Load() && !e.zk.Connected() {
			if !e.cut.Swap(true) {
				e.log.Warn("ha election: fencing this master: lost the ZooKeeper connection; puts are answered 503 until it is back")
			}
			e.ctl.Fence(cutReason) // idempotent: re-asserted while the connection is away
		}
	}
}

const cutReason = "lost the ZooKeeper connection (session may expire; another node may be elected)"

// checkConnection notices that the fence loop fenced us and that the connection is back: the
// group watch sends nothing when nothing changed, so decide now (the master node is still ours
// if the session was kept: then the fence is lifted).
func (e *elector) checkConnection() {
	if !e.cut.Load() {
		return
	}
	e.fenced = true
	if !e.zk.Connected() {
		return
	}
	if g, err := e.readGroup(); err == nil {
		e.cut.Store(false)
		e.group = g
		e.step()
	}
}

// step decides on the latest group state.
func (e *elector) step() {
	if e.ctx.Err() != nil || !e.zk.Connected() {
		return
	}
	g := e.group
	sid := e.zk.SessionID()
	switch {
	case g.Master != "" && g.MasterOwner == sid:
		e.seenMaster, e.lostAt, e.sawMaster = g.Master, time.Time{}, true
		e.beMaster(g.Epoch.Value)
	case g.Master != "" && g.Master == e.cfg.Addr:
		// Our own address in another session: our previous run's node that has not expired yet.
		if !e.staleHolder {
			e.log.Info("ha election: the master node is held by this node's previous ZooKeeper session; waiting for it to expire",
				"session", fmt.Sprintf("0x%x", g.MasterOwner))
			e.staleHolder = true
		}
		e.seenMaster = g.Master
	case g.Master != "":
		e.staleHolder, e.lostAt, e.sawMaster = false, time.Time{}, true
		e.seenMaster = g.Master
		e.follow(g.Master, g.Epoch.Value)
	default:
		if e.isMaster() && !e.rechecked {
			// Maybe a stale event (from before our own claim): look again before fencing.
			fresh, err := e.readGroup()
			if err != nil {
				// The stale view is all we have: do not decide on it. A read fails when the
				// connection drops (fenceLoop fences for that on its own goroutine) or the server
				// is slow; the retry timer reads again. Deciding here fenced a master that had only
				// lost its connection as if its master node had vanished, and started an election
				// on a view ZooKeeper never confirmed.
				e.log.Info("ha election: could not confirm a group without master; deciding on the next read", "err", err)
				return
			}
			if fresh.Master != "" {
				e.group, e.rechecked = fresh, true
				e.step()
				e.rechecked = false
				return
			}
			e.group = fresh
		}
		if e.seenMaster != "" || e.lostAt.IsZero() {
			if e.seenMaster != "" {
				e.log.Info("ha election: the master node vanished", "was", e.seenMaster, "epoch", g.Epoch.Value)
			}
			e.seenMaster, e.lostAt = "", time.Now()
		}
		if e.isMaster() {
			e.fence("the master node vanished (session expired or resigned)")
		}
		e.publish(true)
		e.elect()
	}
	e.publish(false)
}

// beMaster makes the Controller master of epoch (or clears a fence set while the connection
// was away, when the node is still ours).
func (e *elector) beMaster(epoch int64) {
	if e.masterEpoch == epoch && !e.fenced {
		return
	}
	if e.switching != "" {
		return // a planned switch holds the fence until we resign
	}
	ctx, cancel := context.WithTimeout(e.ctx, roleTimeout)
	defer cancel()
	start := time.Now()
	if err := e.ctl.Promote(ctx, epoch); err != nil {
		e.log.Error("ha election: promote failed; resigning the master node so that another node takes over", "epoch", epoch, "err", err)
		e.fence("promote failed: " + err.Error())
		_ = e.zk.ResignMaster(ctx, e.cfg.BrokerID)
		e.masterEpoch = 0
		e.masterNow.Store(false)
		return
	}
	wasFenced := e.fenced
	e.masterEpoch, e.followAddr, e.followEpoch, e.fenced = epoch, "", 0, false
	e.histEpoch, e.pendingEpoch = max(e.histEpoch, epoch), 0
	e.masterNow.Store(true)
	if !e.zk.Connected() {
		// The connection dropped while Promote ran: fence again (fenceLoop keeps it so).
		e.cut.Store(true)
		e.fenced = true
		e.ctl.Fence(cutReason)
	}
	if wasFenced && e.ctl.Role() == RoleMaster && time.Since(start) < roleTimeout {
		e.log.Info("ha election: still master after the ZooKeeper connection came back; fence lifted", "epoch", epoch)
	} else {
		e.log.Info("ha election: this node is master", "epoch", epoch, "durablePos", e.ctl.DurablePos(), "took", time.Since(start).Round(time.Millisecond))
	}
	if e.group.Promote == e.name {
		_ = e.zk.ClearPromotion(ctx, e.cfg.BrokerID)
	}
	e.publish(true)
}

// follow makes the Controller a slave of addr under epoch.
func (e *elector) follow(addr string, epoch int64) {
	if e.isMaster() {
		e.fence(fmt.Sprintf("another node (%s) is master under epoch %d", addr, epoch))
	}
	if !e.isMaster() && e.followAddr == addr && e.followEpoch == epoch {
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, roleTimeout)
	defer cancel()
	start := time.Now()
	if err := e.ctl.Demote(ctx, addr, epoch); err != nil {
		e.log.Warn("ha election: demote did not complete; retrying", "master", addr, "epoch", epoch, "err", err)
		return
	}
	e.log.Info("ha election: following the master", "master", addr, "epoch", epoch, "took", time.Since(start).Round(time.Millisecond))
	e.masterEpoch, e.followAddr, e.followEpoch, e.fenced, e.switching = 0, addr, epoch, false, ""
	e.masterNow.Store(false)
	if epoch > e.histEpoch {
		e.pendingEpoch = epoch
	}
	e.publish(true)
}

// state is the replica state this node publishes now.
func (e *elector) state() zkmeta.ReplicaState {
	role := "slave"
	if e.isMaster() {
		role = "master"
	}
	inSync := e.lastInSync
	if e.isMaster() {
		inSync = !e.fenced
	} else if e.seenMaster != "" {
		// While a master exists the flag is live; once it vanished it stays what it was (the
		// link is down for everybody then).
		inSync = e.ctl.InSync()
		e.lastInSync = inSync
	}
	return zkmeta.ReplicaState{Name: e.name, Addr: e.cfg.Addr, SlaveID: e.cfg.SlaveID, Role: role,
		Epoch: e.historyEpoch(), Pos: e.ctl.DurablePos(), InSync: inSync, MasterSeen: e.seenMaster}
}

// historyEpoch is the epoch whose history the local log is known to hold. After a Demote to a
// newer epoch the log may still hold a divergent tail until the follower has truncated it; the
// new epoch is published only once the node has been in sync with that master (its log is then
// a prefix of the master's), the old one until then: a divergent position is never compared as
// if it belonged to the newer history.
func (e *elector) historyEpoch() int64 {
	if e.histEpoch < 0 {
		e.histEpoch = e.ctl.Epoch() // at start: what the log's epoch records say
	}
	if e.pendingEpoch > e.histEpoch && e.followAddr != "" && e.ctl.InSync() {
		e.histEpoch, e.pendingEpoch = e.pendingEpoch, 0
	}
	return e.histEpoch
}

// publish writes the replica state when it changed: at once when now or when anything but the
// position changed, else at most every publishEvery.
func (e *elector) publish(now bool) {
	s := e.state()
	if s == e.published {
		return
	}
	posOnly := s.Pos != e.published.Pos && func() bool { c := s; c.Pos = e.published.Pos; return c == e.published }()
	if !now && posOnly && time.Since(e.publishedAt) < publishEvery {
		return
	}
	if err := e.rep.SetAsync(s.Encode()); err != nil {
		return
	}
	e.published, e.publishedAt = s, time.Now()
}

// elect runs when no master node exists.
func (e *elector) elect() {
	if e.switching != "" {
		return
	}
	e.lastElect = time.Now()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	// Our own state must be in ZooKeeper (others wait for it, and our claim checks it).
	if err := e.rep.Wait(ctx); err != nil {
		return
	}
	reps, err := e.zk.ReadReplicas(ctx, e.cfg.BrokerID)
	if err != nil {
		return
	}
	g := e.group
	var waiting []string
	for _, r := range reps {
		if r.MasterSeen != "" {
			waiting = append(waiting, r.Name)
		}
	}
	if len(waiting) > 0 && time.Since(e.lostAt) < electionWait {
		return // the retry timer or their publication brings us back
	}
	best, why := rank(reps, g)
	if best == nil {
		if e.noCandidate.IsZero() || time.Since(e.noCandidate) > 30*time.Second {
			e.log.Warn("ha election: no eligible replica; the group has no master (metaq broker promote forces one)", "reason", why)
			e.noCandidate = time.Now()
		}
		return
	}
	e.noCandidate = time.Time{}
	if best.Name != e.name {
		return
	}
	if g.EpochVersion >= 0 && !e.sawMaster && g.Epoch.Claimant != e.name && time.Since(e.started) < e.startGrace() {
		// Just started and never saw a master: the whole group may be restarting, and a node
		// that holds more may come up in a moment. The last master itself does not wait.
		if !e.graceLogged {
			e.log.Info("ha election: no master; this node just started and waits for the others before claiming",
				"grace", e.startGrace())
			e.graceLogged = true
		}
		return
	}
	seen := g.Epoch
	if m := maxEpoch(reps); m > seen.Value {
		seen.Value = m // ZooKeeper lost its data: continue above what the logs hold
	}
	epoch, err := e.zk.ClaimMaster(ctx, zkmeta.Claim{BrokerID: e.cfg.BrokerID, Addr: e.cfg.Addr, Name: e.name,
		Seen: seen, SeenVersion: g.EpochVersion, Checked: reps})
	if err != nil {
		if !errors.Is(err, zkmeta.ErrMasterExists) && !errors.Is(err, zkmeta.ErrEpochChanged) {
			e.log.Warn("ha election: claim failed", "err", err)
		}
		return
	}
	e.log.Info("ha election: won", "epoch", epoch, "durablePos", best.Pos, "replicas", len(reps),
		"electionMs", time.Since(e.lostAt).Milliseconds())
	e.seenMaster, e.lostAt = e.cfg.Addr, time.Time{}
	e.group.Master, e.group.MasterOwner, e.group.Epoch = e.cfg.Addr, e.zk.SessionID(), zkmeta.Epoch{Value: epoch, Claimant: e.name}
	e.beMaster(epoch)
}

func maxEpoch(reps []zkmeta.ReplicaState) int64 {
	var m int64
	for _, r := range reps {
		m = max(m, r.Epoch)
	}
	return m
}

// rank picks the replica that should become master, or nil with the reason why none may.
//
// Eligible: replicas whose log holds the latest epoch's history — their epoch is the highest
// among the live replicas and is the epoch in ZooKeeper, or the epoch in ZooKeeper was claimed
// by a replica that is alive and never recorded it (it failed before writing its epoch record),
// or ZooKeeper holds an older epoch than the logs (its data was lost). A replica of an older
// history (a former master that missed a failover) is never eligible: its extra bytes are not
// in the newer history and it must first truncate to it.
//
// Among the eligible: the highest durable position (it holds every acknowledged message: with
// syncReplicas=N an acknowledged put is durable on the master and N slaves, all of whose
// positions are prefixes of one history), then the target of a planned switch, then the
// in-sync flag, then the configured master, then the lowest slave id.
func rank(reps []zkmeta.ReplicaState, g zkmeta.HAGroup) (*zkmeta.ReplicaState, string) {
	if len(reps) == 0 {
		return nil, "no replica has published its state"
	}
	top := maxEpoch(reps)
	zkEpoch := g.Epoch.Value
	ok := top >= zkEpoch
	if !ok && g.Epoch.Claimant != "" {
		for _, r := range reps {
			if r.Name == g.Epoch.Claimant && r.Epoch < zkEpoch && r.Epoch == top {
				ok = true // the claimant is alive and never wrote epoch zkEpoch: that history is empty
			}
		}
	}
	if !ok {
		return nil, fmt.Sprintf("the live replicas hold epoch %d at most, the group is at epoch %d (claimed by %s): the replicas that hold it are down",
			top, zkEpoch, g.Epoch.Claimant)
	}
	var cands []zkmeta.ReplicaState
	first := g.EpochVersion < 0 && top == 0 // the group was never elected
	for _, r := range reps {
		if r.Epoch == top && (!first || r.SlaveID < 0) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil, "the group's first master is the node configured as master (slaveId=-1), which is not running"
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Pos != b.Pos {
			return a.Pos > b.Pos
		}
		if (a.Name == g.Promote) != (b.Name == g.Promote) {
			return a.Name == g.Promote
		}
		if a.InSync != b.InSync {
			return a.InSync
		}
		if (a.SlaveID < 0) != (b.SlaveID < 0) {
			return a.SlaveID < 0
		}
		return a.SlaveID < b.SlaveID
	})
	best := cands[0]
	return &best, ""
}

// progressSwitch drives a planned switch (metaq broker promote) on the master: fence, wait for
// the target's durable position to reach what we acknowledged (AckedPos), resign.
func (e *elector) progressSwitch() {
	g := e.group
	if !e.isMaster() || g.Master == "" || g.MasterOwner != e.zk.SessionID() {
		e.switching = ""
		return
	}
	target := g.Promote
	if target == "" || target == e.name {
		if e.switching != "" {
			e.switching = ""
			e.beMaster(e.masterEpoch) // the request was withdrawn: lift the fence
		}
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if e.switching != target {
		reps, err := e.zk.ReadReplicas(ctx, e.cfg.BrokerID)
		if err != nil {
			return
		}
		if !slices.ContainsFunc(reps, func(r zkmeta.ReplicaState) bool { return r.Name == target }) {
			e.log.Warn("ha election: planned switch to a replica that is not running; ignored", "target", target)
			_ = e.zk.ClearPromotion(ctx, e.cfg.BrokerID)
			return
		}
		e.switching, e.switchStart = target, time.Now()
		e.fence("planned switch to " + target + " in progress")
		e.switchTarget = e.ctl.AckedPos()
		e.log.Info("ha election: planned switch: puts paused, waiting for the target to catch up", "target", target, "pos", e.switchTarget)
	}
	// Puts are refused now. What was accepted before lies below AckedPos,
	// which is past DurablePos on an async-flush master (a put is answered
	// once written, its fsync comes up to unflushIntervalMs later): the
	// target must hold all of it before this node resigns.
	e.switchTarget = max(e.switchTarget, e.ctl.AckedPos())
	reps, err := e.zk.ReadReplicas(ctx, e.cfg.BrokerID)
	if err != nil {
		return
	}
	for _, r := range reps {
		if r.Name == target && r.Epoch == e.masterEpoch && r.Pos >= e.switchTarget {
			e.log.Info("ha election: planned switch: target caught up; resigning", "target", target, "pos", r.Pos,
				"pausedMs", time.Since(e.switchStart).Milliseconds())
			if err := e.zk.ResignMaster(ctx, e.cfg.BrokerID); err != nil {
				return
			}
			e.masterEpoch = 0 // we stay fenced until we follow the new master
			e.masterNow.Store(false)
			return
		}
	}
	if time.Since(e.switchStart) > promoteTimout {
		e.log.Warn("ha election: planned switch abandoned: the target did not catch up", "target", target, "want", e.switchTarget)
		_ = e.zk.ClearPromotion(ctx, e.cfg.BrokerID)
		e.switching = ""
		e.beMaster(e.masterEpoch)
	}
}
