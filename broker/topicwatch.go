package broker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/zkmeta"
)

// The broker side of the online topic configuration (topicconfig.go): a
// watch on /meta/config/topics (zkmeta re-arms it after every event and
// re-reads everything after a reconnection or session expiry; the channel
// keeps only the latest state, so nothing piles up), and SIGHUP /
// `metaq broker reload`, which re-read server.ini's topic sections.

type topicWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // serializes applyTopics
}

var topicWatches sync.Map // *Broker → *topicWatch

// watchTopicConfig starts following /meta/config/topics (ZooKeeper mode).
func (b *Broker) watchTopicConfig() {
	zc := b.ZK()
	if zc == nil {
		return
	}
	ov := overlayOf(b.Config)
	ctx, cancel := context.WithCancel(context.Background())
	w := &topicWatch{cancel: cancel, done: make(chan struct{})}
	topicWatches.Store(b, w)
	ch := zc.WatchChildrenData(ctx, zc.Paths().ConfigTopics())
	go func() {
		defer close(w.done)
		bad := map[string]string{} // node → data last logged as bad (logged once per value)
		for nodes := range ch {
			m := make(map[string]TopicOverride, len(nodes))
			before := ov.online.Load()
			for name, data := range nodes {
				if err := zkmeta.ValidateName("topic", name); err != nil {
					continue
				}
				o, err := ParseTopicOverride(data)
				if err != nil {
					// docs/zookeeper.md: a bad node is ignored and the
					// previous state stays (the topic is not dropped).
					prev, had := TopicOverride{}, false
					if before != nil {
						prev, had = (*before)[name]
					}
					if bad[name] != string(data) {
						bad[name] = string(data)
						b.log.Error("ignoring the online configuration of a topic", "topic", name, "err", err, "keptPrevious", had)
					}
					if had {
						m[name] = prev
					}
					continue
				}
				delete(bad, name)
				if t, ok := b.baseConfig().Topic(name); ok && t.Pattern == name {
					b.log.Warn("topic configured both in server.ini and in ZooKeeper: the server.ini section wins", "topic", name)
				}
				m[name] = o
			}
			for name := range bad {
				if _, ok := nodes[name]; !ok {
					delete(bad, name)
				}
			}
			ov.online.Store(&m) // only this goroutine writes it
			var prev []string
			if before != nil {
				for k := range *before {
					prev = append(prev, k)
				}
			}
			b.applyTopics(w, prev)
		}
	}()
}

// stopTopicWatch stops applying online changes (before Stop unregisters:
// an applied change registers topics). The configuration in force stays:
// the broker serves on through zk.zkSyncTimeMs and the drain; Stop drops
// it once nothing serves (docs/configuration.md, "Reloading").
func (b *Broker) stopTopicWatch() {
	if v, ok := topicWatches.LoadAndDelete(b); ok {
		w := v.(*topicWatch)
		w.cancel()
		<-w.done
	}
}

// resumeTopics puts the topic configuration in force of a stopped broker
// (Broker.stoppedTopics) on c, for the broker resuming it
// (StartOptions.Resume): a reloaded server.ini stays in force, and the
// online configuration applies at once; the topic watch then reads
// ZooKeeper again and applies what changed meanwhile.
func resumeTopics(c *conf.Config, from *topicOverlay) {
	if from == nil {
		return
	}
	ov := overlayOf(c)
	ov.reloaded.Store(from.reloaded.Load())
	ov.online.Store(from.online.Load())
}

// baseConfig is the server.ini in force (the reloaded one after a reload).
func (b *Broker) baseConfig() *conf.Config {
	if r := overlayOf(b.Config).reloaded.Load(); r != nil {
		return r
	}
	return b.Config
}

// applyTopics brings the topic table and the ZooKeeper registration in line
// with the current configuration. prev are topics that may have lost their
// online configuration.
func (b *Broker) applyTopics(w *topicWatch, prev []string) {
	if w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
	}
	changed, dropped := b.Server.topics.reloadSettings()
	var reg *zkmeta.BrokerRegistry
	if b.zk != nil {
		b.zk.mu.Lock()
		reg = b.zk.reg
		b.zk.mu.Unlock()
	}
	if len(changed)+len(dropped) > 0 {
		sort.Strings(changed)
		sort.Strings(dropped)
		b.log.Info("topic configuration changed", "changed", changed, "noLongerAccepted", dropped)
	}
	if reg == nil {
		return
	}
	names := map[string]bool{}
	for _, n := range append(append(append(onlineTopics(b.Config), changed...), dropped...), prev...) {
		names[n] = true
	}
	for _, n := range b.baseConfig().ExplicitTopics() {
		names[n] = true
	}
	// One deadline for all the unregisters: with ZooKeeper away each would
	// wait out its own, and a reload dropping N topics (which a stop waits
	// for) took N times that. What is left when it passes is logged once;
	// the topics' nodes go with the broker's session at the latest.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var failed []string
	var lastErr error
	for n := range names {
		if _, ok := topicConfig(b.Config, n); ok {
			b.zk.registerTopic(reg, n)
			continue
		}
		if err := reg.UnregisterTopic(ctx, n); err != nil {
			failed, lastErr = append(failed, n), err
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		b.log.Warn("unregistering topics no longer accepted", "topics", failed, "err", lastErr)
	}
	b.zk.registerClusterTopics(reg) // a wildcard section may be new (zktopics.go)
}

// ReloadTopics re-reads server.ini and applies its topic sections (MetaQ's
// reload-config): new and changed [topic=…] sections take effect at once.
// A file that also changes a key outside the topic sections is refused as a
// whole, naming the keys (docs/configuration.md, "Reloading"): those need a
// restart, and the topic sections inherit [system], so applying them would
// apply part of it.
func (b *Broker) ReloadTopics() error {
	if b.Config.Path == "" {
		return fmt.Errorf("the broker was started without a server.ini: nothing to reload")
	}
	c, err := conf.Load(b.Config.Path)
	if err != nil {
		return fmt.Errorf("reload: %s: %w", b.Config.Path, err)
	}
	if changed := b.Config.StaticChanges(c); len(changed) > 0 {
		return fmt.Errorf("reload: %s changes %s, which need a restart; nothing was applied (revert them to reload the topic sections)",
			b.Config.Path, strings.Join(changed, ", "))
	}
	ov := overlayOf(b.Config)
	var prev []string
	if old := ov.reloaded.Load(); old != nil {
		prev = old.ExplicitTopics()
	} else {
		prev = b.Config.ExplicitTopics()
	}
	ov.reloaded.Store(c)
	var w *topicWatch
	if v, ok := topicWatches.Load(b); ok {
		w = v.(*topicWatch)
	}
	b.applyTopics(w, prev)
	b.log.Info("reloaded the topic sections of server.ini", "path", b.Config.Path, "topics", len(c.Topics))
	return nil
}
