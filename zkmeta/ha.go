package zkmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
)

// The election's nodes (metaq extensions next to MetaQ's master/slave<n> nodes; docs/zookeeper.md,
// "Replication and failover"). All below /brokers/ids/<id>:
//
//	epoch              P  "<epoch> <claimant>"  e.g. "3 s0": the latest epoch and the replica
//	                      that claimed it. Only ever replaced by compare-and-set on its version,
//	                      in the same multi-op that creates the master node.
//	replicas/<name>    E  JSON ReplicaState of one node of the group ("m" = the node configured
//	                      as master, "s<k>" = slave k), updated at a bounded rate.
//	master             E  meta://host:port (MetaQ's node): with autoFailover its atomic creation
//	                      is the election.

// Epoch is the content of the epoch node.
type Epoch struct {
	Value    int64  // 0 before the first election (node missing)
	Claimant string // replica name that claimed it ("" when unknown)
}

func (e Epoch) String() string {
	if e.Claimant == "" {
		return strconv.FormatInt(e.Value, 10)
	}
	return strconv.FormatInt(e.Value, 10) + " " + e.Claimant
}

// ParseEpoch reads the epoch node's data: "<epoch>[ <claimant>]".
func ParseEpoch(data []byte) (Epoch, error) {
	f := strings.Fields(string(data))
	if len(f) == 0 || len(f) > 2 {
		return Epoch{}, fmt.Errorf("zkmeta: bad epoch node data %q", data)
	}
	v, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || v < 0 {
		return Epoch{}, fmt.Errorf("zkmeta: bad epoch node data %q", data)
	}
	e := Epoch{Value: v}
	if len(f) == 2 {
		if !validReplicaName(f[1]) {
			return Epoch{}, fmt.Errorf("zkmeta: bad claimant in epoch node data %q", data)
		}
		e.Claimant = f[1]
	}
	return e, nil
}

// ReplicaName is the name of a group member in replicas/: "m" for the node configured as master
// (slaveId -1), "s<k>" for slave k.
func ReplicaName(slaveID int) string {
	if slaveID < 0 {
		return "m"
	}
	return "s" + strconv.Itoa(slaveID)
}

func validReplicaName(s string) bool {
	if s == "m" {
		return true
	}
	n, ok := strings.CutPrefix(s, "s")
	if !ok || n == "" || len(n) > 9 {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil && n[0] != '-' && n[0] != '+'
}

// ReplicaState is what one node of a broker group publishes for the election (JSON in
// replicas/<name>).
type ReplicaState struct {
	Name    string `json:"-"`       // node name (from the path)
	Addr    string `json:"addr"`    // host:port the node serves on
	SlaveID int    `json:"slaveId"` // as configured (-1: configured master)
	Role    string `json:"role"`    // "master" or "slave" (current role)
	Epoch   int64  `json:"epoch"`   // the epoch whose history the node's log holds
	Pos     int64  `json:"pos"`     // durable end of its commit log
	InSync  bool   `json:"inSync"`  // slave: following and caught up; master: not fenced
	// MasterSeen is the master node's address as this node last saw it ("" once it saw the node
	// vanish): an election waits until every live replica says "" (its Pos is then final).
	MasterSeen string `json:"masterSeen"`
	// Version and Owner come from the node's stat (not part of the JSON): the election checks
	// Version in its claim so that a state published after the choice fails the claim.
	Version int32 `json:"-"`
	Owner   int64 `json:"-"`
}

// Encode is the node's data.
func (s ReplicaState) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// ParseReplicaState decodes a replicas/<name> node.
func ParseReplicaState(name string, data []byte) (ReplicaState, error) {
	var s ReplicaState
	if err := json.Unmarshal(data, &s); err != nil {
		return ReplicaState{}, fmt.Errorf("zkmeta: bad replica state %s: %w", name, err)
	}
	if s.Pos < 0 || s.Epoch < 0 {
		return ReplicaState{}, fmt.Errorf("zkmeta: bad replica state %s: negative position or epoch", name)
	}
	if _, err := ParseBrokerURI("meta://" + s.Addr); err != nil {
		return ReplicaState{}, fmt.Errorf("zkmeta: bad replica state %s: %w", name, err)
	}
	s.Name = name
	return s, nil
}

// HAEpochNode is /brokers/ids/<id>/epoch.
func (p Paths) HAEpochNode(id int) string { return p.BrokerIDDir(id) + "/epoch" }

// HAReplicas is /brokers/ids/<id>/replicas.
func (p Paths) HAReplicas(id int) string { return p.BrokerIDDir(id) + "/replicas" }

// HAReplica is /brokers/ids/<id>/replicas/<name>.
func (p Paths) HAReplica(id int, name string) string { return p.HAReplicas(id) + "/" + name }

// HAGroup is the election's view of one broker group, as WatchHAGroup sends it.
type HAGroup struct {
	Master       string // host:port of the master node's data; "" when there is no master node
	MasterOwner  int64  // session holding the master node
	Epoch        Epoch
	EpochVersion int32    // the epoch node's version; -1 when it does not exist
	Replicas     []string // names in replicas/, sorted
	Promote      string   // data of the promote node: the replica a planned switch hands over to
}

func readHAGroup(c *Client, r reader, id int) (HAGroup, error) {
	g := HAGroup{EpochVersion: -1}
	mFull := c.FullPath(c.paths.BrokerMaster(id))
	d, ok, err := r.get(mFull)
	if err != nil {
		return g, err
	}
	if ok {
		// The data watch above fires on deletion; the stat is read plainly for the owner.
		d2, st, err := c.conn.Get(mFull)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			// deleted between the two reads: the watch fires and we read again
		case err != nil:
			return g, err
		default:
			if addr, perr := ParseBrokerURI(string(d2)); perr == nil {
				g.Master, g.MasterOwner = addr, st.EphemeralOwner
			} else {
				c.log.Printf("zkmeta: ignoring master node of broker %d: %v (data %q)", id, perr, d)
			}
		}
	}
	eFull := c.FullPath(c.paths.HAEpochNode(id))
	if _, ok, err := r.get(eFull); err != nil {
		return g, err
	} else if ok {
		d, st, err := c.conn.Get(eFull)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return g, err
		}
		if err == nil {
			e, perr := ParseEpoch(d)
			if perr != nil {
				return g, perr
			}
			g.Epoch, g.EpochVersion = e, st.Version
		}
	}
	if d, ok, err := r.get(c.FullPath(c.paths.HAPromote(id))); err != nil {
		return g, err
	} else if ok && validReplicaName(strings.TrimSpace(string(d))) {
		g.Promote = strings.TrimSpace(string(d))
	}
	kids, err := r.children(c.FullPath(c.paths.HAReplicas(id)))
	if err != nil {
		return g, err
	}
	for _, k := range kids {
		if validReplicaName(k) {
			g.Replicas = append(g.Replicas, k)
		}
	}
	return g, nil
}

