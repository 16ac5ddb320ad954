package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/internal/poswait"
)

// Config configures a Node.
type Config struct {
	Store    *store.Store
	BrokerID int
	// SlaveID is [slave] slaveId: -1 starts the node as master, k >= 0 as
	// slave k (unless AutoFailover: then the election decides).
	SlaveID        int
	SyncReplicas   int           // [replication] syncReplicas (0 = asynchronous)
	ReplicaTimeout time.Duration // [replication] replicaTimeoutMs (default 3s)
	MaxDelay       time.Duration // [slave] slaveMaxDelayInMills: the in-sync window (default 500ms)
	AutoFailover   bool          // [replication] autoFailover: start as a slave following nobody
	MasterAddr     string        // [replication] masterAddr: the master a static slave follows
	// FindMaster returns the master's host:port (from ZooKeeper's
	// /brokers/ids/<id>/master) when MasterAddr is empty; nil: none.
	FindMaster func(ctx context.Context) (string, error)
	Logger     *slog.Logger
	// BeforeMaster is called by Promote once the node's epoch record is
	// written and before it takes its first put: the broker starts the
	// services that write, from the records in the log (delay timer,
	// transaction check-back, delivery service). An error fails the
	// promotion (the node stays a slave). nil: nothing to start.
	BeforeMaster func() error
	// OnRole is called after every role change (registration, services):
	// slaveID is the slave number the node registers under (-1 master).
	OnRole func(role Role, slaveID int)
	// Restart asks the broker to reopen the store: a reset marker was
	// written (store.ScheduleReset) that only an Open applies. nil: the
	// node logs and stops following.
	Restart func(reason string)
	// Heartbeat is the idle interval of the stream (default 200ms; tests).
	Heartbeat time.Duration
	// Dial opens the follower's connection to its master, ready for the
	// `replicate` command: TLS and `auth` as the replicationUser when
	// [security] says so (broker.ReplicationDialer). nil: plain TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Node is one broker's replication: its role, the streams to its slaves
// (master), the follower of its master (slave) and the sync gate. It
// implements Controller.
//
// Lock rules: n.mu guards role changes' bookkeeping (follower, links,
// replicas, closed); it is never held across network I/O, a store append
// or a wait. roleMu serialises Promote and Demote. Each replica's fields
// are atomics or under its own leaf lock.
type Node struct {
	cfg Config
	st  *store.Store
	log *slog.Logger

	role     atomic.Int32
	epoch    atomic.Int64
	fenced   atomic.Pointer[string]
	master   atomic.Pointer[string] // the master followed (slave)
	demotedK int                    // slave number when a slave

	roleMu sync.Mutex

	mu       sync.Mutex
	closed   bool
	follower *follower
	links    map[*link]struct{}
	replicas map[int]*replica
	// epochMu guards startEpoch: a node started as master has written the
	// epoch record of this run (ensureEpoch), or needs none (promoted).
	epochMu    sync.Mutex
	startEpoch bool

	// commitFloor is where this node's log ended when it became master:
	// its high watermark never lies below it (commit.go). commitWait wakes
	// the streams when the gate's quorum moves it (gated masters).
	commitFloor atomic.Int64
	commitWait  poswait.Waiters

	gate *gate
	wg   sync.WaitGroup
	done chan struct{}
}

// New returns a node in its configured role; Start starts it.
func New(cfg Config) (*Node, error) {
	if cfg.Store == nil {
		return nil, errors.New("ha: no store")
	}
	if cfg.ReplicaTimeout <= 0 {
		cfg.ReplicaTimeout = 3 * time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 500 * time.Millisecond
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{
		cfg: cfg, st: cfg.Store, log: cfg.Logger.With("component", "replication"),
		links: map[*link]struct{}{}, replicas: map[int]*replica{}, done: make(chan struct{}),
	}
	n.demotedK = cfg.SlaveID
	if n.demotedK < 0 {
		n.demotedK = DemotedMasterSlaveID
	}
	n.gate = newGate(n)
	if cfg.SlaveID >= 0 || cfg.AutoFailover {
		n.role.Store(int32(RoleSlave))
	} else {
		n.role.Store(int32(RoleMaster))
		if cfg.SyncReplicas > 0 {
			// Before the broker takes a put: a round held before Start is
			// checked once the gate runs.
			n.st.SetReplicationGate(n.gate)
		}
	}
	e, err := lastEpoch(n.st)
	if err != nil {
		return nil, fmt.Errorf("ha: reading the epoch history: %w", err)
	}
	n.epoch.Store(e)
	return n, nil
}

// Start begins: a master installs the sync gate; a static slave starts
// following its master; an auto-failover node waits for the election.
func (n *Node) Start() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.gate.run()
	}()
	if n.Role() == RoleMaster {
		n.becomeMasterLocked()
		if n.epoch.Load() > 0 {
			if err := n.ensureEpoch(); err != nil {
				n.log.Error("the epoch record of this run could not be written; the first slave link tries again", "err", err)
			}
		}
		return
	}
	n.st.SetReplica(true)
	n.limitReads()
	if !n.cfg.AutoFailover {
		n.startFollowing(n.cfg.MasterAddr)
	}
}

