package conf

import (
	"fmt"
	"net"
)

// locator returns the line of key in section (0 when unknown).
type locator func(section, key string) int

// validators check a Config, one part each, in this order. The check of a new key goes into the
// function of its part; a feature with keys of its own can add its function from its own file:
//
//	func init() { validators = append(validators, validateDelay) }
var validators = []func(*Config, *problems){
	validateIdentity,
	validateStorage,
	validateLimits,
	validateTx,
	validateZK,
	validateSlave,
	validateTopics,
}

func (c *Config) validate(loc locator) []error {
	p := &problems{c: c, loc: loc}
	for _, v := range validators {
		v(c, p)
	}
	return p.errs
}

// problems collects what the validators find, each with the line of its key when known.
type problems struct {
	c    *Config
	loc  locator
	errs []error
}

// bad reports a wrong value of key in section.
func (p *problems) bad(section, key, format string, args ...any) {
	line := 0
	if p.loc != nil {
		line = p.loc(section, key)
	}
	p.errs = append(p.errs, &Error{File: p.c.Path, Line: line, Section: section, Key: key,
		Msg: fmt.Sprintf("[%s] %s: ", section, key) + fmt.Sprintf(format, args...)})
}

// badSection reports a problem of a whole section, starting at line.
func (p *problems) badSection(line int, section, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.c.Path, Line: line, Section: section,
		Msg: fmt.Sprintf("[%s]: ", section) + fmt.Sprintf(format, args...)})
}

const sysSection = "system"

// validateIdentity: who the broker is and where it listens.
func validateIdentity(c *Config, p *problems) {
	s := &c.System
	if s.BrokerID < 0 || s.BrokerID > MaxBrokerID {
		p.bad(sysSection, "brokerId", "%d is out of range 0..%d (message ids are brokerId<<48 | offset)", s.BrokerID, MaxBrokerID)
	}
	if err := checkHost(s.HostName, false); err != nil {
		p.bad(sysSection, "hostName", "%v", err)
	}
	if err := checkHost(s.BindHost, true); err != nil {
		p.bad(sysSection, "bindHost", "%v", err)
	}
	if s.ServerPort < 0 || s.ServerPort > 65535 {
		p.bad(sysSection, "serverPort", "%d is out of range 0..65535", s.ServerPort)
	}
	if s.DashboardHTTPPort < 0 || s.DashboardHTTPPort > 65535 {
		p.bad(sysSection, "dashboardHttpPort", "%d is out of range 0..65535 (0 = disabled)", s.DashboardHTTPPort)
	} else if s.DashboardHTTPPort != 0 && s.DashboardHTTPPort == s.ServerPort {
		p.bad(sysSection, "dashboardHttpPort", "%d is also serverPort", s.DashboardHTTPPort)
	}
}

// validateStorage: partitions, the data directory, flushing, file and message sizes, retention.
func validateStorage(c *Config, p *problems) {
	s := &c.System
	if s.NumPartitions < 1 || s.NumPartitions > MaxNumPartitions {
		p.bad(sysSection, "numPartitions", "%d is out of range 1..%d", s.NumPartitions, MaxNumPartitions)
	}
	if s.DataPath == "" {
		p.bad(sysSection, "dataPath", "must not be empty")
	}
	if s.UnflushInterval <= 0 {
		p.bad(sysSection, "unflushInterval", "must be > 0 (got %v)", s.UnflushInterval)
	}
	if s.MaxMessageSize < 1 || s.MaxMessageSize > maxMessageSize {
		p.bad(sysSection, "maxMessageSize", "%d is out of range 1..%d (1g)", s.MaxMessageSize, maxMessageSize)
	}
	if least := int64(s.MaxMessageSize) + RecordLimitOverhead; s.MaxSegmentSize > maxSegmentSize {
		p.bad(sysSection, "maxSegmentSize", "%d is larger than %d (4g - 1, e.g. 4095m): the filler that ends a segment records its size in 32 bits",
			s.MaxSegmentSize, int64(maxSegmentSize))
	} else if s.MaxSegmentSize < least {
		p.bad(sysSection, "maxSegmentSize", "%d cannot hold the largest record: need at least maxMessageSize (%d) + %d = %d bytes",
			s.MaxSegmentSize, s.MaxMessageSize, RecordLimitOverhead, least)
	}
	if s.MaxTransferSize < 1 || s.MaxTransferSize > maxMessageSize {
		p.bad(sysSection, "maxTransferSize", "%d is out of range 1..%d (1g)", s.MaxTransferSize, maxMessageSize)
	}
	if s.IndexFileSize < 16 || s.IndexFileSize%16 != 0 || s.IndexFileSize > maxIndexFileSize {
		p.bad(sysSection, "indexFileSize", "%d must be a multiple of 16 (index unit size) in 16..%d (1g)", s.IndexFileSize, maxIndexFileSize)
	}
	if s.DeleteWhen == nil {
		p.bad(sysSection, "deleteWhen", "must be set")
	}
}