// HAGroup reads broker id's election state once.
func (c *Client) HAGroup(ctx context.Context, id int) (HAGroup, error) {
	return read(ctx, c, func(r reader) (HAGroup, error) { return readHAGroup(c, r, id) })
}

// WatchHAGroup sends broker id's election state now and after every change of its master node,
// its epoch node, its promote node or the membership of replicas/ (not the replicas' data: ReadReplicas reads that
// when needed). The channel follows the Watch* rules: latest value only, re-armed after every
// change, reconnection and session expiry, closed with ctx or the client.
func (c *Client) WatchHAGroup(ctx context.Context, id int) <-chan HAGroup {
	return watch(ctx, c, "election of broker "+strconv.Itoa(id), func(r reader) (HAGroup, error) { return readHAGroup(c, r, id) })
}

// ReadReplicas reads every replicas/<name> node of broker id with its version and owner, sorted by
// name. Nodes with bad data are skipped (logged).
func (c *Client) ReadReplicas(ctx context.Context, id int) ([]ReplicaState, error) {
	dir := c.FullPath(c.paths.HAReplicas(id))
	var out []ReplicaState
	err := c.do(ctx, func() error {
		out = out[:0]
		kids, _, err := c.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		sort.Strings(kids)
		for _, k := range kids {
			if !validReplicaName(k) {
				continue
			}
			d, st, err := c.conn.Get(dir + "/" + k)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return err
			}
			s, perr := ParseReplicaState(k, d)
			if perr != nil {
				c.log.Printf("%v", perr)
				continue
			}
			s.Version, s.Owner = st.Version, st.EphemeralOwner
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PublishReplica registers broker id's replicas/<state.Name> node, which the client keeps alive
// (re-created after a session expiry, like a broker's registration). Update it with
// EphemeralNode.Set / SetAsync.
func (c *Client) PublishReplica(id int, state ReplicaState) (*EphemeralNode, error) {
	if !validReplicaName(state.Name) {
		return nil, fmt.Errorf("zkmeta: bad replica name %q", state.Name)
	}
	return c.Ephemeral(c.paths.HAReplica(id, state.Name), state.Encode())
}

// SetAsync changes the node's data without waiting (the keeper writes it in the background).
func (n *EphemeralNode) SetAsync(data []byte) error { return n.setAsync(data) }

// Claim is one attempt to become broker id's master under a new epoch.
type Claim struct {
	BrokerID int
	Addr     string // host:port: the master node's data is meta://Addr
	Name     string // the claimant's replica name, recorded in the epoch node
	// Seen is the epoch node as read (Version -1: it did not exist); the claim fails with
	// ErrEpochChanged when it changed since.
	Seen        Epoch
	SeenVersion int32
	// Checked replica nodes must still have these versions (their state was compared).
	Checked []ReplicaState
}

// Errors of ClaimMaster.
var (
	// ErrMasterExists: another session holds the master node.
	ErrMasterExists = errors.New("zkmeta: the master node exists")
	// ErrEpochChanged: the epoch node or a checked replica's state changed since it was read.
	ErrEpochChanged = errors.New("zkmeta: the epoch or a replica's state changed since it was read")
)

// ClaimMaster is the election: in one ZooKeeper multi-op it replaces the epoch node by
// Seen.Value+1 (compare-and-set on SeenVersion; created when SeenVersion is -1), checks the
// versions of the Checked replica nodes, and creates the ephemeral master node in this client's
// session. Either all happen or none. It returns the new epoch; ErrMasterExists or
// ErrEpochChanged when another node won or something moved (read again and decide again). A
// claim whose reply was lost with the connection is recognized on retry (the master node is ours
// and the epoch is ours).
func (c *Client) ClaimMaster(ctx context.Context, cl Claim) (int64, error) {
	if !validReplicaName(cl.Name) {
		return 0, fmt.Errorf("zkmeta: bad replica name %q", cl.Name)
	}
	p := c.paths
	next := Epoch{Value: cl.Seen.Value + 1, Claimant: cl.Name}
	epochFull := c.FullPath(p.HAEpochNode(cl.BrokerID))
	masterFull := c.FullPath(p.BrokerMaster(cl.BrokerID))
	if err := c.EnsurePath(ctx, p.HAReplicas(cl.BrokerID)); err != nil {
		return 0, err
	}
	if _, err := ParseBrokerURI("meta://" + cl.Addr); err != nil {
		return 0, err
	}
	uri := []byte("meta://" + cl.Addr)
	ops := make([]any, 0, 2+len(cl.Checked))
	if cl.SeenVersion < 0 {
		ops = append(ops, &zk.CreateRequest{Path: epochFull, Data: []byte(next.String()), Acl: openACL})
	} else {
		ops = append(ops, &zk.SetDataRequest{Path: epochFull, Data: []byte(next.String()), Version: cl.SeenVersion})
	}
	for _, r := range cl.Checked {
		ops = append(ops, &zk.CheckVersionRequest{Path: c.FullPath(p.HAReplica(cl.BrokerID, r.Name)), Version: r.Version})
	}
	ops = append(ops, &zk.CreateRequest{Path: masterFull, Data: uri, Acl: openACL, Flags: zk.FlagEphemeral})
	attempt := 0
	err := c.do(ctx, func() error {
		attempt++
		_, err := c.conn.Multi(ops...)
		if err == nil || isConnErr(err) || attempt == 1 {
			return err
		}
		// A retry: the first attempt may have been applied before its reply was lost.
		d, st, gerr := c.conn.Get(masterFull)
		if gerr == nil && st.EphemeralOwner == c.conn.SessionID() && string(d) == string(uri) {
			if ed, _, eerr := c.conn.Get(epochFull); eerr == nil {
				if e, perr := ParseEpoch(ed); perr == nil && e == next {
					return nil
				}
			}
		}
		return err
	})
	switch {
	case err == nil:
		c.eph.kickNow() // an elected registry takes the node over now
		return next.Value, nil
	case errors.Is(err, zk.ErrNodeExists):
		// Either the master node (somebody won) or the epoch node (created meanwhile).
		if ok, _ := c.Exists(ctx, p.BrokerMaster(cl.BrokerID)); ok {
			return 0, ErrMasterExists
		}
		return 0, ErrEpochChanged
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return 0, ErrEpochChanged
	}
	return 0, err
}

// NewElectedBrokerRegistry is NewBrokerRegistry for a node whose master node is created by the
// election (autoFailover): for a master it never creates /brokers/ids/<id>/master itself, not
// even after a session expiry; it takes the node over while it exists in this client's session
// (ClaimMaster created it) and registers the topic nodes only then. A slave registers as usual.
func NewElectedBrokerRegistry(c *Client, b Broker) (*BrokerRegistry, error) {
	r, err := NewBrokerRegistry(c, b)
	if err != nil {
		return nil, err
	}
	r.elected = true
	return r, nil
}

// ResignMaster deletes broker id's master node if this session holds it (a planned switch:
// `metaq broker promote`); the epoch stays.
func (c *Client) ResignMaster(ctx context.Context, id int) error {
	full := c.FullPath(c.paths.BrokerMaster(id))
	return c.do(ctx, func() error { return c.deleteIfOurs(full, nil) })
}

// HAPromote is /brokers/ids/<id>/promote, a planned switch asked for by `metaq broker promote`:
// a persistent node holding the replica name that should become master. The current master
// stops acknowledging, waits for that replica to reach its position and resigns; the election
// then prefers the named replica, which deletes the node once it is master.
func (p Paths) HAPromote(id int) string { return p.BrokerIDDir(id) + "/promote" }

// RequestPromotion writes broker id's promote node (name: "s<k>" or "m").
func (c *Client) RequestPromotion(ctx context.Context, id int, name string) error {
	if !validReplicaName(name) {
		return fmt.Errorf("zkmeta: bad replica name %q", name)
	}
	return c.Put(ctx, c.paths.HAPromote(id), []byte(name))
}

// ClearPromotion deletes broker id's promote node (a missing node is fine).
func (c *Client) ClearPromotion(ctx context.Context, id int) error {
	return c.Delete(ctx, c.paths.HAPromote(id))
}
