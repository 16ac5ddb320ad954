package broker

import (
	"context"
	"strings"

	"github.com/metaqgo/metaq/zkmeta"
)

// A broker with a wildcard section (`[topic=*]`, `[topic=log-*]`) accepts
// topics it has never seen. Registering them only on their first put here
// meant a broker started later never got traffic for the topics already in
// the cluster: producers choose among the brokers registered for a topic,
// and nothing ever put to the new one (issue 12.8). So the broker follows
// the cluster's topic list (`<root>/brokers/topics`, what every broker
// registers under) and registers each topic its sections accept, at start
// and whenever one appears. zkmeta's watch re-arms the ZooKeeper watch
// after every change, drains go-zookeeper's events and reads the list again
// after a reconnection or session expiry, so nothing is missed.
//
// Topics starting with '%' are the brokers' own system topics (retry, dead
// letters, …): each broker registers those it writes itself.

// followClusterTopics runs until stop is called (zkRegistration.close).
// A broker whose sections are all exact names has nothing to follow (those
// are registered at start).
func (z *zkRegistration) followClusterTopics(client *zkmeta.Client, reg *zkmeta.BrokerRegistry) (stop func()) {
	if !z.hasWildcard() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lists := client.WatchChildren(ctx, client.Paths().BrokerTopics())
	go func() {
		defer close(done)
		for names := range lists {
			for _, name := range names {
				if strings.HasPrefix(name, "%") {
					continue
				}
				if _, ok := reg.Topic(name); ok {
					continue
				}
				if _, ok := z.cfg.Topic(name); ok {
					z.registerTopic(reg, name)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// stopFollowing ends followClusterTopics (idempotent): before unregistering,
// so that a topic appearing meanwhile is not registered again.
func (z *zkRegistration) stopFollowing() {
	z.mu.Lock()
	stop := z.stopFollow
	z.stopFollow = nil
	z.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// hasWildcard reports whether a [topic=…] section is a pattern.
func (z *zkRegistration) hasWildcard() bool {
	for _, t := range z.cfg.Topics {
		if t.Wildcard() {
			return true
		}
	}
	return false
}
