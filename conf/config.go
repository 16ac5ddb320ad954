// Package conf loads and validates a metaq broker's server.ini, in
// Metamorphosis (MetaQ) 1.4's format and key names: a [system] section, a
// [zookeeper] section, an optional [slave] section and one
// [topic=<name>] section per accepted topic, where <name> may contain '*'
// wildcards.
//
// Only [system] brokerId is required; every other key has MetaQ's default
// (see Default and docs/configuration.md). An empty value (hostName=) means
// "use the default", as in MetaQ's sample files. An unknown section or key
// is an error that names the closest known one. MetaQ keys metaq does not
// implement yet are accepted and documented as such, so real MetaQ
// server.ini files load; keys metaq will never use (thread-pool sizes, Java
// filter classes, ...) are accepted and reported in Config.Warnings.
//
// Relative paths (dataPath, dataLogPath, a topic's dataPath) are resolved
// against the directory of the configuration file, not the working
// directory; "~" and MetaQ's "${user.home}" expand to the home directory.
package conf

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Config is a loaded server.ini.
type Config struct {
	System System
	ZK     ZK
	Slave  Slave
	// Replication is the [replication] section (metaq; docs/replication.md).
	Replication Replication
	// Security is the [security] section (conf/security.go); off by default.
	Security Security
	// Topics are the [topic=…] sections in file order, each fully resolved
	// (unset keys inherit [system]); Name and Pattern are the section's
	// topic name or wildcard pattern.
	Topics []Topic
	// Path is the absolute path of the loaded file (Load), the name given
	// to Parse, or "" (Default).
	Path string
	// Warnings are notes for the broker's log: keys that are accepted but
	// ignored, a configuration that accepts no topic, ... Each is prefixed
	// with file:line when known.
	Warnings []string
}

// System is the [system] section.
type System struct {
	BrokerID          int    // brokerId, required, 0..32767 (msgId = brokerId<<48 | physical offset)
	HostName          string // hostName: address advertised in ZooKeeper; default DefaultHostName()
	BindHost          string // bindHost (metaq): listener address; "" = all interfaces
	ServerPort        int    // serverPort, default 8123; 0 = any free port (tests)
	DashboardHTTPPort int    // dashboardHttpPort, default 8120; 0 = disabled (HTTP side: broker/httpapi)
	NumPartitions     int    // numPartitions: default partitions per topic, default 1
	DataPath          string // dataPath, absolute; default ~/meta
	DataLogPath       string // dataLogPath (transaction log), absolute; default dataPath (accepted, not yet used)

	UnflushThreshold int           // unflushThreshold, default 1000; <= 0: sync flush with group commit
	UnflushInterval  time.Duration // unflushInterval (ms), default 10s
	MaxSegmentSize   int64         // maxSegmentSize, default 1 GiB
	MaxTransferSize  int           // maxTransferSize, default 1 MiB
	MaxMessageSize   int           // maxMessageSize (metaq), default 4 MiB
	IndexFileSize    int64         // indexFileSize (metaq), default 20 MiB, multiple of 16
	DeletePolicy     Retention     // deletePolicy, default delete,168
	DeleteWhen       Schedule      // deleteWhen, default "0 0 6,18 * * ?"

	AcceptPublish         bool // acceptPublish, default true (topics inherit)
	AcceptSubscribe       bool // acceptSubscribe, default true (topics inherit)
	Stat                  bool // stat, default true (topics inherit; accepted, not yet used)
	UpdateConsumerOffsets bool // updateConsumerOffsets, default false (accepted, not yet used)

	IdleTimeout    time.Duration // idleTimeout (metaq, seconds), default 600s; 0 = never
	MaxConnections int           // maxConnections (metaq), default 0 = unlimited

	Delay Delay // messageDelayLevel, maxReconsumeTimes (conf/delay.go)
	Pop   Pop   // maxDeliveries, popMaxInflight (conf/pop.go)
	// The HTTP side (metaq keys; docs/observability.md).
	DashboardToken          string        // dashboardToken: needed by administrative HTTP actions; "" = read-only
	DashboardMaxConnections int           // dashboardMaxConnections, default 2048: open connections on dashboardHttpPort (WebSockets included)
	MetricsMaxTopics        int           // metricsMaxTopics, default 2000: topics with their own series; later ones are summed into topic="_other"
	MetricsMaxLagSeries     int           // metricsMaxLagSeries, default 2000: per-partition consumer-lag series (largest lags first)
	MetricsLagInterval      time.Duration // metricsLagIntervalMs, default 15s: how often consumer offsets are re-read from ZooKeeper
	MaxPendingPutBytes      int64         // maxPendingPutBytes (metaq), default 256 MiB: put data buffered across connections
	PutDataTimeout          time.Duration // putDataTimeoutMs (metaq), default 30s; 0 = only idleTimeout applies
	MaxParkedGets           int           // maxParkedGetsPerConnection (metaq), default 4096: long-polling gets waiting on one connection

	// Accepted for MetaQ compatibility; ignored (see Warnings).
	GetProcessThreadCount       int    // getProcessThreadCount, default 10×CPUs
	PutProcessThreadCount       int    // putProcessThreadCount, default 10×CPUs
	LoadMessageStoresInParallel bool   // loadMessageStoresInParallel, default false
	QuartzThreadCount           int    // quartzThreadCount, default 5
	AppClassPath                string // appClassPath, default ""

	// Transactions (maxCheckpoints and checkpointInterval accepted, not yet used).
	MaxCheckpoints            int           // maxCheckpoints, default 3
	CheckpointInterval        time.Duration // checkpointInterval (ms), default 1h
	MaxTxTimeoutTimerCapacity int           // maxTxTimeoutTimerCapacity, default 30000: open transactions, broker-wide
	MaxTxPerConnection        int           // maxTxPerConnection (metaq), default 1024: open transactions begun on one connection
	MaxTxTimeout              time.Duration // maxTxTimeoutInSeconds, default 60s
	FlushTxLogAtCommit        int           // flushTxLogAtCommit 0|1|2, default 1

	// Transactional messages with check-back (RocketMQ's keys and defaults).
	TransactionCheckInterval time.Duration // transactionCheckInterval (ms), default 60s
	TransactionCheckMax      int           // transactionCheckMax, default 15
}

