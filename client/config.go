package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// Partition identifies a partition in the cluster: broker id and partition
// number ("<brokerId>-<partition>", e.g. "1-0"). Partitions sort by broker id,
// then partition (MetaQ's order).
type Partition = zkmeta.Partition

// Offset is a consumer position: the next queue offset to consume and the id
// of the last consumed message (-1 when unknown). Its string form
// "<msgId>-<offset>" is what ZooKeeper stores.
type Offset = zkmeta.Offset

// Config configures a Producer, a Consumer or an Admin. Only ZKConnect (or
// Brokers, for tools) is required; every other field has a default.
type Config struct {
	// ZKConnect is the ZooKeeper connect string "host:port[,host:port…][/chroot]"
	// (server.ini's zk.zkConnect).
	ZKConnect string
	// ZKRoot is zk.zkRoot (default "/meta").
	ZKRoot string
	// ZKSessionTimeout (default 30s) and ZKConnectionTimeout (default 30s) as
	// zk.zkSessionTimeoutMs and zk.zkConnectionTimeoutMs.
	ZKSessionTimeout    time.Duration
	ZKConnectionTimeout time.Duration

	// Brokers lists broker addresses ("host:port") to use without ZooKeeper:
	// a producer then sends round-robin over them with partition -1 (the
	// broker picks the partition). Handy for tools and tests; consumers need
	// ZooKeeper. Ignored when ZKConnect is set.
	Brokers []string

	// Logger receives connection changes, rebalances and errors (default
	// slog.Default()).
	Logger *slog.Logger

	// DialTimeout bounds a TCP connect to a broker (default 3s).
	DialTimeout time.Duration
	// RequestTimeout bounds requests other than puts and long-polling gets
	// (offset, seek, stats, query, heartbeats) when the context has no
	// earlier deadline (default 10s).
	RequestTimeout time.Duration
	// HeartbeatInterval: a connection that has seen no traffic for this long
	// sends `version`; one that does not answer within RequestTimeout is
	// closed and re-dialled (default 5s).
	HeartbeatInterval time.Duration
	// ReconnectBackoff and MaxReconnectBackoff pace re-dialling a broker that
	// went away: the delay doubles from the first to the second (defaults
	// 50ms and 5s).
	ReconnectBackoff    time.Duration
	MaxReconnectBackoff time.Duration
	// MaxInFlight bounds the requests in flight on one broker connection;
	// SendAsync blocks (bounded by its context) when the window is full
	// (default 1024, at most 1,048,576). A consumer keeps one long-polling
	// get per partition on it: a broker answers 503 to gets beyond its
	// maxParkedGetsPerConnection (default 4096) waiting on one connection.
	MaxInFlight int

	// Hooks observe every send and handler call (client/hook.go): user
	// tracing such as OpenTelemetry spans (docs/client.md).
	Hooks []Hook
	// Trace writes message-trace events (sends, handler calls, retries) to
	// the brokers' %TRACE% topic, asynchronously and in batches; see
	// TraceOptions and docs/trace.md.
	Trace        bool
	TraceOptions TraceOptions

	Producer ProducerOptions
	Consumer ConsumerOptions

	// Security (docs/security.md). TLS, when set, is used for every broker
	// connection (dial the brokers' tlsPort: a broker started with
	// allowPlaintext=false advertises it in ZooKeeper). User and Secret,
	// when User is set, authenticate each connection with `auth` right
	// after it is made. ZKAuth is zk.zkAuth ("user:password") for
	// ZooKeeper's digest ACLs.
	TLS *tls.Config
	// TLSPort, when set with TLS, is the port dialed on every broker's
	// host instead of the advertised one (brokers that keep their plain
	// serverPort for MetaQ 1.x clients advertise that one in ZooKeeper; a
	// cluster shares its [security] tlsPort).
	TLSPort int
	User    string
	Secret  string
	ZKAuth  string
}