// becomeMasterLocked installs the gate and accepts appends (roleMu held
// or not yet shared); everything in the log is served.
func (n *Node) becomeMasterLocked() {
	n.st.SetReadLimit(-1)
	n.commitFloor.Store(n.st.WritePos())
	n.st.SetReplica(false)
	if n.cfg.SyncReplicas > 0 {
		n.st.SetReplicationGate(n.gate)
	}
}

// ensureEpoch writes the epoch record of this run on a node started as
// master (epoch.go): at Start when its log holds epoch records already (a
// slave has linked to it before), else at the first link. The epoch begins
// where the log recovered to at open (store.OpenPos), whatever was appended
// since. Nothing to do on a promoted node (Promote wrote its epoch).
func (n *Node) ensureEpoch() error {
	n.epochMu.Lock()
	defer n.epochMu.Unlock()
	if n.startEpoch || n.cfg.AutoFailover || n.cfg.SlaveID >= 0 {
		return nil
	}
	e := n.epoch.Load() + 1
	if err := writeStartEpoch(n.st, e, n.st.OpenPos()); err != nil {
		return err
	}
	n.epoch.Store(e)
	n.startEpoch = true
	n.log.Info("a new epoch begins where the log recovered to", "epoch", e, "epochStart", n.st.OpenPos())
	return nil
}

// Close stops following and streaming; rounds still held fail (503).
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	f := n.follower
	n.follower = nil
	links := make([]*link, 0, len(n.links))
	for l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	if f != nil {
		f.stop()
	}
	for _, l := range links {
		l.close()
	}
	n.st.SetReplicationGate(nil)
	close(n.done)
	n.wg.Wait()
}

// Role implements Controller.
func (n *Node) Role() Role { return Role(n.role.Load()) }

// Epoch implements Controller.
func (n *Node) Epoch() int64 { return n.epoch.Load() }

// DurablePos implements Controller.
func (n *Node) DurablePos() int64 { return n.st.FlushedPos() }

// AckedPos implements Controller: what this node serves (VisiblePos: in
// async-flush mode written, answered 200 before its fsync; in sync-flush
// mode durable), and never below what is durable.
func (n *Node) AckedPos() int64 { return max(n.st.FlushedPos(), n.st.VisiblePos()) }

// MasterAddr implements Controller.
func (n *Node) MasterAddr() string {
	if p := n.master.Load(); p != nil && n.Role() == RoleSlave {
		return *p
	}
	return ""
}

// InSync implements Controller.
func (n *Node) InSync() bool {
	if n.Role() == RoleMaster {
		return n.fenced.Load() == nil
	}
	n.mu.Lock()
	f := n.follower
	n.mu.Unlock()
	return f != nil && f.inSync()
}

// SlaveID is the slave number this node registers under (-1 as master).
func (n *Node) SlaveID() int {
	if n.Role() == RoleMaster {
		return -1
	}
	return n.demotedK
}