// ZK is the [zookeeper] section.
type ZK struct {
	Enable            bool          // zk.zkEnable, default true; false = standalone broker
	Connect           string        // zk.zkConnect, default "localhost:2181" (host:port[,host:port...][/chroot])
	Root              string        // zk.zkRoot, default "/meta"
	SessionTimeout    time.Duration // zk.zkSessionTimeoutMs, default 30s
	ConnectionTimeout time.Duration // zk.zkConnectionTimeoutMs, default 30s
	SyncTime          time.Duration // zk.zkSyncTimeMs, default 5s
	Auth              string        // zk.zkAuth (metaq): "user:password" digest; set = metaq's nodes get a digest ACL (docs/security.md)
}

// Replication is metaq's [replication] section (docs/replication.md).
type Replication struct {
	// SyncReplicas: a put is acknowledged once this many slaves hold it
	// durably too (0 = asynchronous replication). Needs sync flush
	// (unflushThreshold=0); a master with syncReplicas > 0 flushes in sync
	// mode whatever unflushThreshold says (a warning tells).
	SyncReplicas int
	// ReplicaTimeout bounds the wait for the slaves (default 3s): a put
	// not confirmed in time, or made while fewer than SyncReplicas slaves
	// have been in sync for this long, is answered 503.
	ReplicaTimeout time.Duration
	// AutoFailover: the election in ZooKeeper decides the roles
	// (docs/replication.md); false = static roles from [slave] slaveId.
	AutoFailover bool
	// MasterAddr (host:port) is the master a slave follows when set;
	// otherwise the slave reads /brokers/ids/<brokerId>/master.
	MasterAddr string
}

// Slave is MetaQ's [slave] section: slaveId makes the broker a slave of
// the master of its brokerId (docs/replication.md).
type Slave struct {
	ID                   int           // slaveId, default -1 (a master); >= 0 starts a slave
	Group                string        // slaveGroup, default "meta-slave-group"
	MaxDelay             time.Duration // slaveMaxDelayInMills, default 500ms
	AutoSyncMasterConfig bool          // autoSyncMasterConfig, default false
}

// Topic is the configuration of one topic, or of one [topic=…] section.
type Topic struct {
	// Name is the topic name (for a section: its name or pattern).
	Name string
	// Pattern is the [topic=…] section that accepts the topic: Name itself,
	// or a wildcard such as "log-*" or "*".
	Pattern string

	NumPartitions    int           // numPartitions
	UnflushThreshold int           // unflushThreshold (accepted, not yet used per topic)
	UnflushInterval  time.Duration // unflushInterval (accepted, not yet used per topic)
	DeletePolicy     Retention     // deletePolicy
	DeleteWhen       Schedule      // deleteWhen (accepted, not yet used per topic)
	AcceptPublish    bool          // acceptPublish
	AcceptSubscribe  bool          // acceptSubscribe
	Stat             bool          // stat (accepted, not yet used)
	DataPath         string        // dataPath (ignored: every topic shares the commit log)
	// Filters maps consumer group to the Java filter class of a
	// group.<name>=<class> key (accepted, ignored).
	Filters map[string]string
	// Line is the line of the section header (0 when not from a file).
	Line int
}

