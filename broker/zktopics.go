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

// followClusterTopics runs until stop is called (zkRegistration.close). It
// runs whatever the sections at start: a reload may add a wildcard section
// (applyTopics calls registerClusterTopics with the last list seen).
func (z *zkRegistration) followClusterTopics(client *zkmeta.Client, reg *zkmeta.BrokerRegistry) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lists := client.WatchChildren(ctx, client.Paths().BrokerTopics())
	go func() {
		defer close(done)
		for names := range lists {
			z.mu.Lock()
			z.clusterTopics = names
			z.mu.Unlock()
			z.registerClusterTopics(reg)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// registerClusterTopics registers each topic of the cluster's last list that
// the configuration in force accepts (topicConfig: server.ini as reloaded,
// and the online configuration) and that is not registered yet.
func (z *zkRegistration) registerClusterTopics(reg *zkmeta.BrokerRegistry) {
	z.mu.Lock()
	names := z.clusterTopics
	z.mu.Unlock()
	for _, name := range names {
		if strings.HasPrefix(name, "%") {
			continue
		}
		if _, ok := reg.Topic(name); ok {
			continue
		}
		if _, ok := topicConfig(z.cfg, name); ok {
			z.registerTopic(reg, name)
		}
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