// Fence implements Controller.
func (n *Node) Fence(reason string) {
	if reason == "" {
		reason = "fenced"
	}
	if n.fenced.Swap(&reason) == nil {
		n.log.Warn("fenced: puts are refused", "reason", reason)
	}
	n.gate.kick()
}

// Promote implements Controller.
func (n *Node) Promote(ctx context.Context, epoch int64) error {
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	if n.Role() == RoleMaster {
		if epoch > n.epoch.Load() {
			// Its log goes on unbroken: the epoch may begin at the record.
			if _, err := writeEpoch(n.st, epoch, -1); err != nil {
				return err
			}
			n.epoch.Store(epoch)
		}
		n.fenced.Store(nil)
		return nil
	}
	n.mu.Lock()
	f := n.follower
	n.follower = nil
	n.mu.Unlock()
	if f != nil {
		f.stop() // what arrived is durable (SyncRaw per batch)
	}
	if _, err := n.st.SyncRaw(); err != nil {
		return fmt.Errorf("ha: promote: %w", err)
	}
	// The services started below rebuild their state from the whole log
	// (which this node now serves: its history is the group's from here).
	n.st.SetReadLimit(-1)
	n.st.SetReplica(false)
	if epoch > n.epoch.Load() {
		// The epoch begins at the write position now, not at its record:
		// a record that does not fit in the active segment lands at the
		// next segment's base, and this log leaves the former master's at
		// the BLANK before it (epoch.go). Nothing else appends meanwhile:
		// the follower is stopped, puts are refused while the role says
		// slave, and the services that write start below.
		start, err := writeEpoch(n.st, epoch, n.st.WritePos())
		if err != nil {
			n.st.SetReplica(true)
			n.limitReads()
			return err
		}
		n.log.Info("promoted to master", "epoch", epoch, "epochStart", start)
		n.epoch.Store(epoch)
	} else {
		n.log.Info("promoted to master", "epoch", n.epoch.Load())
	}
	if n.cfg.BeforeMaster != nil {
		if err := n.cfg.BeforeMaster(); err != nil {
			n.st.SetReplica(true)
			n.limitReads()
			return fmt.Errorf("ha: promote: starting the services that write: %w", err)
		}
	}
	n.epochMu.Lock()
	n.startEpoch = true // this run's epoch is the one just written
	n.epochMu.Unlock()
	n.master.Store(nil)
	n.fenced.Store(nil)
	// The gate first: a put taken once the role says master must find it
	// (store rounds take the gate they were opened under).
	n.becomeMasterLocked()
	n.role.Store(int32(RoleMaster))
	if n.cfg.OnRole != nil {
		n.cfg.OnRole(RoleMaster, -1)
	}
	return nil
}