// Wildcard reports whether t.Pattern contains '*'.
func (t Topic) Wildcard() bool { return strings.Contains(t.Pattern, "*") }

// Defaults (MetaQ's, plus metaq's own keys).
const (
	DefaultServerPort         = 8123
	DefaultDashboardHTTPPort  = 8120
	DefaultUnflushThreshold   = 1000
	DefaultUnflushInterval    = 10 * time.Second
	DefaultMaxSegmentSize     = 1 << 30
	DefaultMaxTransferSize    = 1 << 20
	DefaultMaxMessageSize     = 4 << 20
	DefaultIndexFileSize      = 20 << 20
	DefaultDeletePolicy       = "delete,168"
	DefaultDeleteWhen         = "0 0 6,18 * * ?"
	DefaultIdleTimeout        = 600 * time.Second
	DefaultMaxPendingPutBytes = 256 << 20
	DefaultPutDataTimeout     = 30 * time.Second
	DefaultMaxParkedGets      = 4096
	DefaultZKConnect          = "localhost:2181"
	DefaultZKRoot             = "/meta"
	DefaultSlaveGroup         = "meta-slave-group"

	DefaultMetricsMaxTopics    = 2000
	DefaultMetricsMaxLagSeries = 2000
	DefaultMetricsLagInterval  = 15 * time.Second

	// DefaultDashboardMaxConnections is dashboardMaxConnections' default:
	// room for the HTTP gateway's 1024 WebSocket sockets (docs/http.md) and
	// as many dashboard, API and /metrics connections.
	DefaultDashboardMaxConnections = 2048

	MaxBrokerID      = 1<<15 - 1 // msgId = brokerId<<48 | physical offset, positive
	MaxNumPartitions = 65535
	maxSegmentSize   = protocol.MaxSegmentSize // 4 GiB - 1: a segment's BLANK filler records its size in 32 bits
	maxMessageSize   = 1 << 30
	maxIndexFileSize = 1 << 30
	// RecordLimitOverhead is added to maxMessageSize to get the largest
	// record the store can be asked to append (record header, a 255-byte
	// topic and the length fields); maxSegmentSize must hold one.
	RecordLimitOverhead = protocol.RecordOverhead + protocol.MaxTopicLen
)

// Default returns the configuration of a server.ini that sets only brokerId:
// MetaQ's defaults, ZooKeeper enabled on localhost:2181, no topic accepted.
// HostName is DefaultHostName() and DataPath is ~/meta.
func Default(brokerID int) *Config {
	c := defaults(brokerID)
	c.System.HostName = DefaultHostName()
	dataPath, err := resolvePath("~/meta", "")
	if err != nil {
		dataPath, _ = filepath.Abs("meta")
	}
	c.System.DataPath = dataPath
	c.System.DataLogPath = dataPath
	return c
}

