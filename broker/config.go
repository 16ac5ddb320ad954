package broker

import (
	"log/slog"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/conf"
)

// ConfPolicy accepts topics the way MetaQ does: a topic is accepted when a
// `[topic=…]` section (exact or wildcard) matches it.
type ConfPolicy struct{ C *conf.Config }

// Lookup implements TopicPolicy.
func (p ConfPolicy) Lookup(topic string) (TopicSettings, bool) {
	t, ok := topicConfig(p.C, topic) // server.ini + online configuration (topicconfig.go)
	if !ok {
		return TopicSettings{}, false
	}
	return TopicSettings{NumPartitions: t.NumPartitions, AcceptPublish: t.AcceptPublish, AcceptSubscribe: t.AcceptSubscribe}, true
}

// Explicit lists the topics named without wildcards (registered at start).
func (p ConfPolicy) Explicit() []string { return p.C.ExplicitTopics() }

// StoreConfig maps server.ini to the store's configuration.
func StoreConfig(c *conf.Config, log *slog.Logger) store.Config {
	sys := c.System
	sc := store.Config{
		Dir:              sys.DataPath,
		BrokerID:         sys.BrokerID,
		SegmentSize:      sys.MaxSegmentSize,
		IndexFileSize:    sys.IndexFileSize,
		UnflushThreshold: sys.UnflushThreshold,
		UnflushInterval:  sys.UnflushInterval,
		MaxMessageSize:   sys.MaxMessageSize,
		Retention:        retention(sys.DeletePolicy, log),
		DeleteWhen:       sys.DeleteWhen,
		Logger:           log,
	}
	sc.TopicRetention = func(topic string) time.Duration {
		t, ok := topicConfig(c, topic)
		if !ok {
			return 0
		}
		d := retention(t.DeletePolicy, nil)
		if d == 0 && sc.Retention > 0 {
			// The topic keeps its messages (archive) while [system] deletes:
			// 0 would mean "use Retention" to the store.
			return keepForever
		}
		return d
	}
	return sc
}

// keepForever is the per-topic retention of a topic that keeps its
// messages (deletePolicy archive, docs/configuration.md) under a [system]
// deletePolicy that deletes.
const keepForever = time.Duration(1 << 62) // about 146 years

func retention(r conf.Retention, log *slog.Logger) time.Duration {
	if !r.Delete {
		if r.Archive && log != nil {
			log.Warn("deletePolicy archive is not implemented: old segments are kept")
		}
		return 0
	}
	return r.Keep
}

// ServerOptions maps server.ini to the server's options (Store and Topics
// are filled in by the caller).
func ServerOptions(c *conf.Config, log *slog.Logger) Options {
	sys := c.System
	return Options{
		Addr:            sys.ListenAddr(),
		BrokerID:        sys.BrokerID,
		HostName:        sys.HostName,
		Topics:          ConfPolicy{C: c},
		MaxMessageSize:  sys.MaxMessageSize,
		MaxTransferSize: sys.MaxTransferSize,
		IdleTimeout:     sys.IdleTimeout,
		MaxConnections:  sys.MaxConnections,

		MaxPendingPutBytes: sys.MaxPendingPutBytes,
		PutDataTimeout:     putDataTimeout(sys.PutDataTimeout),
		MaxParkedGets:      sys.MaxParkedGets,
		Logger:             log,
		ConfigPath:         c.Path,
		DataPath:           sys.DataPath,
		Tx: tx.Config{
			MaxTimeout:     sys.MaxTxTimeout,
			CheckInterval:  sys.TransactionCheckInterval,
			CheckMax:       sys.TransactionCheckMax,
			MaxOpen:        sys.MaxTxTimeoutTimerCapacity,
			MaxOpenPerConn: sys.MaxTxPerConnection,
			// flushTxLogAtCommit 1 (the default): a txend's reply waits for its group commit.
			EndWithoutFlush: sys.FlushTxLogAtCommit != 1,
		},
	}
}

// putDataTimeout maps putDataTimeoutMs (0 = only idleTimeout applies) to
// Options.PutDataTimeout (0 = default, negative = none).
func putDataTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