// ProducerOptions are the Producer's knobs.
type ProducerOptions struct {
	// Selector picks a partition for each message (default RoundRobin()).
	// Use HashByKey() for per-key ordering.
	Selector PartitionSelector
	// SendRetries is how many times a failed send is retried on another
	// partition (default 3; negative = never). Sends the selector marks as
	// ordered are never retried elsewhere: their error is reported.
	SendRetries int
	// SendTimeout bounds one attempt of a send when the context has no
	// earlier deadline (default 3s, MetaQ's sendTimeout).
	SendTimeout time.Duration
	// MaxMessageSize rejects larger data blocks before they are sent
	// (default 4 MiB, the broker's default maxMessageSize; a broker closes
	// the connection on a put over its limit).
	MaxMessageSize int
	// NoChecksum sends puts without MetaQ's CRC32 checksum field.
	NoChecksum bool
	// Linger, when > 0, lets SendAsync hold a message up to Linger so that
	// the messages for one partition go out together in one batch put
	// (mput; docs/client.md "Batching"): a batch leaves when it holds
	// BatchSize messages, about MaxMessageSize/2 bytes, or Linger after
	// its first message. Default 0: every send leaves at once. Send and
	// SendToPartition never linger. A partition's batches leave in the
	// order they were closed, and a connection holds at most MaxInFlight ×
	// BatchSize lingering messages (SendAsync blocks, bounded by its ctx).
	Linger time.Duration
	// BatchSize is the most messages a lingering batch collects (default
	// 1000, at most protocol.MaxBatchCount).
	BatchSize int
}

// ConsumerOptions are the Consumer's knobs.
type ConsumerOptions struct {
	// ConsumerID names this consumer in its group (default
	// zkmeta.NewConsumerID(): <hostname>-<pid>-<millis>-<seq>). The ZooKeeper
	// node is <group>_<ConsumerID>.
	ConsumerID string
	// Broadcast makes every consumer of the group read every partition, with
	// offsets in a local file (OffsetDir) instead of ZooKeeper and no owner
	// nodes (MetaQ's broadcast consumption).
	Broadcast bool
	// Concurrency selects the handler mode: 0 (default) is ordered — one
	// goroutine per partition, messages in offset order; N > 0 is concurrent —
	// a pool of N goroutines shared by every partition, and the committed
	// offset never passes a message still being handled.
	Concurrency int
	// From is where a group starts in a partition it has no committed offset
	// for (default FromEarliest, as MetaQ).
	From StartPosition
	// CommitInterval is how often offsets are committed (default 5s); they
	// are also committed when a partition is released and on Close.
	// Duplicates after a crash are bounded by what was consumed in one
	// interval.
	CommitInterval time.Duration
	// MaxFetchBytes is the get's maxSize (default 1 MiB; the broker caps it
	// at its maxTransferSize but always returns at least one message).
	MaxFetchBytes int
	// MaxWait is the long-polling wait of a get (default 5s).
	MaxWait time.Duration
	// Prefetch is how many fetched batches per partition may wait for the
	// handler (default 1).
	Prefetch int
	// RetryPolicy decides what happens when the handler returns an error
	// (default: BrokerRetry — given back to the broker's retry topic with a
	// growing delay, dead-lettered after 16 returns; ordered consumers retry
	// in place first. DefaultRetryPolicy() redelivers in place forever).
	RetryPolicy RetryPolicy
	// OffsetStore replaces the default offset storage (ZooKeeper; a
	// FileOffsetStore in OffsetDir for broadcast consumers).
	OffsetStore OffsetStore
	// OffsetDir holds broadcast consumers' offset files, one JSON file per
	// group (default $HOME/.metaq_offsets, as MetaQ's LocalOffsetStorage).
	// Two broadcast consumers of one group on one machine need different
	// directories.
	OffsetDir string
	// ClaimBackoff and MaxClaimBackoff pace the retries of an owner node
	// still held by the previous owner (defaults 50ms and 2s).
	ClaimBackoff    time.Duration
	MaxClaimBackoff time.Duration
}