// defaults is Default without the host name and data paths.
func defaults(brokerID int) *Config {
	policy, _ := ParseDeletePolicy(DefaultDeletePolicy)
	when, _ := ParseSchedule(DefaultDeleteWhen)
	threads := 10 * runtime.NumCPU()
	return &Config{
		System: System{
			BrokerID:          brokerID,
			ServerPort:        DefaultServerPort,
			DashboardHTTPPort: DefaultDashboardHTTPPort,
			NumPartitions:     1,
			UnflushThreshold:  DefaultUnflushThreshold,
			UnflushInterval:   DefaultUnflushInterval,
			MaxSegmentSize:    DefaultMaxSegmentSize,
			MaxTransferSize:   DefaultMaxTransferSize,
			MaxMessageSize:    DefaultMaxMessageSize,
			IndexFileSize:     DefaultIndexFileSize,
			DeletePolicy:      policy,
			DeleteWhen:        when,
			AcceptPublish:     true,
			AcceptSubscribe:   true,
			Stat:              true,
			IdleTimeout:       DefaultIdleTimeout,

			DashboardMaxConnections: DefaultDashboardMaxConnections,
			MetricsMaxTopics:        DefaultMetricsMaxTopics,
			MetricsMaxLagSeries:     DefaultMetricsMaxLagSeries,
			MetricsLagInterval:      DefaultMetricsLagInterval,
			MaxPendingPutBytes:      DefaultMaxPendingPutBytes,
			PutDataTimeout:          DefaultPutDataTimeout,
			MaxParkedGets:           DefaultMaxParkedGets,

			GetProcessThreadCount: threads,
			PutProcessThreadCount: threads,
			QuartzThreadCount:     5,

			MaxCheckpoints:            3,
			CheckpointInterval:        time.Hour,
			MaxTxTimeoutTimerCapacity: 30000,
			MaxTxPerConnection:        1024,
			MaxTxTimeout:              60 * time.Second,
			FlushTxLogAtCommit:        1,
			TransactionCheckInterval:  60 * time.Second,
			TransactionCheckMax:       15,
		},
		ZK: ZK{
			Enable:            true,
			Connect:           DefaultZKConnect,
			Root:              DefaultZKRoot,
			SessionTimeout:    30 * time.Second,
			ConnectionTimeout: 30 * time.Second,
			SyncTime:          5 * time.Second,
		},
		Slave: Slave{
			ID:       -1,
			Group:    DefaultSlaveGroup,
			MaxDelay: 500 * time.Millisecond,
		},
		Replication: Replication{ReplicaTimeout: 3 * time.Second},
		Security:    defaultSecurity(),
	}
}

// NewTopic returns a topic section for pattern with every value inherited
// from c.System (what an empty [topic=pattern] section gives). Append it to
// c.Topics to accept the topic; it is not added by NewTopic.
func (c *Config) NewTopic(pattern string) Topic {
	s := &c.System
	return Topic{
		Name:             pattern,
		Pattern:          pattern,
		NumPartitions:    s.NumPartitions,
		UnflushThreshold: s.UnflushThreshold,
		UnflushInterval:  s.UnflushInterval,
		DeletePolicy:     s.DeletePolicy,
		DeleteWhen:       s.DeleteWhen,
		AcceptPublish:    s.AcceptPublish,
		AcceptSubscribe:  s.AcceptSubscribe,
		Stat:             s.Stat,
		DataPath:         s.DataPath,
	}
}

// Topic returns the configuration of topic name: the [topic=name] section if
// there is one, else the most specific wildcard section that matches name
// (longest literal prefix before the first '*', then most literal
// characters, then the first in the file). The result has Name = name and
// Pattern = the section. ok is false when no section accepts name (MetaQ
// then answers "The server do not accept topic …") or name is not a valid
// topic name. The search is linear in the number of sections; cache the
// result on hot paths.
func (c *Config) Topic(name string) (t Topic, ok bool) {
	if !ValidTopicName(name) {
		return Topic{}, false
	}
	if protocol.IsSystemTopic(name) {
		return c.systemTopic(name)
	}
	best := -1
	for i := range c.Topics {
		p := c.Topics[i].Pattern
		if p == name {
			best = i
			break
		}
		if !strings.Contains(p, "*") || !MatchPattern(p, name) {
			continue
		}
		if best < 0 || moreSpecific(p, c.Topics[best].Pattern) {
			best = i
		}
	}
	if best < 0 {
		return Topic{}, false
	}
	t = c.Topics[best]
	t.Name = name
	if t.Filters != nil {
		m := make(map[string]string, len(t.Filters))
		for k, v := range t.Filters {
			m[k] = v
		}
		t.Filters = m
	}
	return t, true
}

// ExplicitTopics returns the names of the non-wildcard [topic=…] sections
// in file order: the topics a broker registers in ZooKeeper at startup
// (topics accepted through a wildcard register on their first put).
func (c *Config) ExplicitTopics() []string {
	var names []string
	for _, t := range c.Topics {
		if !strings.Contains(t.Pattern, "*") {
			names = append(names, t.Pattern)
		}
	}
	return names
}

// ListenAddr is the address the broker listens on: bindHost:serverPort
// (":8123" for all interfaces).
func (s System) ListenAddr() string {
	return net.JoinHostPort(s.BindHost, strconv.Itoa(s.ServerPort))
}

// AdvertisedAddr is hostName:serverPort, the address in the broker's
// ZooKeeper node (meta://<AdvertisedAddr>).
func (s System) AdvertisedAddr() string {
	return net.JoinHostPort(s.HostName, strconv.Itoa(s.ServerPort))
}

