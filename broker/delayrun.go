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
	if adjust != nil {
		adjust(&dc)
	}
	d, err := delay.Open(dc)
	if err != nil {
		return nil, fmt.Errorf("starting the delay service: %w", err)
	}
	return d, nil
}