func (c Config) withDefaults() Config {
	if c.ZKRoot == "" {
		c.ZKRoot = zkmeta.DefaultRoot
	}
	if c.ZKSessionTimeout <= 0 {
		c.ZKSessionTimeout = 30 * time.Second
	}
	if c.ZKConnectionTimeout <= 0 {
		c.ZKConnectionTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.ReconnectBackoff <= 0 {
		c.ReconnectBackoff = 50 * time.Millisecond
	}
	if c.MaxReconnectBackoff <= 0 {
		c.MaxReconnectBackoff = 5 * time.Second
	}
	c.MaxReconnectBackoff = max(c.MaxReconnectBackoff, c.ReconnectBackoff)
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1024
	}
	p := &c.Producer
	if p.Selector == nil {
		p.Selector = RoundRobin()
	}
	if p.SendRetries == 0 {
		p.SendRetries = 3
	} else if p.SendRetries < 0 {
		p.SendRetries = 0
	}
	if p.SendTimeout <= 0 {
		p.SendTimeout = 3 * time.Second
	}
	if p.BatchSize <= 0 {
		p.BatchSize = 1000
	}
	p.BatchSize = min(p.BatchSize, protocol.MaxBatchCount)
	if p.MaxMessageSize <= 0 {
		p.MaxMessageSize = 4 << 20
	}
	o := &c.Consumer
	if o.CommitInterval <= 0 {
		o.CommitInterval = 5 * time.Second
	}
	if o.MaxFetchBytes <= 0 {
		o.MaxFetchBytes = 1 << 20
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Second
	}
	if o.Prefetch <= 0 {
		o.Prefetch = 1
	}
	if o.RetryPolicy == nil {
		o.RetryPolicy = &BrokerRetry{} // retry_broker.go
	}
	if o.ClaimBackoff <= 0 {
		o.ClaimBackoff = 50 * time.Millisecond
	}
	if o.MaxClaimBackoff <= 0 {
		o.MaxClaimBackoff = 2 * time.Second
	}
	o.MaxClaimBackoff = max(o.MaxClaimBackoff, o.ClaimBackoff)
	if o.OffsetDir == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		o.OffsetDir = filepath.Join(home, ".metaq_offsets")
	}
	return c
}

func (c *Config) connConfig() *connConfig {
	return &connConfig{
		dialTimeout:    c.DialTimeout,
		writeTimeout:   max(c.RequestTimeout, 10*time.Second),
		heartbeat:      c.HeartbeatInterval,
		requestTimeout: c.RequestTimeout,
		backoffMin:     c.ReconnectBackoff,
		backoffMax:     c.MaxReconnectBackoff,
		window:         c.MaxInFlight,
		maxReplyBody:   64 << 20,
		log:            c.Logger,
		sec:            security{tls: c.TLS, tlsPort: c.TLSPort, user: c.User, secret: c.Secret},
	}
}

// slogPrintf adapts slog to zkmeta's Printf logger (at debug level: zkmeta
// logs every connect; warnings are what matters to a client user).
type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelInfo) {
		p.l.Info(fmt.Sprintf(format, args...))
	}
}

func (c *Config) newZK() (*zkmeta.Client, error) {
	if c.ZKConnect == "" {
		return nil, errors.New("metaq client: Config.ZKConnect is required")
	}
	return zkmeta.New(zkmeta.Config{
		ConnectString:     c.ZKConnect,
		Root:              c.ZKRoot,
		SessionTimeout:    c.ZKSessionTimeout,
		ConnectionTimeout: c.ZKConnectionTimeout,
		Auth:              c.ZKAuth,
		Logger:            slogPrintf{c.Logger.With("component", "zookeeper")},
	})
}