// SyncFlush reports whether unflushThreshold <= 0 (a put is answered only
// once it is on disk).
func (s System) SyncFlush() bool { return s.UnflushThreshold <= 0 }

// ValidTopicName reports whether name is a valid topic (or group) name:
// 1 to 255 of [A-Za-z0-9_.%-], and neither "." nor "..".
func ValidTopicName(name string) bool {
	return validName(name, false)
}

// ValidTopicPattern reports whether p is a valid [topic=…] section name: a
// topic name that may also contain '*' (any run of characters, possibly
// empty).
func ValidTopicPattern(p string) bool {
	return validName(p, true)
}

func validName(s string, star bool) bool {
	if len(s) == 0 || len(s) > protocol.MaxTopicLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == '%', c == '-':
		case c == '*' && star:
		default:
			return false
		}
	}
	return true
}

// MatchPattern reports whether name matches p, where '*' matches any run of
// bytes (possibly empty) and every other byte matches itself: [topic=…]
// wildcards here, the users file's ACL patterns in broker/auth (on a
// request's []byte topic: it does not allocate). The backtracking is linear
// in len(name) per star.
func MatchPattern[N ~string | ~[]byte](p string, name N) bool {
	px, nx := 0, 0
	starP, starN := -1, 0
	for nx < len(name) {
		switch {
		case px < len(p) && p[px] == '*':
			starP, starN = px, nx
			px++
		case px < len(p) && p[px] == name[nx]:
			px++
			nx++
		case starP >= 0:
			starN++
			px, nx = starP+1, starN
		default:
			return false
		}
	}
	for px < len(p) && p[px] == '*' {
		px++
	}
	return px == len(p)
}

// moreSpecific reports whether wildcard a beats wildcard b: a longer literal
// prefix, then more literal characters. Ties keep file order.
func moreSpecific(a, b string) bool {
	pa, pb := strings.IndexByte(a, '*'), strings.IndexByte(b, '*')
	if pa != pb {
		return pa > pb
	}
	la := len(a) - strings.Count(a, "*")
	lb := len(b) - strings.Count(b, "*")
	return la > lb
}

// Validate checks ranges and cross-key constraints (Load and Parse call it;
// call it again after changing a Config in code).
func (c *Config) Validate() error {
	return errors.Join(c.validate(nil)...)
}

func checkHost(h string, emptyOK bool) error {
	if h == "" {
		if emptyOK {
			return nil
		}
		return errors.New("must not be empty")
	}
	if len(h) > 253 || strings.ContainsAny(h, " \t/[]@?#") {
		return fmt.Errorf("%q is not a host name or IP address", h)
	}
	if strings.Contains(h, ":") && net.ParseIP(h) == nil {
		return fmt.Errorf("%q is not a host name or IP address (no port here: see serverPort)", h)
	}
	return nil
}

func checkZKConnect(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty when zk.zkEnable=true")
	}
	hosts := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		hosts = s[:i]
		if err := checkZKRoot(s[i:]); err != nil {
			return fmt.Errorf("chroot: %v", err)
		}
	}
	for _, hp := range strings.Split(hosts, ",") {
		hp = strings.TrimSpace(hp)
		if hp == "" {
			return fmt.Errorf("%q: empty server in the list", s)
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			host, port = hp, "2181" // no port: ZooKeeper's default
		}
		if host == "" || strings.ContainsAny(host, " \t") {
			return fmt.Errorf("%q: bad server %q (want host:port[,host:port...][/chroot])", s, hp)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%q: bad port in %q", s, hp)
		}
	}
	return nil
}

func checkZKRoot(r string) error {
	if !strings.HasPrefix(r, "/") || r == "/" || strings.HasSuffix(r, "/") || strings.Contains(r, "//") ||
		strings.ContainsAny(r, " \t\r\n") {
		return fmt.Errorf("%q: want an absolute ZooKeeper path such as /meta (no trailing /)", r)
	}
	for _, part := range strings.Split(r[1:], "/") {
		if part == "." || part == ".." {
			return fmt.Errorf("%q: . and .. are not allowed", r)
		}
	}
	return nil
}

// Error is one problem found in a configuration file. Load and Parse
// return every problem found, joined (errors.Join); use errors.As to get the
// first *Error.
type Error struct {
	File    string // file name ("" when unknown)
	Line    int    // 1-based line (0 when unknown)
	Section string // section name without brackets ("system", "topic=test"), "" if none
	Key     string // key, "" for section-level errors
	Msg     string // the message, naming section and key
}

func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return e.Msg
}