// Demote implements Controller.
func (n *Node) Demote(ctx context.Context, masterAddr string, epoch int64) error {
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	wasMaster := n.Role() == RoleMaster
	if !wasMaster && n.MasterAddr() == masterAddr && masterAddr != "" {
		n.mu.Lock()
		f := n.follower
		n.mu.Unlock()
		if f != nil && f.addr == masterAddr {
			return nil // already following it (the election may repeat a Demote)
		}
	}
	n.role.Store(int32(RoleSlave))
	n.st.SetReplica(true)
	n.limitReads()
	n.st.SetReplicationGate(nil)
	n.fenced.Store(nil)
	n.gate.failAll(fmt.Errorf("%w: this broker is no longer the master", ErrNotMaster))
	// Epoch() becomes the new master's epoch once the follower's handshake
	// succeeded, i.e. once this log is a prefix of that master's history
	// (after a truncation if it had to; follow.go).
	n.mu.Lock()
	links := make([]*link, 0, len(n.links))
	for l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	if wasMaster {
		n.log.Info("demoted to slave", "master", masterAddr, "epoch", epoch)
	}
	if n.cfg.OnRole != nil {
		n.cfg.OnRole(RoleSlave, n.demotedK)
	}
	n.startFollowing(masterAddr)
	// Wait (bounded by ctx) until the link is up.
	for {
		n.mu.Lock()
		f := n.follower
		n.mu.Unlock()
		if f == nil || f.connected() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // keeps trying in the background
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startFollowing replaces the follower by one following addr ("" = find
// the master through cfg.FindMaster).
func (n *Node) startFollowing(addr string) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	old := n.follower
	f := newFollower(n, addr)
	n.follower = f
	n.mu.Unlock()
	if old != nil {
		old.stop()
	}
	if addr != "" {
		n.master.Store(&addr)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f.run()
	}()
}

// PutRefusal says whether a put must be refused now, and how: 403 naming
// the master on a slave, 503 with the reason when fenced or when fewer than
// syncReplicas slaves have been in sync for replicaTimeoutMs. code 0: accept.
func (n *Node) PutRefusal() (code int, msg string) {
	if n.Role() != RoleMaster {
		m := n.MasterAddr()
		if m == "" {
			m = "unknown yet"
		} else {
			m = "meta://" + m
		}
		return 403, "this broker is slave " + strconv.Itoa(n.demotedK) + " of broker " + strconv.Itoa(n.cfg.BrokerID) +
			" and does not accept puts; the master is " + m
	}
	if r := n.fenced.Load(); r != nil {
		return 503, "this master is fenced: " + *r
	}
	if why := n.gate.outOfSync(); why != "" {
		return 503, why
	}
	return 0, ""
}

// replica is the master's view of one slave. It outlives the slave's
// links: a slave that reconnects gets a new link and keeps its record. Only
// the current link (cur, the newest) changes it; a link it replaced (a
// half-open connection the master had not noticed dying when the slave
// reconnected) is closed, and its acks, sends and teardown change nothing.
type replica struct {
	id        int
	acked     atomic.Int64 // durable position reported
	connected atomic.Bool  // cur is set and has answered the handshake
	// confirmed: cur has acked a durable position. Only then does the slave
	// count toward syncReplicas: the position a slave sends in its
	// handshake is a claim (and may be past what it holds durably), and a
	// record kept from an earlier link or an earlier term as master is not
	// what the slave holds now.
	confirmed atomic.Bool
	addr      atomic.Pointer[string]

	mu     sync.Mutex // leaf: cur, sent, behind, hist; the writes of acked, connected, confirmed
	cur    *link      // the slave's current link (nil: none); set with n.mu held too
	sent   []sentMark // ends of data sent and not yet acked, with their time
	behind time.Time  // since when acked < visible (zero: caught up)
	hist   ackLatency // per send: its mark to the ack covering it (lathist.go)
}

// attach makes l the replica's current link and returns the one it
// replaces (nil: none), which the caller closes. n.mu held.
func (r *replica) attach(l *link) (old *link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, r.cur = r.cur, l
	r.connected.Store(false) // until l has answered the handshake (begin)
	r.confirmed.Store(false) // until l's first ack
	return old
}

// begin starts the replica's accounting for l once the slave has its
// handshake reply: nothing is in flight, and acked (shown, not counted
// until l's first ack) is lowered to below where l starts: a slave that
// truncated or restarts behind retention holds no more than that. false:
// l is not the current link any more (a newer one replaced it).
func (r *replica) begin(l *link, addr string, start int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != l {
		return false
	}
	r.addr.Store(&addr)
	r.sent = r.sent[:0]
	if r.acked.Load() > start {
		r.acked.Store(start)
	}
	r.connected.Store(true)
	return true
}

// detach ends l: when it is still the current link the slave is
// disconnected (reported true); a replaced link changes nothing.
func (r *replica) detach(l *link) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != l {
		return false
	}
	r.cur = nil
	r.connected.Store(false)
	r.confirmed.Store(false)
	return true
}

type sentMark struct {
	end int64
	at  time.Time
}

// noteSent records that the stream of link from reached end at t (nothing
// when from is not the current link).
func (r *replica) noteSent(from *link, end int64, t time.Time) {
	r.mu.Lock()
	if r.cur != from {
		r.mu.Unlock()
		return
	}
	if len(r.sent) < 4096 {
		r.sent = append(r.sent, sentMark{end, t})
	} else {
		r.sent[len(r.sent)-1].end = end
	}
	r.mu.Unlock()
}

// noteAck records a durable position acked on link from; false (nothing
// recorded) when from is not the current link.
func (r *replica) noteAck(from *link, pos int64) bool {
	now := time.Now()
	r.mu.Lock()
	if r.cur != from {
		r.mu.Unlock()
		return false
	}
	r.acked.Store(pos)
	r.confirmed.Store(true)
	i := 0
	for i < len(r.sent) && r.sent[i].end <= pos {
		r.hist.record(now.Sub(r.sent[i].at))
		i++
	}
	r.sent = append(r.sent[:0], r.sent[i:]...)
	r.mu.Unlock()
	return true
}

// lag returns the replica's lag behind visible: bytes, and how long the
// oldest byte it has not confirmed has been waiting.
func (r *replica) lag(visible int64, now time.Time) (bytes int64, d time.Duration) {
	a := r.acked.Load()
	bytes = max(visible-a, 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes == 0 {
		r.behind = time.Time{}
		return 0, 0
	}
	if len(r.sent) > 0 {
		return bytes, now.Sub(r.sent[0].at)
	}
	if r.behind.IsZero() {
		r.behind = now
	}
	return bytes, now.Sub(r.behind)
}

// LagStats summarises the slave's replication latency since this master
// started (lathist.go): one sample per send, acked.
func (r *replica) lagStats() LagStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.stats()
}

// inSync: connected, its current link has acked a durable position, and
// within slaveMaxDelayInMills.
func (n *Node) replicaInSync(r *replica, visible int64, now time.Time) bool {
	if !r.connected.Load() || !r.confirmed.Load() {
		return false
	}
	_, d := r.lag(visible, now)
	return d <= n.cfg.MaxDelay
}

func (n *Node) replica(id int) *replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.replicas[id]
	if r == nil {
		r = &replica{id: id}
		r.acked.Store(-1)
		n.replicas[id] = r
	}
	return r
}

