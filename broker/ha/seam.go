// Package ha replicates a broker's commit log from a master to its slaves
// (docs/replication.md): the master streams raw log bytes to every slave from
// the position the slave reports, the slave appends them at the same physical
// offsets, makes them durable in batches and reports its durable position
// back; with syncReplicas > 0 the master acknowledges a put only once enough
// slaves hold it durably.
//
// This file is the seam between replication and the election that drives it
// (docs/internal/ha-seam.md): the election decides who is master under which
// epoch and calls Promote, Demote and Fence; replication moves the bytes.
package ha

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/zkmeta"
)

// Role is a node's replication role.
type Role int32

const (
	RoleMaster Role = iota // accepts puts, streams its log to slaves
	RoleSlave              // follows a master, refuses puts with 403
)

func (r Role) String() string {
	switch r {
	case RoleMaster:
		return "master"
	case RoleSlave:
		return "slave"
	}
	return "unknown"
}

// Controller is a broker node's replication role, as the election drives it.
// Every method is safe for concurrent use. Promote and Demote are serialized
// by the implementation (a second call waits for the first).
type Controller interface {
	// Role is the node's current role.
	Role() Role
	// Epoch is the epoch this node serves under: the epoch of the master it
	// follows (slave) or the epoch it was promoted with (master). A node
	// configured as master (autoFailover=false) opens a new one at each
	// start once a slave has linked to its log (epoch.go); 0 before that.
	Epoch() int64
	// DurablePos is the end of this node's durable commit log (a physical
	// offset): what an election compares to pick the most complete slave.
	DurablePos() int64
	// AckedPos is, on a master, the end of what it may have acknowledged
	// to producers: at least DurablePos, and in async-flush mode what is
	// written (a put is answered once written, before its fsync). A planned
	// switch waits until its target holds this much durably.
	AckedPos() int64
	// InSync reports, on a slave, whether it is within slaveMaxDelayInMills
	// of its master (caught up, link alive); on a master it is true unless
	// fenced.
	InSync() bool
	// MasterAddr is the master this slave follows ("" on a master or when
	// no master is known yet).
	MasterAddr() string

	// Promote makes a slave the master of epoch: it stops following, writes
	// the epoch record (epoch, start position) into its own log, starts the
	// services that write (delay timer, transaction checks) and accepts
	// puts. On a master it only records the new epoch (if higher).
	Promote(ctx context.Context, epoch int64) error
	// Demote makes the node a slave of masterAddr under epoch: it refuses
	// puts, stops the writing services, asks the master where its own last
	// epoch ends in the master's history, truncates its log there (logging
	// the bytes and messages cut) and follows masterAddr.
	Demote(ctx context.Context, masterAddr string, epoch int64) error
	// Fence stops acknowledging puts at once (the master lost its ZooKeeper
	// session): puts, including ones waiting for replication, are answered
	// 503 with reason until Promote or Demote. Idempotent.
	Fence(reason string)
}

// Errors returned by a Controller and by the put path. Each matches
// store.ErrNotReplicated, so a put whose round fails with it is answered 503.
var (
	// ErrNotMaster: the node stopped being the master while the put waited.
	ErrNotMaster = fmt.Errorf("ha: not the master (%w)", store.ErrNotReplicated)
	// ErrFenced: the master was fenced.
	ErrFenced = fmt.Errorf("ha: fenced (%w)", store.ErrNotReplicated)
	// ErrReplicaTimeout: fewer than syncReplicas slaves confirmed the put
	// durable within replicaTimeoutMs.
	ErrReplicaTimeout = fmt.Errorf("ha: not replicated (%w)", store.ErrNotReplicated)
)

// DemotedMasterSlaveID is the slave number a node configured as master
// ([slave] slaveId=-1) registers under after a Demote
// (/brokers/ids/<id>/slave99, …/<id>-s99): a configured slave keeps its own
// slaveId in every role.
const DemotedMasterSlaveID = 99

// ElectionConfig is what the broker hands the election when
// [replication] autoFailover=true (docs/internal/ha-seam.md).
type ElectionConfig struct {
	// ZK is the broker's own ZooKeeper client: the master node the election
	// creates lives in the broker's session, so it vanishes with the
	// session, and the registrar sees it as its own.
	ZK       *zkmeta.Client
	BrokerID int
	SlaveID  int    // [slave] slaveId as configured (-1: configured master)
	Addr     string // host:port this node advertises (master node data meta://Addr)
	// Controller is this node's replication role; the election calls
	// Promote, Demote and Fence on it.
	Controller Controller
	Logger     *slog.Logger
}
