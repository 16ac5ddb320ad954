package broker

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/metaqgo/metaq/broker/delay"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
)

// openDelay starts the delay service over the opened store: its side files
// live in <dataPath>/delay, retry and dead-letter topics it writes are
// registered in ZooKeeper like topics clients write.
func openDelay(c *conf.Config, st *store.Store, log *slog.Logger, zk *zkRegistration, adjust func(*delay.Config)) (*delay.Service, error) {
	dc := delay.Config{
		Store:             st,
		BrokerID:          c.System.BrokerID,
		Dir:               filepath.Join(c.System.DataPath, "delay"),
		Levels:            c.System.Delay.DelayLevels(),
		MaxReconsumeTimes: c.System.Delay.MaxReconsume(),
		Logger:            log,
	}
	if zk != nil {
		dc.OnTopic = zk.topicWritten
	}
	dc.Partitions = func(topic string) (int, bool) { return delayPartitions(c, topic) }
	if adjust != nil {
		adjust(&dc)
	}
	d, err := delay.Open(dc)
	if err != nil {
		return nil, fmt.Errorf("starting the delay service: %w", err)
	}
	return d, nil
}

// delayPartitions is the delay service's Config.Partitions: how many
// partitions topic has here, from server.ini and the online configuration.
// In ZooKeeper mode nothing is known until the online configuration was
// read (topicwatch.go): a delayed message due at start for a topic only
// ZooKeeper configures is delivered, not refused.
func delayPartitions(c *conf.Config, topic string) (int, bool) {
	if c.ZK.Enable {
		v, ok := overlays.Load(c)
		if !ok || v.(*topicOverlay).online.Load() == nil {
			return 0, false
		}
	}
	t, ok := topicConfig(c, topic)
	return t.NumPartitions, ok
}