// ReplicaInfo describes one slave as the master sees it.
type ReplicaInfo struct {
	SlaveID   int
	Addr      string // remote address of its link
	Connected bool
	InSync    bool
	Acked     int64 // durable position (-1 never reported)
	LagBytes  int64
	Lag       time.Duration
	// Latency: each send's time from its write here to the slave's ack
	// making all of it durable, since this master started (lathist.go).
	Latency LagStats
}

// Replicas lists the slaves this master has seen, by slave id.
func (n *Node) Replicas() []ReplicaInfo {
	n.mu.Lock()
	rs := make([]*replica, 0, len(n.replicas))
	for _, r := range n.replicas {
		rs = append(rs, r)
	}
	n.mu.Unlock()
	sort.Slice(rs, func(i, j int) bool { return rs[i].id < rs[j].id })
	vis, now := n.st.VisiblePos(), time.Now()
	out := make([]ReplicaInfo, 0, len(rs))
	for _, r := range rs {
		b, d := r.lag(vis, now)
		ri := ReplicaInfo{SlaveID: r.id, Connected: r.connected.Load(), Acked: r.acked.Load(), LagBytes: b, Lag: d,
			Latency: r.lagStats()}
		ri.InSync = n.replicaInSync(r, vis, now)
		if a := r.addr.Load(); a != nil {
			ri.Addr = *a
		}
		out = append(out, ri)
	}
	return out
}

// FollowerInfo describes this slave's link to its master.
type FollowerInfo struct {
	Master    string
	Connected bool
	InSync    bool
	Durable   int64
	MasterEnd int64 // the master's end as last heard
	LagBytes  int64
	Lag       time.Duration
}

// Follower describes the link of a slave (ok false on a master).
func (n *Node) Follower() (FollowerInfo, bool) {
	n.mu.Lock()
	f := n.follower
	n.mu.Unlock()
	if f == nil || n.Role() != RoleSlave {
		return FollowerInfo{}, false
	}
	return f.info(), true
}

// dialer is how a follower connects (tests may shorten timeouts).
var dialer = net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