// validateLimits: connections and thread counts.
func validateLimits(c *Config, p *problems) {
	s := &c.System
	if s.IdleTimeout < 0 {
		p.bad(sysSection, "idleTimeout", "must not be negative")
	}
	if s.MaxConnections < 0 {
		p.bad(sysSection, "maxConnections", "must not be negative (0 = unlimited)")
	}
	if s.MaxPendingPutBytes < int64(s.MaxMessageSize) {
		p.bad(sysSection, "maxPendingPutBytes", "%d is smaller than maxMessageSize (%d): one put must fit", s.MaxPendingPutBytes, s.MaxMessageSize)
	}
	if s.PutDataTimeout < 0 {
		p.bad(sysSection, "putDataTimeoutMs", "must not be negative (0 = only idleTimeout applies)")
	}
	if s.MaxParkedGets < 1 {
		p.bad(sysSection, "maxParkedGetsPerConnection", "must be >= 1")
	}
	for _, n := range []struct {
		key string
		v   int
	}{
		{"getProcessThreadCount", s.GetProcessThreadCount},
		{"putProcessThreadCount", s.PutProcessThreadCount},
		{"quartzThreadCount", s.QuartzThreadCount},
	} {
		if n.v < 0 {
			p.bad(sysSection, n.key, "must not be negative")
		}
	}
}

// validateTx: checkpoints and transactions.
func validateTx(c *Config, p *problems) {
	s := &c.System
	if s.MaxCheckpoints < 1 {
		p.bad(sysSection, "maxCheckpoints", "must be >= 1")
	}
	if s.CheckpointInterval <= 0 {
		p.bad(sysSection, "checkpointInterval", "must be > 0")
	}
	if s.MaxTxTimeoutTimerCapacity < 1 {
		p.bad(sysSection, "maxTxTimeoutTimerCapacity", "must be >= 1")
	}
	if s.MaxTxPerConnection < 1 {
		p.bad(sysSection, "maxTxPerConnection", "must be >= 1")
	}
	if s.MaxTxTimeout <= 0 {
		p.bad(sysSection, "maxTxTimeoutInSeconds", "must be > 0")
	}
	if s.TransactionCheckInterval <= 0 {
		p.bad(sysSection, "transactionCheckInterval", "must be > 0")
	}
	if s.TransactionCheckMax < 1 {
		p.bad(sysSection, "transactionCheckMax", "must be >= 1")
	}
	if s.FlushTxLogAtCommit < 0 || s.FlushTxLogAtCommit > 2 {
		p.bad(sysSection, "flushTxLogAtCommit", "%d: want 0 (OS decides), 1 (every commit) or 2 (every second)", s.FlushTxLogAtCommit)
	}
}

// validateZK: the [zookeeper] section.
func validateZK(c *Config, p *problems) {
	z := &c.ZK
	const zk = "zookeeper"
	if z.Enable {
		if err := checkZKConnect(z.Connect); err != nil {
			p.bad(zk, "zk.zkConnect", "%v", err)
		}
	}
	if err := checkZKRoot(z.Root); err != nil {
		p.bad(zk, "zk.zkRoot", "%v", err)
	}
	if z.SessionTimeout <= 0 {
		p.bad(zk, "zk.zkSessionTimeoutMs", "must be > 0")
	}
	if z.ConnectionTimeout <= 0 {
		p.bad(zk, "zk.zkConnectionTimeoutMs", "must be > 0")
	}
	if z.SyncTime < 0 {
		p.bad(zk, "zk.zkSyncTimeMs", "must not be negative")
	}
}

// validateSlave: the [slave] section.
func validateSlave(c *Config, p *problems) {
	if c.Slave.ID < -1 || c.Slave.ID > MaxBrokerID {
		p.bad("slave", "slaveId", "%d is out of range -1..%d (-1 = master)", c.Slave.ID, MaxBrokerID)
	}
	if c.Slave.MaxDelay < 0 {
		p.bad("slave", "slaveMaxDelayInMills", "must not be negative")
	}
	r := &c.Replication
	if r.SyncReplicas < 0 || r.SyncReplicas > 64 {
		p.bad("replication", "syncReplicas", "%d is out of range 0..64", r.SyncReplicas)
	}
	if r.ReplicaTimeout <= 0 {
		p.bad("replication", "replicaTimeoutMs", "must be > 0")
	}
	if r.MasterAddr != "" {
		if _, port, err := net.SplitHostPort(r.MasterAddr); err != nil || port == "" {
			p.bad("replication", "masterAddr", "%q is not host:port", r.MasterAddr)
		}
	}
}

// validateTopics: every [topic=…] section (names, duplicates, then its keys).
func validateTopics(c *Config, p *problems) {
	seen := make(map[string]bool, len(c.Topics))
	for i := range c.Topics {
		t := &c.Topics[i]
		sec := "topic=" + t.Pattern
		if !ValidTopicPattern(t.Pattern) {
			p.badSection(t.Line, sec, "invalid topic name %q: want 1-255 of A-Z a-z 0-9 _ . %% - (and * wildcards), not . or ..", t.Pattern)
			continue
		}
		if seen[t.Pattern] {
			p.badSection(t.Line, sec, "duplicate section")
		}
		seen[t.Pattern] = true
		validateTopic(t, sec, p)
	}
}

// validateTopic checks the keys of one [topic=…] section.
func validateTopic(t *Topic, sec string, p *problems) {
	if t.NumPartitions < 1 || t.NumPartitions > MaxNumPartitions {
		p.bad(sec, "numPartitions", "%d is out of range 1..%d", t.NumPartitions, MaxNumPartitions)
	}
	if t.UnflushInterval <= 0 {
		p.bad(sec, "unflushInterval", "must be > 0 (got %v)", t.UnflushInterval)
	}
	if t.DeleteWhen == nil {
		p.bad(sec, "deleteWhen", "must be set")
	}
}
